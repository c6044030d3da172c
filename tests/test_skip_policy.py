"""No unlisted skip (testbed/pytest_plugins/sglang_skip_policy.py, the list testbed/skips.yml).

Each case runs pytest in a subprocess on a tiny generated test file with the plugin loaded as
scripts/test loads it (``-p sglang_skip_policy``, its directory on PYTHONPATH) and a generated
list, and reads its exit status and output: an unlisted skip, xfail or deselection fails the
run naming the test, a listed one passes. The real list is checked against the node ids the
Molecule verifiers give (testinfra parametrizes each test by host).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import conftest
from conftest import REPO

PLUGIN_DIR = REPO / "testbed" / "pytest_plugins"
sys.path.insert(0, str(PLUGIN_DIR))
import sglang_skip_policy as policy  # noqa: E402

TINY = """
import pytest

def test_runs():
    pass

@pytest.mark.skip(reason="no frobnicator here")
def test_skipped_by_mark():
    pass

@pytest.fixture
def gadget():
    pytest.skip("the gadget is missing")

def test_skipped_in_a_fixture(gadget):
    pass

@pytest.mark.xfail(reason="known to be broken")
def test_expected_to_fail():
    assert False

@pytest.mark.parametrize("host", ["ansible://h1", "ansible://h2"])
def test_per_host(host):
    pass
"""

# As molecule/default/tests/conftest.py drops a distribution's cases.
DESELECTING_CONFTEST = """
import os

def pytest_collection_modifyitems(config, items):
    if os.environ.get("MOLECULE_DISTRO", "bookworm") == "bookworm":
        dropped = [i for i in items if getattr(i, "originalname", i.name) == "test_per_host"]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if i not in dropped]
