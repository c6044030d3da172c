"""The role's documented surface stays in sync: defaults, argument_specs and the input guide's table."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "sglang"


def _defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _options() -> dict:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    return spec["argument_specs"]["main"]["options"]


def test_every_default_has_a_spec_and_back():
    assert set(_defaults()) == set(_options())


def test_every_variable_is_role_prefixed_and_described():
    for name, opt in _options().items():
        assert name.startswith("sglang_"), name
        assert opt.get("description"), name
        assert opt.get("type"), name


def test_spec_defaults_match_the_defaults_file():
    defaults = _defaults()
    for name, opt in _options().items():
        if "default" in opt:
            assert opt["default"] == defaults[name], name


def test_layer_ids_are_not_coerced_by_the_spec():
    # With elements: int, Ansible would turn ["2"] into [2] before preflight could refuse it.
    assert "elements" not in _options()["sglang_eagle3_layer_ids"]


GUIDE = ROOT / "docs" / "docsite" / "rst" / "guide_inputs.rst"


def test_the_guides_variable_table_lists_every_variable():
    guide = GUIDE.read_text()
    # The role's table, between its markers (the playbooks' own variables have a table of their own).
    section = guide.split(".. BEGIN variable table", 1)[1].split(".. END variable table", 1)[0]
    rows = set(re.findall(r"^   \* - ``(sglang_\w+)``$", section, flags=re.M))
    assert rows == set(_options()), sorted(set(_options()) ^ rows)


def test_the_guides_variable_table_is_the_generated_one():
    """Defaults, meanings and the accepted column come from the specs and _inputs.py."""
    import subprocess

    table = subprocess.run([str(ROOT / "scripts" / "variable-table")], capture_output=True, text=True,
                           check=True).stdout
    assert table in GUIDE.read_text(), "the input guide's table is stale: run scripts/variable-table --write"


def _entry_points() -> dict:
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def _used_variables(*task_files: str) -> set:
    names = set()
    for name in task_files:
        names |= set(re.findall(r"\b(sglang_[a-z0-9_]+)\b", (ROLE / "tasks" / name).read_text()))
    return names & set(_options())


def test_the_rollback_entry_point_has_its_own_spec_with_the_main_ones():
    """playbooks/rollback.yml runs tasks_from: rollback; its variables are typed there too, as in main."""
    rollback = _entry_points()["rollback"]["options"]
    for name, opt in rollback.items():
        assert opt == _options()[name], name
    # Named exactly (tests/test_entry_points.py): with .yml, Ansible validates nothing.
    assert "tasks_from: rollback\n" in (ROOT / "playbooks" / "rollback.yml").read_text()
    # Every user variable the rollback path reads (the gates included), except the gate
    # thresholds a rollback is not held to and the remediation-only switches; the audit after a
    # refused gate (sglang_pp_size) runs only on a remediated server, never on files put back.
    # sglang_rollback_on_failure and sglang_keep_failed_drained are a remediation's: the failure message
    # (run_failed.yml) and the transaction read them only on a remediation's rescue.
    not_on_rollback = {"sglang_accept_length_min", "sglang_speculative_algorithm", "sglang_audit", "sglang_pp_size",
                       "sglang_rollback_on_failure"}
    used = _used_variables("rollback.yml", "lease.yml", "lease_release.yml", "undrain.yml", "transaction.yml",
                           "run_failed.yml", "run_end.yml") - not_on_rollback
    assert used <= set(rollback), sorted(used - set(rollback))


def test_the_deferred_failure_is_a_documented_variable():
    assert "sglang_defer_failure" in _options()
    for playbook in ("remediate.yml", "rollback.yml"):
        text = (ROOT / "playbooks" / playbook).read_text()
        assert "sglang_defer_failure: true" in text and "_sglang_defer" not in text, playbook


def _task_names(node):
    """Every task's and block's name in a parsed task list or play list."""
    if isinstance(node, list):
        for item in node:
            yield from _task_names(item)
    elif isinstance(node, dict):
        if isinstance(node.get("name"), str) and ("hosts" not in node):
            yield node["name"]
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _task_names(node.get(key))


def test_task_names_template_only_what_is_always_defined():
    """A task's name is templated when it starts, before its `when` is asked: a name that reads a
    variable without a default (sglang_soak_seconds once did) warns "Encountered 1 template error" in
    every run that skips the task."""
    from jinja2 import Environment, meta
    defined = set(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())) | {"inventory_hostname", "item"}
    env = Environment()
    files = sorted((ROLE / "tasks").glob("*.yml")) + sorted((ROLE.parents[1] / "playbooks").glob("*.yml"))
    wrong = []
    for path in files:
        for name in _task_names(yaml.safe_load(path.read_text())):
            if "{{" in name:
                undefined = meta.find_undeclared_variables(env.parse(name)) - defined
                if undefined:
                    wrong.append("%s: %r reads %s" % (path.name, name, sorted(undefined)))
    assert not wrong, wrong


# The run record: assembled once at the run's end (report.yml, fact _sglang_run); what reads a
# run after its end reads that structure and none of the fields the steps write as they go.
RECORD_FIELDS = re.compile(r"\b(_sglang_(?:error|failed_task|drained|soak|restarted|gate|failed_gate|undo|closed)"
                           r"|sglang_live_metrics)\b")


def test_what_reads_a_finished_run_reads_the_run_record_only():
    readers = {ROLE / "tasks" / "soak.yml", ROLE / "tasks" / "batch_end.yml", ROLE / "tasks" / "run_end.yml",
               ROLE / "tasks" / "metrics.yml", *(ROOT / "playbooks").glob("*.yml")}
    for path in sorted(readers):
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        assert not RECORD_FIELDS.findall(code), (path.name, RECORD_FIELDS.findall(code))
    for name in ("soak.yml", "batch_end.yml", "run_end.yml"):
        assert "_sglang_run" in (ROLE / "tasks" / name).read_text(), name
    record = yaml.safe_load((ROLE / "tasks" / "report.yml").read_text())[0]
    assert set(record["ansible.builtin.set_fact"]) == {"_sglang_run", "sglang_remediation"}
    assert {"drained", "soak", "error", "failed_task"} <= set(record["vars"]["_sglang_run_now"])
    # Reset with the fields it is assembled from, in one place.
    reset = yaml.safe_load((ROLE / "tasks" / "run_record.yml").read_text())[0]["ansible.builtin.set_fact"]
    assert reset["_sglang_run"] is None


def _task_facts(node, found: set) -> None:
    """Every name a task of ``node`` (a task list, blocks included) registers or sets as a fact."""
    if isinstance(node, list):
        for item in node:
            _task_facts(item, found)
    elif isinstance(node, dict):
        if isinstance(node.get("register"), str):
            found.add(node["register"])
        for action in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(node.get(action), dict):
                found.update(k for k in node[action] if k != "cacheable")
        for key in ("block", "rescue", "always", "pre_tasks", "tasks", "post_tasks", "handlers"):
            _task_facts(node.get(key), found)


def test_no_role_variable_is_shadowed_by_a_fact_the_role_sets():
    """A registered result or a set_fact outranks vars/main.yml for the rest of the play: a role variable of the
    same name would read the fact at the next include of the role (default's side_effect includes it several
    times in one play), not its definition. Facts the collection's playbooks set count too."""
    facts: set = set()
    # The role's tasks and handlers, and the collection's playbooks, which run it in their plays.
    for path in sorted([*(ROLE / "tasks").glob("*.yml"), *(ROLE / "handlers").glob("*.yml"),
                        *(ROOT / "playbooks").glob("*.yml"), ROOT / "remediate.yml"]):
        _task_facts(yaml.safe_load(path.read_text()), facts)
    assert "_sglang_textfile" in facts and "_sglang_probe" in facts  # the walk sees registers and facts
    role_vars = set(yaml.safe_load((ROLE / "vars" / "main.yml").read_text()))
    assert sorted(role_vars & facts) == []
