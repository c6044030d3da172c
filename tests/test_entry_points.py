"""The role's internal entry points refuse a playbook that passes them the wrong input, by name.

remediate.yml, audit.yml and rollback.yml drive tasks_from rollout_limit, rollout_plan and
after_probe; their inputs are typed in meta/argument_specs.yml, and Ansible's own validation
(the task it puts before an entry point's tasks) must refuse a mistake there, before any task.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import COLLECTIONS_PATH, REPO, ROLE

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: The entry point, as a fleet playbook imports it
      ansible.builtin.import_role:
        name: fleetops.sglang.sglang
        tasks_from: %(entry)s
      run_once: true
      vars: %(vars)s
"""


def _run(tmp_path, entry, variables):
    inline = yaml.safe_dump(variables, default_flow_style=True).strip()
    (tmp_path / "play.yml").write_text(PLAY % {"entry": entry, "vars": inline})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_HOME=str(tmp_path / "home"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "one,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, "play.yml"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("entry, variables, named", [
    # (A scalar would pass: Ansible's list type makes one of it, as for any role's list option.)
    ("rollout_limit", {"_sglang_limit_hosts": {"one": 1}, "_sglang_limit_of": "of this batch"}, "_sglang_limit_hosts"),
    ("rollout_limit", {"_sglang_limit_hosts": ["one"]}, "_sglang_limit_of"),
    ("rollout_plan", {"_sglang_plan": "not a plan"}, "_sglang_plan"),
    ("after_probe", {}, "_sglang_probe"),
    ("batch_end", {"_sglang_batch_hosts": {"one": 1}}, "_sglang_batch_hosts"),
    # playbooks/rollback.yml's and a failed soak's rollback: refused before the lease is taken or
    # anything put back (it once put the unit back, restarted, then failed at the gate).
    ("rollback", {"sglang_health_timeout": "notanumber"}, "sglang_health_timeout"),
    ("rollback", {"sglang_port": "eighty"}, "sglang_port"),
])
def test_a_wrong_input_fails_at_the_entry_point_naming_it(tmp_path, entry, variables, named):
    rc, out = _run(tmp_path, entry, variables)
    assert rc != 0 and "Validation of arguments failed" in out and named in out, out[-3000:]
    # Refused before the entry point's own first task ran.
    assert _first_task(ROLE / "tasks" / (entry + ".yml")) not in out, out[-3000:]


def _first_task(path):
    """The name of the first task a task file runs (an import's first task, followed)."""
    first = yaml.safe_load(path.read_text())[0]
    if "ansible.builtin.import_tasks" in first:
        return _first_task(path.parent / first["ansible.builtin.import_tasks"])
    return first["name"]


def test_a_right_input_passes_the_validation(tmp_path):
    rc, out = _run(tmp_path, "rollout_limit", {"_sglang_limit_hosts": ["one"], "_sglang_limit_of": "of this batch"})
    assert rc == 0 and "The rollout stops here" not in out, out[-3000:]


# The entry points a playbook calls without a spec, on purpose (the comment above the internal
# entry points in meta/argument_specs.yml says why): a spec would cost a task on every host of the
# probe pass (fleet_probe: the probe's action checks the role's inputs, plugins/action/sglang_probe.py),
# or they read only playbook variables that the plan and lease_break's asserts check themselves
# (replicas: the inventory's replica variables, judged by its filter and refused by the plan).
WITHOUT_SPEC = {"fleet_probe", "soak", "soak_host", "lease_break", "replicas"}


