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
])
def test_a_wrong_input_fails_at_the_entry_point_naming_it(tmp_path, entry, variables, named):
    rc, out = _run(tmp_path, entry, variables)
    assert rc != 0 and "Validation of arguments failed" in out and named in out, out[-3000:]
    # Refused before the entry point's own first task ran.
    first = yaml.safe_load((ROLE / "tasks" / (entry + ".yml")).read_text())[0]["name"]
    assert first not in out, out[-3000:]


def test_a_right_input_passes_the_validation(tmp_path):
    rc, out = _run(tmp_path, "rollout_limit", {"_sglang_limit_hosts": ["one"], "_sglang_limit_of": "of this batch"})
    assert rc == 0 and "The rollout stops here" not in out, out[-3000:]


def test_every_entry_point_a_playbook_imports_has_a_spec_or_a_reason_not_to():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    spec_text = (ROLE / "meta" / "argument_specs.yml").read_text()
    used = set()
    for playbook in sorted((REPO / "playbooks").glob("*.yml")):
        for line in playbook.read_text().splitlines():
            if "tasks_from:" in line:
                used.add(line.split("tasks_from:", 1)[1].strip().removesuffix(".yml"))
    assert used, "no entry point found"
    for entry in sorted(used):
        # Without a spec, the comment above the internal entry points must say why.
        assert entry in specs or entry in spec_text, "tasks_from %s: no argument spec and no reason given" % entry
