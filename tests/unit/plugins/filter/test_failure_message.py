"""The failure_message filter on a real ansible-playbook run: a rescue sees the raw result of a no_log task that
failed (its message may hold what the task wrote), and the filter never hands that message on."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO

from ansible_collections.fleetops.sglang.plugins.filter.sglang import failure_message

SECRET = "hf_s3cret-token-value"

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A task that handles a secret fails, and one that does not
      block:
        - name: Write the secret somewhere it cannot go
          ansible.builtin.fail:
            msg: "could not write HF_TOKEN=%(secret)s"
          no_log: "{{ hidden }}"
      rescue:
        - name: Keep why
          ansible.builtin.set_fact:
            raw: "{{ ansible_failed_result.msg }}"
            kept: "{{ ansible_failed_result | fleetops.sglang.failure_message(ansible_failed_task) }}"
    - name: Say it
      ansible.builtin.copy:
        content: "{{ {'raw': raw, 'kept': kept} | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
""" % {"secret": SECRET}


def run(tmp_path, hidden):
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml"), "-e", json.dumps({"hidden": hidden, "out": str(tmp_path / "out"),
                                                                 "ansible_python_interpreter": sys.executable})],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads((tmp_path / "out").read_text()), proc.stdout


def test_a_no_log_tasks_message_reaches_the_rescue_raw_but_never_the_record(tmp_path):
    doc, out = run(tmp_path, True)
    # What the filter guards against: Ansible hides the output, not ansible_failed_result.
    assert SECRET in doc["raw"] and SECRET not in out.replace(doc["raw"], "")
    assert doc["kept"] == "its message is not shown: the task handles secrets (no_log)"


def test_another_tasks_message_is_kept(tmp_path):
    doc, _ = run(tmp_path, False)
    assert doc["kept"] == "could not write HF_TOKEN=%s" % SECRET


def test_without_the_task_or_a_message():
    assert failure_message({"msg": "  boom \n"}) == "boom"
    assert failure_message({}, {"no_log": False}) == "failed"
    assert failure_message(None, None) == "failed"
