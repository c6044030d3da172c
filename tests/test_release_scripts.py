"""The release scripts run the engine over real releases outside pytest: they share the
test bed's helpers (testbed/) with the tests, and import nothing of tests/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO

PROBE = """
import json, runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted(getattr(m, "__file__", None) or "" for m in list(sys.modules.values()))))
"""


@pytest.mark.parametrize("script", ["check-all-releases", "check-cuda-graph-replay"])
def test_a_release_script_imports_no_test_code(script):
    proc = subprocess.run([sys.executable, "-c", PROBE, str(REPO / "scripts" / script)], capture_output=True,
                          text=True, timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not [f for f in loaded if f.startswith(str(REPO / "tests"))], loaded
    assert not [f for f in loaded if "/_pytest/" in f or f.endswith("/pytest/__init__.py")]
    assert str(REPO / "testbed" / "checkout.py") in loaded