"""

SKIPS = [
    {"test": "test_tiny.py::test_skipped_by_mark", "outcome": "skipped", "reason": "no frobnicator on CI"},
    {"test": "test_tiny.py::test_skipped_in_a_fixture", "reason": "the gadget is optional"},
    {"test": "test_tiny.py::test_expected_to_fail", "outcome": "xfailed", "reason": "upstream bug 1"},
]


def run(tmp_path: Path, allowed=None, *args: str, conftest_text: str = "", env=None, listed: bool = True):
    """pytest on test_tiny.py with the policy on (unless listed is False); (exit status, output)."""
    (tmp_path / "test_tiny.py").write_text(TINY)
    if conftest_text:
        (tmp_path / "conftest.py").write_text(conftest_text)
    skips = tmp_path / "skips.yml"
    skips.write_text(yaml.safe_dump({"allowed": allowed or []}))
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTEST_ADDOPTS", policy.ENV, "MOLECULE_DISTRO", "MOLECULE_SCENARIO_NAME")}
    clean.update(PYTHONPATH=str(PLUGIN_DIR), **(env or {}))
    if listed:
        clean[policy.ENV] = str(skips)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "sglang_skip_policy", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-q", "test_tiny.py", *args],
                          cwd=str(tmp_path), env=clean, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def test_an_unlisted_skip_fails_the_run_and_names_each_one(tmp_path):
    rc, out = run(tmp_path, [])
    assert rc == 1, out
    assert "skip policy: 3 unlisted" in out, out
    assert "SKIPPED test_tiny.py::test_skipped_by_mark" in out and "no frobnicator here" in out, out
    assert "SKIPPED test_tiny.py::test_skipped_in_a_fixture" in out and "the gadget is missing" in out, out
    assert "XFAILED test_tiny.py::test_expected_to_fail" in out and "known to be broken" in out, out
    # What to do, and where.
    assert "list it in" in out and str(tmp_path / "skips.yml") in out and 'reason: "' in out, out


def test_listed_skips_pass(tmp_path):
    rc, out = run(tmp_path, SKIPS)
    assert rc == 0, out
    assert "3 skipped or deselected, each listed" in out, out


def test_one_entry_missing_fails_on_that_one_only(tmp_path):
    rc, out = run(tmp_path, SKIPS[1:])
    assert rc == 1, out
    assert "skip policy: 1 unlisted" in out and "SKIPPED test_tiny.py::test_skipped_by_mark" in out, out
    assert "test_skipped_in_a_fixture" not in out.split("skip policy:")[1], out


def test_an_entry_for_another_outcome_does_not_list_it(tmp_path):
    wrong = [dict(SKIPS[0], outcome="deselected")] + SKIPS[1:]
    rc, out = run(tmp_path, wrong)
    assert rc == 1 and "SKIPPED test_tiny.py::test_skipped_by_mark" in out, out


def test_a_deselection_is_counted(tmp_path):
    rc, out = run(tmp_path, SKIPS, "-k", "not test_runs")
    assert rc == 1, out
    assert "DESELECTED test_tiny.py::test_runs" in out and "deselected by -k" in out, out
    rc, out = run(tmp_path, SKIPS + [{"test": "test_tiny.py::test_runs", "outcome": "deselected", "reason": "r"}],
                  "-k", "not test_runs")
    assert rc == 0, out


def test_a_conftests_deselection_needs_its_conditions(tmp_path):
    """A deliberate split, as molecule/default/tests/conftest.py makes: listed for its distribution only."""
    split = SKIPS + [{"test": "test_tiny.py::test_per_host[*]", "outcome": "deselected",
                      "when": {"MOLECULE_DISTRO": ["bookworm", ""]}, "reason": "Debian 12 leaves it to another"}]
    for distro in ("bookworm", None):
        rc, out = run(tmp_path, split, conftest_text=DESELECTING_CONFTEST,
                      env={"MOLECULE_DISTRO": distro} if distro else {})
        assert rc == 0, out
    # Unlisted (no entry, or the entry's conditions not met): fails, naming each host's case and the conftest.
    rc, out = run(tmp_path, SKIPS, conftest_text=DESELECTING_CONFTEST)
    assert rc == 1, out
    assert "DESELECTED test_tiny.py::test_per_host[ansible://h1]" in out, out
    assert "DESELECTED test_tiny.py::test_per_host[ansible://h2]" in out, out
    assert "conftest.py:" in out and "(pytest_collection_modifyitems)" in out, out
    split[-1]["when"] = {"MOLECULE_DISTRO": "trixie"}
    rc, out = run(tmp_path, split, conftest_text=DESELECTING_CONFTEST, env={"MOLECULE_DISTRO": "bookworm"})
    assert rc == 1 and "test_per_host[ansible://h1]" in out, out


def test_a_deselect_option_is_named(tmp_path):
    rc, out = run(tmp_path, SKIPS, "--deselect", "test_tiny.py::test_runs")
    assert rc == 1 and "DESELECTED test_tiny.py::test_runs" in out and "deselected by --deselect" in out, out


def test_off_unless_a_list_is_named(tmp_path):
    rc, out = run(tmp_path, [], listed=False)
    assert rc == 0 and "skip policy" not in out, out


def test_a_malformed_list_is_a_usage_error(tmp_path):
    rc, out = run(tmp_path, [{"test": "test_tiny.py::test_skipped_by_mark"}])
    assert rc == 4 and "allowed entry 1 (test_tiny.py::test_skipped_by_mark): 'reason' is required" in out, out
    rc, out = run(tmp_path, [{"test": "x", "reason": "r", "becuase": "typo"}])
    assert rc == 4 and "unknown keys ['becuase']" in out, out


LIST = REPO / "testbed" / "skips.yml"


def test_the_list_is_valid_and_every_entry_has_a_reason():
    root, entries = policy.load(LIST)
    assert root == REPO
    assert entries and all(len(e["reason"]) > 40 for e in entries)


@pytest.mark.parametrize("nodeid, outcome, env, listed", [
    # molecule/default/tests/conftest.py: on Debian 12 test_ssh_distro.py is deselected...
    ("molecule/default/tests/test_ssh_distro.py::test_x[ansible://sglang-default-bookworm]", "deselected",
     {"MOLECULE_SCENARIO_NAME": "default", "MOLECULE_DISTRO": "bookworm"}, True),
    ("molecule/default/tests/test_ssh_distro.py::test_x[ansible://sglang-default-trixie]", "deselected",
     {"MOLECULE_SCENARIO_NAME": "default", "MOLECULE_DISTRO": "trixie"}, False),
    ("molecule/default/tests/test_ssh_distro.py::test_x[ansible://h]", "skipped",
     {"MOLECULE_SCENARIO_NAME": "default", "MOLECULE_DISTRO": "bookworm"}, False),
    # ... on Debian 13 the token grep.
    ("molecule/default/tests/test_default.py::test_a_token_reaches_only_the_0600_environment_file"
     "[ansible://sglang-default-trixie]", "deselected", {"MOLECULE_SCENARIO_NAME": "default", "MOLECULE_DISTRO": "trixie"},
     True),
    ("molecule/default/tests/test_default.py::test_a_token_reaches_only_the_0600_environment_file"
     "[ansible://sglang-default-bookworm]", "deselected",
     {"MOLECULE_SCENARIO_NAME": "default", "MOLECULE_DISTRO": "bookworm"}, False),
    ("molecule/fleet/tests/test_ssh_distro.py::test_x[ansible://h]", "deselected",
     {"MOLECULE_SCENARIO_NAME": "fleet", "MOLECULE_DISTRO": "bookworm"}, False),
    # The machine-dependent split: Debian 12 packages no Python 3.9 or 3.10.
    ("tests/unit/plugins/module_utils/test_eagle3.py::test_engine_runs_on_python_39", "skipped", {}, True),
    ("tests/unit/plugins/module_utils/test_parse_server_args.py::test_defaults_parse[0.5.9]", "skipped", {}, False),
])
def test_the_list_names_the_deliberate_splits_only(nodeid, outcome, env, listed):
    _, entries = policy.load(LIST)
    assert (policy.allowed_by(entries, nodeid, outcome, env) is not None) is listed


def test_the_wheelhouse_wheel_comes_first(tmp_path, monkeypatch):
    house, cache = tmp_path / "house", tmp_path / "cache"
    house.mkdir()
    (house / "sglang-0.5.9-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setattr(conftest, "WHEELHOUSE", house)
    monkeypatch.setattr(conftest, "WHEEL_CACHE", cache)
    monkeypatch.setattr(conftest.subprocess, "run", lambda *a, **kw: pytest.fail("downloaded"))
    assert conftest.wheel_059() == house / "sglang-0.5.9-py3-none-any.whl"


def test_a_failed_download_fails_saying_what_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "WHEELHOUSE", tmp_path / "house")
    monkeypatch.setattr(conftest, "WHEEL_CACHE", tmp_path / "cache")
    monkeypatch.setattr(conftest.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution"))
    with pytest.raises(pytest.fail.Exception) as failed:
        conftest.wheel_059()
    msg = str(failed.value)
    assert "pip download --no-deps sglang==0.5.9 -d %s" % (tmp_path / "cache") in msg, msg
    assert "scripts/wheelhouse %s 0.5.9" % (tmp_path / "house") in msg and "No matching distribution" in msg, msg
