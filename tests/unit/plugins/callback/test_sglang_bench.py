"""plugins/callback/sglang_bench.py counts what ran on the host: loop items and `until` attempts too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import COLLECTIONS_PATH, REPO

ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: One module run
      ansible.builtin.command: "true"
      changed_when: false
    - name: Three items, one skipped
      ansible.builtin.command: "echo {{ item }}"
      loop: [1, 2, 3]
      when: item != 2
    - name: Fails twice, then passes (three attempts)
      ansible.builtin.shell: "n=$(cat {{ counter }} 2>/dev/null || echo 0); echo $((n + 1)) > {{ counter }}; echo $((n + 1))"
      register: attempt
      until: attempt.stdout | int >= 3
      retries: 5
      delay: 0
      changed_when: false
    - name: Controller only
      ansible.builtin.set_fact:
        done: true
    - name: Skipped
      ansible.builtin.command: "false"
      when: false
"""


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="no ansible-playbook in .venv")
def test_counts_items_and_attempts(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(PLAYBOOK)
    out = tmp_path / "counts.json"
    env = dict(os.environ, SGLANG_BENCH_OUT=str(out), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH),
               ANSIBLE_CALLBACKS_ENABLED="fleetops.sglang.sglang_bench", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_HOME=str(tmp_path / "home"), ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(play),
                           "-e", "counter=%s" % (tmp_path / "n")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = json.loads(out.read_text())["localhost"]
    # 1 + 2 items + 3 attempts on the host; set_fact on the controller; the skipped task not at all.
    assert counts == {"remote": 6, "local": 1, "changed": 1, "memo": None}, counts
