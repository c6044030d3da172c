"""The switch registry's checker (testbed/switches.py): small fake repositories, then the real one.

Each fake repository holds just what the checker reads: the role's argument specs, the registry,
a scenario's verifier or playbook and, where it matters, the test bed's variables.
"""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "testbed"))
import switches  # noqa: E402

SPECS = {"argument_specs": {
    "main": {"options": {
        "sglang_fast": {"type": "bool", "default": True, "description": "x"},
        "sglang_mode": {"type": "str", "choices": ["a", "b", "c"], "default": "a", "description": "x"},
        "sglang_name": {"type": "str", "default": "n", "description": "not a switch"},
        "sglang_drained": {"type": "bool", "default": False, "description": "x"},
    }},
    # An alias of main's option on a second entry point, and an internal entry point's own switch.
    "rollback": {"options": {"sglang_drained": {"type": "bool", "default": False, "description": "x"}}},
    "plan": {"options": {"_sglang_pass": {"type": "bool", "description": "no default: false"}}},
}}

VERIFIER = '''
import pytest

CASES = {"slow": {"sglang_fast": False}}


def test_fast_the_other_way(host):
    """sglang_fast=false runs every task."""
    assert host


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_table(host, name):
    assert name


def test_mode_b(host):
    assert "--mode b" in host


def test_names_nothing(host):
    assert host
'''

PLAYBOOK = '''---
- name: Converge with mode c and check it
  hosts: all
  tasks:
    - name: Converge with mode c
      ansible.builtin.include_role:
        name: sglang
      vars:
        sglang_mode: c
    - name: Check the mode
      ansible.builtin.assert:
        that: true
'''

UNIT_TEST = '''
def test_renders_the_flag():
    assert True
'''

T = "molecule/sc/tests/test_sc.py::"
OK: Dict[str, Any] = {
    "sglang_fast": {
        True: {"everywhere": "every run"},
        False: {"proven": [{"test": T + "test_fast_the_other_way", "asserts": "every task runs"}]},
    },
    "sglang_mode": {
        "a": {"everywhere": "every run"},
        "b": {"proven": [{"test": T + "test_mode_b", "mentions": ["--mode b"], "asserts": "the flag"}]},
        "c": {"proven": [{"test": "molecule/sc/converge.yml::Check the mode", "asserts": "mode c runs"}]},
    },
    "sglang_drained": {
        False: {"everywhere": "every run"},
        True: {"excused": "needs a load balancer",
               "below": [{"test": "tests/test_unit.py::test_renders_the_flag", "asserts": "the flag"}]},
    },
    "_sglang_pass": {
        False: {"everywhere": "rollback's plan"},
        True: {"proven": [{"test": T + "test_names_nothing", "set_in": "molecule/sc/vars.yml",
                           "asserts": "the plan is handed over"}]},
    },
}


def fake_repo(tmp_path: Path, registry: Dict[str, Any], demo: Optional[Dict[str, Any]] = None) -> Path:
    files = {
        "roles/sglang/meta/argument_specs.yml": yaml.safe_dump(SPECS, sort_keys=False),
        "testbed/switches.yml": yaml.safe_dump({"switches": registry}),
        "molecule/sc/tests/test_sc.py": VERIFIER,
        "molecule/sc/converge.yml": PLAYBOOK,
        "molecule/sc/vars.yml": yaml.safe_dump({"_sglang_pass": True}),
        "tests/test_unit.py": UNIT_TEST,
    }
    if demo is not None:
        files["inventory/demo/group_vars/sglang_demo.yml"] = yaml.safe_dump(demo)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def verdict(repo: Path):
    rows = switches.judge(repo, switches.load_switches(repo), switches.load_registry(repo))
    return {(r.switch, switches.key(r.value)): r for r in rows}


def run(repo: Path, capsys, *args: str):
    rc = switches.main(["report", "--repo", str(repo), *args])
    return rc, capsys.readouterr().out


