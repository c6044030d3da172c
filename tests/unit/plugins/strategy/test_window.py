"""plugins/strategy/window.py on real ansible-playbook runs: the sliding window's slots, its stop, its soak park.

Each host of the play below marks its tasks as the role's do (admit, take, signal). The hosts log
when they leave rotation and when they are back; the strategy prints each slot it hands out and
takes back. Every assertion is an invariant of the rule (plugin_utils/_rollout.py, Window), true
whatever the order in which a loaded machine lets the hosts reach their slots: how many are out at
once, that nothing leaves rotation after the stop, that each host ends one of the allowed ways.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO

PLAY = """
- hosts: all
  gather_facts: false
  strategy: fleetops.sglang.window
  serial: "{{ window.serial }}"
  vars:
    sglang_rollout_window: "{{ window }}"
  pre_tasks:
    - name: Start once the window has room, unless the rollout stopped
      ansible.builtin.fail:
        msg: "stopped before start: {{ _sglang_window_stopped }}"
      when: _sglang_window_stopped is defined
      vars: {_sglang_window: admit}
  tasks:
    - name: Say when the park without a fork ended (a soak's read)
      ansible.builtin.shell: echo "woke {{ inventory_hostname }}" >> {{ log }}; date +%s.%N > {{ log }}.{{ inventory_hostname }}
      when: inventory_hostname in sleepers
      changed_when: false
      vars:
        _sglang_window: sleep
        _sglang_window_sleep: "{{ sleep }}"
    - name: Stop the rollout
      ansible.builtin.set_fact:
        _sglang_window_signal: {stop: "asked by {{ inventory_hostname }}"}
      when: inventory_hostname in stoppers
      vars: {_sglang_window: signal}
    - name: Prepare
      ansible.builtin.command: "true"
      changed_when: false
    - name: Take a slot
      ansible.builtin.set_fact: {took: true}
      when: inventory_hostname not in no_slot
      vars:
        _sglang_window: take
        _sglang_window_putback: "{{ inventory_hostname in putback }}"
    - name: Leave rotation only while the rollout goes on
      ansible.builtin.fail:
        msg: "stopped before leaving rotation: {{ _sglang_window_stopped }}"
      when:
        - _sglang_window_stopped is defined
        - inventory_hostname not in putback
    - name: Out of rotation
      ansible.builtin.shell: echo "out {{ inventory_hostname }}" >> {{ log }}; sleep {{ delay }}
      when: inventory_hostname not in no_slot
      changed_when: false
    # As an undo's transaction passes it: skipped, the slot the host holds kept.
    - name: Take a slot again, skipped
      ansible.builtin.set_fact: {took_again: true}
      when: inventory_hostname in []
      vars: {_sglang_window: take}
    - name: Back in rotation
      ansible.builtin.shell: sleep 0.3; echo "back {{ inventory_hostname }}" >> {{ log }}
      when: inventory_hostname not in no_slot
      changed_when: false
    - name: Tell the window
      ansible.builtin.set_fact:
        _sglang_window_signal:
          back: "{{ inventory_hostname not in keep_out }}"
          out: "{{ inventory_hostname in keep_out }}"
          failed: "{{ inventory_hostname in fails }}"
      vars: {_sglang_window: signal}
    - name: Fail the failed hosts at the end
      ansible.builtin.fail: {msg: planned}
      when: inventory_hostname in fails
"""

HOSTS = ["h%d" % i for i in range(1, 8)]
STOPPED_START = "stopped before start"
STOPPED_TAKE = "stopped before leaving rotation"


def run(tmp_path, size=2, hosts=HOSTS, canaries=("h1",), forks=10, max_failures=0, lookahead=None, down=(),
        stop_file=False, not_serving=(), units=None, **knobs):
    rest = [h for h in list(hosts) + list(down) if h not in canaries]
    window = {"size": size, "budget": size, "max_failures": max_failures, "lookahead": lookahead,
              "canaries": list(canaries), "hosts": len(hosts) + len(down),
              "serial": ([len(canaries)] if canaries else []) + [len(rest)],
              "stop_file": None if stop_file == "default" else str(tmp_path / "STOP"), "kept_out": list(not_serving),
              "units": dict(units or {})}
    if stop_file == "default":
        # Unset: STOP in the report directory (the report callback's, SGLANG_REPORT_DIR here).
        (tmp_path / "reports").mkdir()
        (tmp_path / "reports" / "STOP").write_text("")
    elif stop_file:
        (tmp_path / "STOP").write_text("")
    (tmp_path / "play.yml").write_text(PLAY)
    lines = ["[all]"] + ["%s ansible_connection=local ansible_python_interpreter=%s" % (h, sys.executable)
                         for h in hosts]
    # Refused at once: unreachable at its first task that connects.
    lines += ["%s ansible_connection=ssh ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody" % h for h in down]
    (tmp_path / "hosts").write_text("\n".join(lines) + "\n")
    variables = {"window": window, "log": str(tmp_path / "log"), "delay": knobs.pop("delay", 0.5),
                 "sleep": knobs.pop("sleep", 0)}
    for key in ("sleepers", "stoppers", "no_slot", "putback", "keep_out", "fails"):
        variables[key] = list(knobs.pop(key, ()))
    assert not knobs, knobs
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORKS=str(forks),
               ANSIBLE_HOST_KEY_CHECKING="false", SGLANG_REPORT_DIR=str(tmp_path / "reports"))
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "hosts"),
                           str(tmp_path / "play.yml"), "-e", "@%s" % (tmp_path / "vars.json")],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    log = (tmp_path / "log").read_text().split("\n") if (tmp_path / "log").exists() else []
    return proc, [line.split() for line in log if line]


def slots(out):
    """The strategy's slot lines, in the order it handed the slots out and took them back."""
    return re.findall(r"^window: (\S+) (leaves rotation|is back in rotation|stays out of rotation)[^(]*\((\d+) of "
                      r"(\d+)", out, re.M)


def most_out(log):
    """The most hosts out of rotation at once, by the hosts' own log (out after the slot, back before it frees)."""
    now = peak = 0
    for what, _ in log:
        now += {"out": 1, "back": -1}.get(what, 0)
        peak = max(peak, now)
    return peak


def failed_with(out, host):
    match = re.search(r"^fatal: \[%s\]: FAILED! => (.*)$" % host, out, re.M)
    return match.group(1) if match else None


def recap(out):
    return dict(re.findall(r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=(\d+)", out, re.M))


def test_never_more_out_than_the_window_and_the_canary_first(tmp_path):
    proc, log = run(tmp_path, size=2)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert most_out(log) <= 2
    lines = slots(proc.stdout)
    assert all(int(used) <= 2 and int(size) == 2 for _, _, used, size in lines), lines
    # Every host left rotation once and came back; the canary came back before any other left.
    assert sorted(h for h, what, _, _ in lines if what == "leaves rotation") == HOSTS
    assert sorted(h for h, what, _, _ in lines if what == "is back in rotation") == HOSTS
    assert log.index(["back", "h1"]) < min(i for i, (what, h) in enumerate(log) if what == "out" and h != "h1")
    assert "up to 2 host(s) out of rotation at once, 2 more preparing; canaries h1" in proc.stdout


def test_the_forks_bound_the_window_and_it_says_so(tmp_path):
    proc, log = run(tmp_path, size=4, forks=2, canaries=())
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "up to 2 host(s) out of rotation at once (the forks: 2 of a budget of 4)" in proc.stdout
    assert most_out(log) <= 2
    assert all(int(used) <= 2 for _, _, used, _ in slots(proc.stdout))


def test_a_failure_over_the_limit_stops_handing_out_hosts(tmp_path):
    proc, log = run(tmp_path, size=1, fails=["h3"], lookahead=1)
    assert proc.returncode != 0
    out = proc.stdout
    stop = out.index("the rollout stops handing out hosts: 1 hosts failed (h3)")
    # Nothing leaves rotation after the stop; every host ended one of the allowed ways.
    assert "leaves rotation" not in out[stop:], out[stop:]
    for host in HOSTS:
        why = failed_with(out, host)
        if host == "h3":
            assert "planned" in why
        elif why is not None:
            assert STOPPED_START in why or STOPPED_TAKE in why, (host, why)
        else:
            assert ["back", host] in log, host
    assert any(failed_with(out, h) for h in HOSTS if h != "h3"), "the stop left no host to stop"


def test_failures_within_the_tolerance_go_on(tmp_path):
    proc, log = run(tmp_path, size=2, fails=["h3"], max_failures=1)
    assert proc.returncode != 0
    assert "stops handing out" not in proc.stdout
    assert {h: int(n) for h, n in recap(proc.stdout).items()} == {h: int(h == "h3") for h in HOSTS}
    assert all(["back", h] in log for h in HOSTS)


def test_a_failed_canary_stops_the_rollout_whatever_the_tolerance(tmp_path):
    proc, log = run(tmp_path, size=2, fails=["h1"], max_failures=5)
    assert proc.returncode != 0
    assert "the rollout stops handing out hosts: the canary h1 failed" in proc.stdout
    assert [h for what, h in log if what == "out"] == ["h1"]
    # The rest never started: its batch was let through the stopped window, or never begun (Ansible
    # ends a play whose whole batch failed).
    assert all(failed_with(proc.stdout, h) is None or STOPPED_START in failed_with(proc.stdout, h)
               for h in HOSTS[1:])


@pytest.mark.parametrize("where", ["given", "default"])
def test_the_stop_file_stops_before_any_host_starts(tmp_path, where):
    proc, log = run(tmp_path, size=2, canaries=(), stop_file="default" if where == "default" else True)
    assert proc.returncode != 0
    path = tmp_path / "reports" / "STOP" if where == "default" else tmp_path / "STOP"
    assert "the stop file %s exists" % path in proc.stdout
    assert log == []
    assert all(STOPPED_START in failed_with(proc.stdout, h) for h in HOSTS)


def test_a_host_kept_out_keeps_its_slot_and_a_full_window_stops(tmp_path):
    proc, log = run(tmp_path, size=2, canaries=(), keep_out=["h1", "h2", "h3", "h4", "h5", "h6", "h7"])
    assert proc.returncode != 0
    out = proc.stdout
    stop = out.index("fill the window of 2: no room left for another")
    assert "leaves rotation" not in out[stop:]
    kept = re.findall(r"^window: (\S+) stays out of rotation", out, re.M)
    assert len(kept) == 2, kept
    # A kept host's slot is never handed to another: at most 2 ever left.
    assert len([1 for what, _ in log if what == "out"]) == 2


def test_a_take_that_is_skipped_needs_no_slot(tmp_path):
    proc, log = run(tmp_path, size=1, canaries=(), no_slot=HOSTS[1:])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert [h for h, what, _, _ in slots(proc.stdout) if what == "leaves rotation"] == ["h1"]


def test_a_putback_gets_a_slot_after_the_stop(tmp_path):
    proc, log = run(tmp_path, size=1, hosts=HOSTS[:3], canaries=(), stoppers=["h1"], putback=["h1"])
    assert "the rollout stops handing out hosts: asked by h1" in proc.stdout
    assert ["back", "h1"] in log
    assert failed_with(proc.stdout, "h1") is None
    assert all(failed_with(proc.stdout, h) for h in ("h2", "h3"))


def test_a_parked_host_holds_no_fork(tmp_path):
    # One fork: had the park held it, h2 could not run a task until h1 woke.
    started = time.time()
    proc, log = run(tmp_path, size=2, hosts=HOSTS[:2], canaries=(), forks=1, sleepers=["h1"], sleep=25,
                    delay=0.1)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert log.index(["back", "h2"]) < log.index(["woke", "h1"]), log
    # The park lasted its seconds (a lower bound: true however loaded the machine).
    assert float((tmp_path / "log.h1").read_text()) - started >= 25


def test_an_unreachable_host_counts_as_failed(tmp_path):
    proc, log = run(tmp_path, size=2, hosts=HOSTS[:4], canaries=(), down=["gone"], max_failures=0)
    assert proc.returncode != 0
    assert "unreachable=1" in re.search(r"^gone\s+:.*$", proc.stdout, re.M).group(0)
    assert "the rollout stops handing out hosts: 1 hosts failed (gone)" in proc.stdout


def test_hosts_not_serving_hold_their_slots_from_the_start(tmp_path):
    # "idle" (not in the play) serves nothing: one slot of two is taken for the whole run; h2 serves
    # nothing either but needs work: it leaves on its own slot, not on the free one.
    proc, log = run(tmp_path, size=2, hosts=HOSTS[:4], canaries=(), not_serving=["idle", "h2"], lookahead=0)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert most_out(log) <= 2
    lines = slots(proc.stdout)
    assert all(int(used) <= 2 for _, _, used, _ in lines), lines
    # While h2 was out (on its own slot) and "idle" held the other, nobody else was: one at a time
    # once h2 is back, since "idle" keeps its slot to the end.
    assert [int(used) for h, what, used, _ in lines if what == "leaves rotation" and h != "h2"] == [2, 2, 2]


def test_a_replicas_nodes_leave_rotation_on_one_slot(tmp_path):
    units = {"h1": "a", "h2": "a", "h3": "b", "h4": "b", "h5": "c", "h6": "c"}
    proc, log = run(tmp_path, size=1, hosts=HOSTS[:6], canaries=(), units=units, lookahead=0, delay=1.0)
    assert proc.returncode == 0, proc.stdout[-3000:]
    # At every moment the hosts out of rotation are nodes of one replica (a window of 1 replica), whatever
    # the order in which a loaded machine lets them reach their slots. (That a replica's nodes leave
    # together is the per-replica transaction's, not the window's.)
    out = set()
    for what, host in log:
        if what == "out":
            out.add(host)
        elif what == "back":
            out.discard(host)
        assert len({units[h] for h in out}) <= 1, log
    assert sorted(h for what, h in log if what == "back") == HOSTS[:6]
    assert all(int(used) <= 1 for _, _, used, _ in slots(proc.stdout))