def _tasks_from(node):
    """Every literal tasks_from in a parsed playbook or task file."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks_from(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role"):
                if isinstance(value, dict) and "tasks_from" in value:
                    yield value["tasks_from"]
            else:
                yield from _tasks_from(value)


def entry_point_errors(used, specs):
    """Why the tasks_from names used do not each name a spec exactly, or an entry point without one.
    Ansible validates an entry point only when tasks_from is the spec's exact name: tasks_from:
    rollback.yml runs tasks/rollback.yml with no validation at all."""
    errors = []
    for where, name in used:
        if name not in specs and name not in WITHOUT_SPEC:
            errors.append("%s: tasks_from %r names no entry point of meta/argument_specs.yml%s" % (
                where, name, " (drop the .yml: Ansible then skips the validation)" if name.endswith(".yml") else ""))
    return errors


def _used():
    files = sorted((REPO / "playbooks").glob("*.yml")) + sorted((ROLE / "tasks").glob("*.yml"))
    return [(path.relative_to(REPO).as_posix(), name) for path in files
            for name in _tasks_from(yaml.safe_load(path.read_text()))]


def test_every_entry_point_called_names_its_spec_exactly():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    spec_text = (ROLE / "meta" / "argument_specs.yml").read_text()
    used = _used()
    assert {name for _, name in used} >= {"rollback", "rollout_plan", "rollout_limit", "batch_end", "after_probe",
                                          "fleet_probe"}
    assert entry_point_errors(used, specs) == []
    for name in WITHOUT_SPEC:
        assert name not in specs and name in spec_text, "%s: say in meta/argument_specs.yml why it has no spec" % name
    # The rule fails on the suffix and on a name with no spec.
    wrong = entry_point_errors([("playbooks/rollback.yml", "rollback.yml"), ("x.yml", "lease")], specs)
    assert len(wrong) == 2 and "drop the .yml" in wrong[0] and "'lease'" in wrong[1], wrong


# The restart transaction (tasks/transaction.yml) is included, not an entry point: its first task
# validates its inputs with their spec (the argument_spec written there), and every caller passes
# exactly those inputs.
def _transaction_spec():
    first = yaml.safe_load((ROLE / "tasks" / "transaction.yml").read_text())[0]
    return first["ansible.builtin.validate_argument_spec"]["argument_spec"]


def _includes_of(node, target):
    if isinstance(node, list):
        for item in node:
            yield from _includes_of(item, target)
    elif isinstance(node, dict):
        if node.get("ansible.builtin.include_tasks") == target:
            yield node
        for key in ("block", "rescue", "always"):
            yield from _includes_of(node.get(key), target)


def test_every_caller_of_the_transaction_passes_exactly_its_inputs():
    spec = _transaction_spec()
    callers = {path.name: list(_includes_of(yaml.safe_load(path.read_text()), "transaction.yml"))
               for path in sorted((ROLE / "tasks").glob("*.yml"))}
    callers = {name: found for name, found in callers.items() if found}
    # A remediation's restart, the undo of a failed run, a rollback: one include each.
    assert {name: len(found) for name, found in callers.items()} == {"service.yml": 1, "host.yml": 1,
                                                                     "rollback.yml": 1}
    actions = set()
    for name, found in callers.items():
        passed = found[0]["vars"]
        assert set(passed) == set(spec), (name, sorted(set(passed) ^ set(spec)))
        actions.add(passed["_sglang_tx_action"])
    assert actions == set(spec["_sglang_tx_action"]["choices"])
    # Nothing else in the role or the playbooks reads the transaction's inputs.
    for path in sorted((ROLE / "tasks").glob("*.yml")) + sorted((REPO / "playbooks").glob("*.yml")):
        if path.name not in ("transaction.yml", "undrain.yml") and path.name not in callers:
            assert "_sglang_tx_" not in path.read_text(), path


TRANSACTION_PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: The transaction, with a wrong input
      ansible.builtin.include_tasks: %(tasks)s
      vars: %(vars)s
"""


@pytest.mark.parametrize("wrong, named", [
    ({"_sglang_tx_action": "reinstall"}, "_sglang_tx_action"),
    ({"_sglang_tx_serve": "sometimes"}, "_sglang_tx_serve"),
    ({"_sglang_tx_drain": None}, "_sglang_tx_drain"),
])
def test_a_wrong_input_to_the_transaction_is_refused_before_its_first_step(tmp_path, wrong, named):
    good = {"_sglang_tx_action": "apply", "_sglang_tx_restore": None, "_sglang_tx_stop": False,
            "_sglang_tx_enabled": None, "_sglang_tx_serve": True, "_sglang_tx_drain": True,
            "_sglang_tx_undrain": True, "_sglang_tx_close": None, "_sglang_tx_release": None}
    assert set(good) == set(_transaction_spec())
    inline = yaml.safe_dump(dict(good, **wrong), default_flow_style=True).strip()
    (tmp_path / "play.yml").write_text(TRANSACTION_PLAY % {"tasks": ROLE / "tasks" / "transaction.yml",
                                                           "vars": inline})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_HOME=str(tmp_path / "home"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "one,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, "play.yml"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Validation of arguments failed" in out and named in out, out[-3000:]
    assert "Run the pre-restart hook (drain)" not in out and "Stop the server" not in out, out[-3000:]
