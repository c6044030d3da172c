"""plugins/strategy/window.py's join on real ansible-playbook runs: the nodes of a replica meet.

The play below is the shape of the role's per-replica transaction (tasks/transaction.yml): every
node prepares, the nodes meet before any leaves rotation, each is gated, they meet again for the
replica's verdict, and a failed node's rescue puts it back after meeting the others on their way to
their own undo. The hosts log what they do with a timestamp; the assertions are orderings that hold
whatever the order in which a loaded machine runs the hosts.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import REPO

PLAY = """
- hosts: all
  gather_facts: false
  strategy: fleetops.sglang.window
  vars:
    sglang_rollout_window: "{{ window }}"
  tasks:
    - block:
        - name: Prepare
          ansible.builtin.shell: >-
            {{ ('t=0; until [ -e ' ~ log ~ '.solo ] || [ $t -ge 600 ]; do sleep 0.1; t=$((t+1)); done;')
               if inventory_hostname in waits_for_solo else '' }}
            sleep {{ slow.get(inventory_hostname, 0) }}; echo "ready {{ inventory_hostname }}" >> {{ log }}
          changed_when: false
        - name: Fail to prepare
          ansible.builtin.fail: {msg: planned}
          when: inventory_hostname in prep_fails
        - name: Meet before leaving rotation
          ansible.builtin.debug: {msg: meet}
          vars: {_sglang_window: join, _sglang_window_join: prepared, _sglang_window_join_order: 1}
        - name: Fail when a node did not get ready
          ansible.builtin.fail:
            msg: "not ready: {{ _sglang_window_joined.missing | join(',') }}"
          when: _sglang_window_joined is defined and _sglang_window_joined.missing | length > 0
        - name: Restart
          ansible.builtin.shell: echo "restart {{ inventory_hostname }}" >> {{ log }}; touch {{ log }}.{{ inventory_hostname }}
          changed_when: false
        - name: Remember the restart
          ansible.builtin.set_fact: {restarted: true}
        - name: Gate
          ansible.builtin.shell: sleep {{ gate_slow.get(inventory_hostname, 0) }}; {{ 'false' if inventory_hostname in gate_fails else 'true' }}
          changed_when: false
        - name: Meet for the replica's verdict
          ansible.builtin.debug: {msg: meet}
          vars: {_sglang_window: join, _sglang_window_join: gated, _sglang_window_join_order: 2}
        - name: Fail when a node failed its gate
          ansible.builtin.fail:
            msg: "replica failed: {{ _sglang_window_joined.missing | join(',') }}"
          when: _sglang_window_joined is defined and _sglang_window_joined.missing | length > 0
        - name: Done
          ansible.builtin.shell: echo "done {{ inventory_hostname }}" >> {{ log }}
          changed_when: false
      rescue:
        - name: Stop to put back
          ansible.builtin.shell: echo "undo-stop {{ inventory_hostname }}" >> {{ log }}
          changed_when: false
          when: restarted is defined
        - name: Meet before starting what was put back
          ansible.builtin.debug: {msg: meet}
          when: restarted is defined
          vars: {_sglang_window: join, _sglang_window_join: put back, _sglang_window_join_order: 3}
        - name: Start what was put back
          ansible.builtin.shell: echo "undo-start {{ inventory_hostname }}" >> {{ log }}
          changed_when: false
          when: restarted is defined
        - name: Fail
          ansible.builtin.fail: {msg: "{{ ansible_failed_result.msg | default('failed') }}"}
"""

UNITS = {"a0": "a", "a1": "a", "b0": "b", "b1": "b"}
HOSTS = ["a0", "a1", "b0", "b1", "solo"]


def run(tmp_path, slow=None, gate_slow=None, prep_fails=(), gate_fails=(), forks=10, waits_for_solo=()):
    window = {"size": 3, "budget": 3, "max_failures": 5, "lookahead": None, "canaries": [], "hosts": len(HOSTS),
              "serial": [len(HOSTS)], "stop_file": str(tmp_path / "STOP"), "kept_out": [], "units": UNITS}
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts").write_text("\n".join("%s ansible_connection=local ansible_python_interpreter=%s"
                                              % (h, sys.executable) for h in HOSTS) + "\n")
    variables = {"window": window, "log": str(tmp_path / "log"), "slow": dict(slow or {}),
                 "gate_slow": dict(gate_slow or {}), "prep_fails": list(prep_fails), "gate_fails": list(gate_fails),
                 "waits_for_solo": list(waits_for_solo)}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORKS=str(forks),
               SGLANG_REPORT_DIR=str(tmp_path / "reports"))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "hosts"),
                           str(tmp_path / "play.yml"), "-e", "@%s" % (tmp_path / "vars.json")],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    log = (tmp_path / "log").read_text().split("\n") if (tmp_path / "log").exists() else []
    return proc, [tuple(line.split()) for line in log if line]


def failed_with(out, host):
    found = re.findall(r"^fatal: \[%s\]: FAILED! => (.*)$" % host, out, re.M)
    return found[-1] if found else None


def test_no_node_restarts_before_every_node_of_its_replica_is_ready(tmp_path):
    # a1 gets ready only once solo restarted (up to 60 s): had solo waited for the replicas, a1 would be late.
    proc, log = run(tmp_path, slow={"b0": 2}, waits_for_solo=["a1"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    for node, other in (("a0", "a1"), ("a1", "a0"), ("b0", "b1"), ("b1", "b0")):
        assert log.index(("ready", other)) < log.index(("restart", node)), log
    # A host of one node waits for nobody: it restarted before a node of a replica was ready.
    assert log.index(("restart", "solo")) < log.index(("ready", "a1")), log
    assert "window: a0 and a1 meet at prepared" in proc.stdout
    assert sorted(h for what, h in log if what == "done") == sorted(HOSTS)


def test_a_node_that_fails_to_prepare_stops_its_replica_before_any_restart(tmp_path):
    proc, log = run(tmp_path, prep_fails=["a1"], slow={"a0": 1})
    assert proc.returncode != 0
    assert not any(what == "restart" and host in ("a0", "a1") for what, host in log), log
    assert "not ready: a1" in failed_with(proc.stdout, "a0")
    # The other replica and the single host went on.
    assert {h for what, h in log if what == "done"} == {"b0", "b1", "solo"}
    assert "window: a0 meet at prepared; not there: a1" in proc.stdout


def test_a_node_failing_its_gate_puts_back_its_replica_together(tmp_path):
    # a0 fails its gate at once and waits at the put-back's join; a1 is still gating (slow): a1 learns
    # of a0's failure at the verdict, then both start what was put back only once both stopped.
    proc, log = run(tmp_path, gate_fails=["a0"], gate_slow={"a1": 2})
    assert proc.returncode != 0
    assert "replica failed: a0" in failed_with(proc.stdout, "a1")
    for node in ("a0", "a1"):
        for other in ("a0", "a1"):
            assert log.index(("undo-stop", other)) < log.index(("undo-start", node)), log
    assert "window: a0 and a1 meet at put back" in proc.stdout or "window: a1 and a0 meet at put back" in proc.stdout
    assert {h for what, h in log if what == "done"} == {"b0", "b1", "solo"}
    assert not any(what.startswith("undo") and host not in ("a0", "a1") for what, host in log)


def test_joins_hold_no_fork(tmp_path):
    # Two forks, two replicas: with a waiting node holding a fork, the slow nodes could never run.
    proc, log = run(tmp_path, slow={"a1": 1, "b1": 1}, forks=2)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert sorted(h for what, h in log if what == "done") == sorted(HOSTS)
