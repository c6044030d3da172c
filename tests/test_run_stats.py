"""molecule/shared/callback_plugins/run_stats.py: the counts the Molecule verifiers read
instead of the PLAY RECAP text are the recap's own, for every kind of task outcome."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

PLAY = """
- name: One task of every outcome the recap counts
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
    - name: Change nothing
      ansible.builtin.command: "true"
      changed_when: false
    - name: Skip
      ansible.builtin.command: "true"
      when: false
    - name: Fail and be rescued
      block:
        - name: Fail
          ansible.builtin.command: "false"
      rescue:
        - name: Rescue
          ansible.builtin.debug:
            msg: rescued
    - name: Fail for good
      ansible.builtin.command: "false"
      when: inventory_hostname == "one"
"""
RECAP_LINE = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", re.M)


def test_the_json_counts_are_the_recap_lines(tmp_path):
    (tmp_path / "play.yml").write_text(PLAY)
    stats = tmp_path / "stats.json"
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(REPO / "molecule" / "shared" / "callback_plugins"),
               SGLANG_TEST_STATS_FILE=str(stats), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "one,two,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, "play.yml"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    printed = {host: {k: int(v) for k, v in (kv.split("=") for kv in counts.split())}
               for host, counts in RECAP_LINE.findall(proc.stdout)}
    written = json.loads(stats.read_text())["hosts"]
    assert written == printed
    assert written["one"] == {"ok": 3, "changed": 1, "unreachable": 0, "failed": 1, "skipped": 1, "rescued": 1,
                              "ignored": 0}
    assert written["two"]["failed"] == 0 and written["two"]["skipped"] == 2
