"""The test bed cannot reach production: its mark (plugins/module_utils/_testbed.py), and the three
guards that read it: testbed-prepare.yml's module, the test double, the gate and the live reading.

On a host: molecule/adopt (the mark taken away from a converged container).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MODULES, REPO, TESTBED_MARK, marked_root, run_module, testbed
from double_harness import DOUBLE, remediated_double

GATE = MODULES / "sglang_gate.py"
PREPARE_GUARD = REPO / "playbooks" / "library" / "sglang_testbed_mark.py"


def test_a_marked_container_and_nothing_else_is_a_test_bed(tmp_path):
    assert TESTBED_MARK.mark_problem(str(marked_root(tmp_path / "ok"))) == ""
    # Not a container: the mark alone is not enough.
    root = marked_root(tmp_path / "no-container")
    (root / ".dockerenv").unlink()
    assert "not a container" in TESTBED_MARK.mark_problem(str(root))
    # Podman's file counts as a container too.
    (root / "run").mkdir()
    (root / "run" / ".containerenv").write_text("")
    assert TESTBED_MARK.mark_problem(str(root)) == ""
    # A container without the mark, an empty one (the mount point in a committed image), another text.
    root = marked_root(tmp_path / "no-mark")
    (root / "etc" / "sglang-testbed").unlink()
    assert "/etc/sglang-testbed cannot be read" in TESTBED_MARK.mark_problem(str(root))
    for text in ("", "test bed\n", TESTBED_MARK.MARK_TEXT + "more", TESTBED_MARK.MARK_TEXT.strip()):
        (root / "etc" / "sglang-testbed").write_text(text)
        assert "does not hold the test bed's mark" in TESTBED_MARK.mark_problem(str(root)), text
    # The default root is the module's ROOT: "/" on a host. This machine is not a marked container.
    assert TESTBED_MARK.ROOT == "/"


def test_the_test_bed_mounts_the_mark_it_checks_read_only(tmp_path):
    source = tmp_path / "mark"
    flags = testbed.mark_flags(source)
    assert flags == ["-v", "%s:/etc/sglang-testbed:ro" % source]
    assert source.read_text() == TESTBED_MARK.MARK_TEXT and source.stat().st_mode & 0o777 == 0o644
    source.write_text("stale")
    testbed.mark_flags(source)
    assert source.read_text() == TESTBED_MARK.MARK_TEXT
    # Every container the test bed starts carries it: the fleet, the converged image's, Molecule's.
    assert "/etc/sglang-testbed:ro" in " ".join(testbed.container_flags())
    instances = (REPO / "testbed" / "instances.py").read_text()
    assert "run_args(p, scenario, mark)" in instances and "mark = testbed.mark_flags()" in instances


def _run_double(tmp_path, root, directory=None):
    """The double started with its mark looked up under ``root``; from ``directory`` when given (its
    installed layout), else from the checkout."""
    double = DOUBLE
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        double = Path(shutil.copy(DOUBLE, directory / DOUBLE.name))
    env = {"PATH": "/usr/bin:/bin", "SGLANG_TEST_DOUBLE_MARK_ROOT": str(root)}
    return subprocess.run([sys.executable, str(double), "--model-path", str(tmp_path), "--port", "1"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_the_double_refuses_to_start_on_a_host_without_the_mark(tmp_path):
    unmarked = tmp_path / "real-host"
    unmarked.mkdir()
    proc = _run_double(tmp_path, unmarked)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "refusing to start: this host is not a test-bed container (not a container" in proc.stdout
    # As testbed-prepare.yml installs it: the rule beside it.
    installed = tmp_path / "usr-local-lib"
    shutil.copy(REPO / "plugins" / "module_utils" / "_testbed.py", installed.mkdir() or installed / "_testbed.py")
    proc = _run_double(tmp_path, unmarked, installed)
    assert proc.returncode == 1 and "not a test-bed container (not a container" in proc.stdout, proc.stdout
    # Without the rule anywhere it refuses too, naming what is missing.
    proc = _run_double(tmp_path, marked_root(tmp_path / "marked"), tmp_path / "alone")
    assert proc.returncode == 1 and "neither beside the double nor in a checkout" in proc.stdout, proc.stdout
    # Marked, it goes on to SGLang's own checks (here: no sglang installed for it).
    proc = _run_double(tmp_path, marked_root(tmp_path / "marked"), installed)
    assert "refusing to start" not in proc.stdout and "No module named 'sglang'" in proc.stdout, proc.stdout


def test_the_gate_refuses_the_double_on_a_host_without_the_mark(tmp_path, run_double, real_059):
    double = remediated_double(tmp_path, run_double, real_059)
    args = dict(url="http://127.0.0.1:%d" % double.port, wait=30, delay=0.2, prompts=["One prompt."],
                max_new_tokens=8, expected={"version": "0.5.9"}, accept_length_min=2.5)
    rc, res = run_module(GATE, tmp_path, args)
    assert rc == 0 and res["failures"] == [], res["failures"]
    unmarked = tmp_path / "real-host"
    unmarked.mkdir()
    rc, res = run_module(GATE, tmp_path, args, env={"SGLANG_TEST_DOUBLE_MARK_ROOT": str(unmarked)})
    assert [f["code"] for f in res["failures"]] == ["live.test_double"], res["failures"]
    assert "not a test-bed container" in res["failures"][0]["text"]
    # The live reading (probe, audit) says the same; it is a live finding of its own.
    assert "live.test_double" in [f["code"] for f in res["reading"]["reasons"]]
    assert res["reading"]["classes"][0] == "live_settings"


def test_a_server_without_the_doubles_field_is_never_taken_for_it(monkeypatch, tmp_path):
    from ansible_collections.fleetops.sglang.plugins.module_utils import _live, _testbed
    monkeypatch.setattr(_testbed, "ROOT", str(tmp_path))  # unmarked
    sglang = {"version": "0.5.9", "speculative_algorithm": "EAGLE3"}
    assert _live.test_double_finding(sglang) is None
    assert _live.test_double_finding(dict(sglang, test_double={"note": "x"}))["code"] == "live.test_double"
    monkeypatch.setattr(_testbed, "ROOT", str(marked_root(tmp_path / "marked")))
    assert _live.test_double_finding(dict(sglang, test_double={"note": "x"})) is None


@pytest.mark.parametrize("marked", [True, False])
def test_prepares_guard_module_refuses_an_unmarked_host(tmp_path, marked):
    root = marked_root(tmp_path / "root") if marked else tmp_path
    rc, res = run_module(PREPARE_GUARD, tmp_path, {}, env={"SGLANG_TEST_DOUBLE_MARK_ROOT": str(root)})
    if marked:
        assert rc == 0 and res["marked"] is True and res["changed"] is False, res
    else:
        assert rc == 1 and res["failed"] is True, res
        assert "not a test-bed container (not a container" in res["msg"] and "Check -i and --limit" in res["msg"]


def _groups(node, out=None):
    out = set() if out is None else out
    for name, child in ((node or {}).get("children") or {}).items():
        out.add(name)
        _groups(child, out)
    return out


def test_the_demo_is_no_default_inventory_and_its_group_is_not_productions():
    import configparser
    import yaml
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    assert not cfg.has_option("defaults", "inventory"), "ansible.cfg names a default inventory"
    production = _groups(yaml.safe_load((REPO / "inventory" / "production" / "hosts.yml").read_text())["all"])
    assert "sglang" in production
    demo_groups = {p.stem for p in (REPO / "inventory" / "demo" / "group_vars").iterdir()}
    assert demo_groups == {"sglang_demo"} and not demo_groups & (production | {"all"})
    # The demo creates its hosts in that group and runs its playbooks on it, and on nothing else.
    demo = (REPO / "scripts" / "demo").read_text()
    assert "--group sglang_demo " in demo
    runs = [line for line in demo.splitlines() if re.match(r"^(exec )?ansible-playbook ", line)]
    assert len(runs) == 2 and all("-i inventory/demo -e sglang_target_hosts=sglang_demo " in r for r in runs), runs