def with_entry(name: str, value: Any, entry: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    registry = copy.deepcopy(OK)
    if entry is None:
        registry[name].pop(value)
    else:
        registry[name][value] = entry
    return registry


def test_the_switches_are_the_specs_bool_and_choice_options_with_their_default_first(tmp_path):
    found = switches.load_switches(fake_repo(tmp_path, OK))
    assert list(found) == ["sglang_fast", "sglang_mode", "sglang_drained", "_sglang_pass"]
    assert found["sglang_fast"].values == [True, False] and found["sglang_fast"].others == [False]
    assert found["sglang_mode"].values == ["a", "b", "c"] and found["sglang_mode"].others == ["b", "c"]
    # One switch for an alias on two entry points; a bool without a default is false.
    assert found["sglang_drained"].entry_points == ["main", "rollback"]
    assert found["_sglang_pass"].default is False and found["_sglang_pass"].values == [False, True]


def test_a_whole_registry_passes_strict_and_prints_every_value(tmp_path, capsys):
    rc, out = run(fake_repo(tmp_path, OK), capsys, "--strict")
    assert rc == 0, out
    rows = verdict(tmp_path)
    assert {k: r.status for k, r in rows.items()} == {
        ("sglang_fast", "true"): "everywhere", ("sglang_fast", "false"): "proven",
        ("sglang_mode", "a"): "everywhere", ("sglang_mode", "b"): "proven", ("sglang_mode", "c"): "proven",
        ("sglang_drained", "false"): "everywhere", ("sglang_drained", "true"): "excused",
        ("_sglang_pass", "false"): "everywhere", ("_sglang_pass", "true"): "proven"}
    assert rows[("sglang_fast", "false")].where == ["sc: test_fast_the_other_way"]
    assert rows[("sglang_mode", "c")].where == ["sc: Check the mode"]
    assert rows[("sglang_drained", "true")].where == ["below: unit: test_renders_the_flag"]
    assert re.search(r"^sglang_mode\s+a\s+default\s+everywhere\s+every run$", out, re.M), out
    assert re.search(r"^\s+c\s+other\s+proven\s+sc: Check the mode$", out, re.M), out
    assert "4 switches, 9 values: proven 4, everywhere 4, excused 1" in out


def test_a_switch_of_the_specs_with_no_entry_fails_strict_only(tmp_path, capsys):
    registry = copy.deepcopy(OK)
    registry.pop("sglang_drained")
    repo = fake_repo(tmp_path, registry)
    rows = verdict(repo)
    assert rows[("sglang_drained", "false")].status == rows[("sglang_drained", "true")].status == "BROKEN"
    rc, out = run(repo, capsys, "--strict")
    assert rc == 1
    assert "sglang_drained: a switch of the specs (main, rollback) with no entry in testbed/switches.yml" in out
    assert run(repo, capsys)[0] == 0


def test_a_value_with_no_entry_is_broken(tmp_path):
    rows = verdict(fake_repo(tmp_path, with_entry("sglang_mode", "c", None)))
    assert rows[("sglang_mode", "c")].status == "BROKEN"
    assert rows[("sglang_mode", "c")].problems == ["sglang_mode: c: no entry for this value"]


def test_a_stale_entry_and_a_value_the_switch_lacks_are_broken(tmp_path, capsys):
    registry = dict(copy.deepcopy(OK), sglang_gone={True: {"everywhere": "x"}})
    registry["sglang_mode"]["d"] = {"everywhere": "x"}
    rc, out = run(fake_repo(tmp_path, registry), capsys, "--strict")
    assert rc == 1
    assert "sglang_gone: in testbed/switches.yml but no entry point of" in out
    assert "sglang_mode: d is not a value of the switch (a, b, c)" in out


def test_a_test_that_is_not_there_is_broken(tmp_path, capsys):
    registry = with_entry("sglang_fast", False, {"proven": [
        {"test": T + "test_renamed", "asserts": "x"},
        {"test": "molecule/sc/tests/test_gone.py::test_x", "asserts": "x"},
        {"test": "molecule/sc/converge.yml::No such task", "asserts": "x"},
        # A parametrized case is its function: found.
        {"test": T + "test_the_table[slow]", "asserts": "the slow case"}]})
    rc, out = run(fake_repo(tmp_path, registry), capsys, "--strict")
    assert rc == 1
    problems = verdict(tmp_path)[("sglang_fast", "false")].problems
    assert problems == ["no test_renamed in %s/molecule/sc/tests/test_sc.py" % tmp_path,
                        "molecule/sc/tests/test_gone.py: no such file",
                        "no task or play named 'No such task' in %s/molecule/sc/converge.yml" % tmp_path]


def test_a_test_must_name_the_switch_or_what_it_asserts(tmp_path):
    registry = with_entry("sglang_fast", False, {"proven": [
        {"test": T + "test_names_nothing", "asserts": "x"},
        {"test": T + "test_mode_b", "mentions": ["--mode c"], "asserts": "x"},
        # Named by the module's table, not by the function itself: read together.
        {"test": T + "test_the_table", "asserts": "x"}]})
    registry["sglang_mode"]["b"] = {"proven": [{"test": T + "test_fast_the_other_way", "asserts": "x"}]}
    rows = verdict(fake_repo(tmp_path, registry))
    assert rows[("sglang_fast", "false")].problems == [
        T + "test_names_nothing does not name sglang_fast",
        T + "test_mode_b does not mention '--mode c'"]
    assert rows[("sglang_mode", "b")].problems == [T + "test_fast_the_other_way does not name sglang_mode and 'b'"]


def test_set_in_must_set_the_value_and_belong_to_the_test(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "other.yml").write_text(yaml.safe_dump([{"vars": {"_sglang_pass": True}}]))
    registry = with_entry("_sglang_pass", True, {"proven": [
        {"test": T + "test_names_nothing", "set_in": "playbooks/other.yml", "asserts": "x"}]})
    registry["_sglang_pass"][False] = {"proven": [
        {"test": T + "test_names_nothing", "set_in": "molecule/sc/vars.yml", "asserts": "x"}]}
    rows = verdict(fake_repo(tmp_path, registry))
    assert rows[("_sglang_pass", "true")].problems[0].endswith(
        "set_in playbooks/other.yml is neither the scenario's nor named by the test")
    assert rows[("_sglang_pass", "false")].problems[0].endswith(
        "set_in molecule/sc/vars.yml does not set _sglang_pass: false")


def test_a_host_proof_must_run_on_a_host_and_say_what_it_asserts(tmp_path):
    registry = with_entry("sglang_drained", True, {"proven": [
        {"test": "tests/test_unit.py::test_renders_the_flag", "asserts": "the flag"},
        {"test": T + "test_fast_the_other_way"}]})
    rows = verdict(fake_repo(tmp_path, registry))
    problems = rows[("sglang_drained", "true")].problems
    assert any("tests/test_unit.py::test_renders_the_flag is not run on a host" in p for p in problems), problems
    assert any("say in `asserts:` what it checks" in p for p in problems), problems


def test_excused_passes_strict_and_missing_fails_it(tmp_path, capsys):
    registry = with_entry("sglang_mode", "b", {"missing": "a run with mode b on a host, asserting the flag",
                                               "below": [{"test": "tests/test_unit.py::test_renders_the_flag",
                                                          "asserts": "the flag"}]})
    repo = fake_repo(tmp_path, registry)
    row = verdict(repo)[("sglang_mode", "b")]
    assert (row.status, row.problems) == ("MISSING", [])
    rc, out = run(repo, capsys, "--strict")
    assert rc == 1 and "MISSING 1" in out and "a run with mode b on a host, asserting the flag" in out
    assert run(repo, capsys)[0] == 0
    # An excuse or a gap must say why.
    for kind in ("excused", "missing"):
        rows = verdict(fake_repo(tmp_path, with_entry("sglang_mode", "b", {kind: ""})))
        assert rows[("sglang_mode", "b")].status == "BROKEN", kind


def test_everywhere_is_refused_where_the_test_bed_sets_another_value(tmp_path):
    rows = verdict(fake_repo(tmp_path, OK, demo={"sglang_fast": False, "sglang_mode": "a"}))
    assert rows[("sglang_fast", "true")].problems == [
        "sglang_fast: true: the test bed sets sglang_fast: false (inventory/demo/group_vars/sglang_demo.yml):"
        " name where the default runs"]
    assert rows[("sglang_mode", "a")].status == "everywhere"
    rows = verdict(fake_repo(tmp_path, with_entry("sglang_mode", "b", {"everywhere": "x"})))
    assert "`everywhere` is for the default value only" in rows[("sglang_mode", "b")].problems[0]


def test_the_json_file_holds_every_row(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc, _ = run(fake_repo(tmp_path, OK), capsys, "--json", str(out))
    rows = json.loads(out.read_text())
    assert rc == 0 and len(rows) == 9
    assert {k: rows[1][k] for k in ("switch", "value", "default", "status", "where")} == {
        "switch": "sglang_fast", "value": False, "default": False, "status": "proven",
        "where": ["sc: test_fast_the_other_way"]}


# --------------------------------------------------------------------------- the real repository


def _real_switches() -> Dict[str, Any]:
    """Read here independently of the checker: every bool or choices option of every entry point."""
    doc = yaml.safe_load((REPO / "roles" / "sglang" / "meta" / "argument_specs.yml").read_text())
    return {name: opt for spec in doc["argument_specs"].values() for name, opt in (spec.get("options") or {}).items()
            if opt.get("type") == "bool" or opt.get("choices")}


def test_the_real_report_lists_every_switch_of_the_specs_with_each_value(capsys):
    rc = switches.main(["report"])
    out = capsys.readouterr().out
    assert rc == 0, out
    real = _real_switches()
    assert len(real) >= 20
    judged = switches.judge(REPO, switches.load_switches(), switches.load_registry())
    for name, opt in real.items():
        assert re.search(r"^%s\s" % re.escape(name), out, re.M), "%s not in the report:\n%s" % (name, out)
        values = opt.get("choices") or [True, False]
        assert {switches.key(r.value) for r in judged if r.switch == name} == {switches.key(v) for v in values}, name
    # The three the issue names are asserted on a host: pip's resolver in image-build, the memo off in live,
    # the CUDA graphs off by default's side_effect.yml; and the report is strict-clean.
    rows = {(r.switch, switches.key(r.value)): r.status for r in judged}
    assert rows[("sglang_pip_no_deps", "false")] == rows[("sglang_audit_memo", "false")] == "proven"
    assert rows[("sglang_disable_cuda_graph", "true")] == "proven"
    assert "MISSING" not in {r.status for r in judged}, [r for r in judged if r.status == "MISSING"]
    assert switches.main(["report", "--strict"]) == 0


def test_the_real_registry_has_no_broken_entry():
    rows = switches.judge(REPO, switches.load_switches(), switches.load_registry())
    assert [p for r in rows if r.status == "BROKEN" for p in r.problems] == []
