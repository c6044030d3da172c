"""testbed/pytest_plugins/sglang_cpu.py: each test is charged with the CPU seconds it and the
children it waited for used, which scripts/test reports for the unit tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

PLUGIN_DIR = REPO / "testbed" / "pytest_plugins"
TINY = '''
import subprocess, sys


def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", "x = 0\\nfor i in range(6_000_000): x += i"], check=True)


def test_idles():
    import time
    time.sleep(0.5)
'''


def test_a_childs_cpu_is_charged_to_the_test_that_ran_it(tmp_path: Path) -> None:
    (tmp_path / "test_tiny.py").write_text(TINY)
    out = tmp_path / "cpu.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(PYTHONPATH=str(PLUGIN_DIR), SGLANG_TEST_CPU_FILE=str(out))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "sglang_cpu", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-q", "test_tiny.py"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spent = json.loads(out.read_text())
    burn, idle = spent["test_tiny.py::test_burns_in_a_child"], spent["test_tiny.py::test_idles"]
    # The child's loop costs a fraction of a second of CPU at least; sleeping costs next to none.
    assert burn > 0.2 and idle < 0.1 and burn > 5 * idle, spent
    assert "costliest 15 tests by CPU seconds" in proc.stdout and "test_burns_in_a_child" in proc.stdout, proc.stdout
