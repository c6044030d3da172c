"""plugins/strategy/linear_blocking.py against ansible.builtin.linear, on real ansible-playbook runs.

The same play (more hosts than forks, a failing host, a throttled task, serial batches)
gives the same recap under both; with every fork busy the controller's main process
waits on the workers under linear_blocking instead of polling them.
"""
from __future__ import annotations

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
  serial: "{{ batch | default(0) | int or omit }}"
  tasks:
    - name: Work that keeps every fork busy
      ansible.builtin.command: sleep {{ pause }}
      changed_when: false
    - name: One host fails
      ansible.builtin.fail:
        msg: planned
      when: inventory_hostname == 'h3'
    - name: A throttled task keeps the linear strategy's own limit
      ansible.builtin.command: "true"
      throttle: 2
      changed_when: false
      when: not only_wait
"""


def run(tmp_path, strategy, hosts=7, forks=3, pause="0.4", batch=0, only_wait=False):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts").write_text(
        "[all]\n" + "".join(f"h{i} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
                            for i in range(1, hosts + 1)))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STRATEGY=strategy,
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.timer", ANSIBLE_FORKS=str(forks))
    cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "hosts"), str(tmp_path / "play.yml"),
           "-e", f"pause={pause} batch={batch}", "-e", '{"only_wait": %s}' % str(only_wait).lower()]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The main process's (not its workers') voluntary context switches, read until it exits: a
    # process that polls with short sleeps switches at every sleep, one that waits on its workers
    # only when one ends or every few milliseconds. Counts, unlike CPU seconds, do not depend on
    # how busy the machine is.
    switches = 0
    while proc.poll() is None:
        try:
            for line in open(f"/proc/{proc.pid}/status"):
                if line.startswith("voluntary_ctxt_switches:"):
                    switches = int(line.split()[1])
        except OSError:
            pass
        time.sleep(0.05)
    out = proc.stdout.read()
    res = subprocess.CompletedProcess(cmd, proc.returncode, out)
    recap = sorted(re.findall(r"^(h\d+)\s+: (.*)$", out, re.M))
    return res, recap, switches


@pytest.mark.parametrize("batch", [0, 5])
def test_the_same_recap_as_the_linear_strategy(tmp_path, batch):
    linear, recap_linear, _ = run(tmp_path, "ansible.builtin.linear", pause="0.1", batch=batch)
    blocking, recap_blocking, _ = run(tmp_path, "fleetops.sglang.linear_blocking", pause="0.1", batch=batch)
    assert linear.returncode == blocking.returncode == 2, blocking.stdout[-3000:]
    assert recap_blocking == recap_linear
    # On the ansible-core the suite runs, it has what it reads: no fallback.
    assert "running as ansible.builtin.linear" not in blocking.stdout, blocking.stdout[-3000:]
    # More hosts than forks (7 on 3), and with serial 5 a second, shorter batch.
    assert len(recap_blocking) == 7
    assert any(h == "h3" and "failed=1" in r for h, r in recap_blocking)
    assert all("ok=2" in r and "skipped=1" in r for h, r in recap_blocking if h != "h3")


@pytest.mark.parametrize("hosts, forks", [(6, 2), (2, 4)], ids=["every fork busy", "awaiting the last results"])
def test_the_controller_does_not_poll_while_hosts_run_a_task(tmp_path, hosts, forks):
    # 6 hosts on 2 forks, 3 s each: about 6 s with every fork busy, which the linear
    # strategy's main process spends polling for a free fork and linear_blocking's asleep.
    # 2 hosts on 4 forks: 3 s awaiting both results, polled every millisecond by the linear
    # strategy, waited on by linear_blocking.
    switches = {}
    for strategy in ("ansible.builtin.linear", "fleetops.sglang.linear_blocking"):
        res, recap, switches[strategy] = run(tmp_path, strategy, hosts=hosts, forks=forks, pause="3", only_wait=True)
        assert res.returncode == (2 if hosts > 2 else 0) and len(recap) == hosts, res.stdout[-3000:]
    assert switches["fleetops.sglang.linear_blocking"] < 0.5 * switches["ansible.builtin.linear"], switches


def test_the_wait_ends_when_a_fork_frees_or_the_run_is_stopped():
    """The wait itself, on stand-in workers: it returns at once with a free slot, for a throttled
    task, and when the run is being stopped; otherwise it waits on the busy workers' sentinels."""
    import subprocess as sp
    from types import SimpleNamespace

    from conftest import COLLECTIONS_PATH  # noqa: F401  (puts the collection on sys.path)

    from ansible_collections.fleetops.sglang.plugins.strategy import linear_blocking as lb

    strategy = lb.StrategyModule.__new__(lb.StrategyModule)
    strategy._process_rpc_queue = lambda: None
    strategy._tqm = SimpleNamespace(_terminated=False)
    task = SimpleNamespace(throttle=0)
    strategy._workers = [None, SimpleNamespace(is_alive=lambda: False)]
    started = time.monotonic()
    strategy._wait_for_free_fork(task)
    assert time.monotonic() - started < 0.5
    # Every fork busy: a real child's pidfd is its sentinel; the wait ends when it exits.
    proc = sp.Popen(["sleep", "0.6"])
    pidfd = os.pidfd_open(proc.pid)
    strategy._workers = [SimpleNamespace(is_alive=lambda: proc.poll() is None, sentinel=pidfd)]
    started = time.monotonic()
    strategy._wait_for_free_fork(task)
    assert 0.4 < time.monotonic() - started < 5
    # Throttled, or the run stopping: no wait at all.
    busy = sp.Popen(["sleep", "30"])
    strategy._workers = [SimpleNamespace(is_alive=lambda: busy.poll() is None, sentinel=os.pidfd_open(busy.pid))]
    try:
        for t, terminated in ((SimpleNamespace(throttle=2), False), (task, True)):
            strategy._tqm._terminated = terminated
            started = time.monotonic()
            strategy._wait_for_free_fork(t)
            assert time.monotonic() - started < 0.5
    finally:
        busy.kill()
        busy.wait()
        proc.wait()


def test_the_results_wait_returns_them_and_refuses_a_dead_worker():
    """The wait for a task's last results, on stand-ins: it returns what arrived, waits on a busy
    worker between rounds, stops when the run is stopped, and refuses a worker found dead."""
    import subprocess as sp
    from types import SimpleNamespace

    from conftest import COLLECTIONS_PATH  # noqa: F401  (puts the collection on sys.path)

    from ansible.errors import AnsibleError
    from ansible_collections.fleetops.sglang.plugins.strategy import linear_blocking as lb

    strategy = lb.StrategyModule.__new__(lb.StrategyModule)
    strategy._tqm = SimpleNamespace(_terminated=False, has_dead_workers=lambda: False)
    proc = sp.Popen(["sleep", "0.6"])
    strategy._workers = [SimpleNamespace(is_alive=lambda: proc.poll() is None, sentinel=os.pidfd_open(proc.pid))]
    rounds = []

    def results(iterator):
        # The result arrives once the worker has ended.
        rounds.append(time.monotonic())
        if proc.poll() is None:
            return []
        strategy._pending_results = 0
        return ["r"]

    strategy._process_pending_results = results
    strategy._pending_results = 1
    started = time.monotonic()
    assert strategy._wait_on_pending_results(None) == ["r"]
    assert 0.4 < time.monotonic() - started < 5
    # Rounds every few milliseconds at most while the worker ran (the linear strategy: every 1 ms).
    assert len(rounds) <= 0.6 / lb.RPC_INTERVAL + 10, len(rounds)
    strategy._pending_results = 1
    strategy._tqm._terminated = True
    assert strategy._wait_on_pending_results(None) == []
    strategy._tqm = SimpleNamespace(_terminated=False, has_dead_workers=lambda: True)
    with pytest.raises(AnsibleError, match="dead state"):
        strategy._wait_on_pending_results(None)


def test_without_the_private_api_it_warns_and_runs_as_linear(monkeypatch):
    """On an ansible-core whose strategy lacks what the wait reads, the strategy names what is
    missing once and is the linear strategy: neither wait of its own runs."""
    from types import SimpleNamespace

    from conftest import COLLECTIONS_PATH  # noqa: F401  (puts the collection on sys.path)

    from ansible_collections.fleetops.sglang.plugins.strategy import linear_blocking as lb

    warnings = []
    monkeypatch.setattr(lb.Display, "warning", lambda self, msg, *a, **k: warnings.append(msg))
    monkeypatch.setattr(lb.LinearStrategyModule, "__init__", lambda self, tqm: setattr(self, "_tqm", tqm))
    monkeypatch.setattr(lb.LinearStrategyModule, "_wait_on_pending_results", lambda self, it: ["linear"])
    strategy = lb.StrategyModule(SimpleNamespace(has_dead_workers=lambda: False))  # no _terminated
    assert strategy._as_linear and len(warnings) == 1, warnings
    assert "TaskQueueManager._terminated" in warnings[0] and "StrategyBase._workers" in warnings[0]
    assert "running as ansible.builtin.linear" in warnings[0]
    strategy._wait_for_free_fork(SimpleNamespace(throttle=0))  # returns without reading _workers
    assert strategy._wait_on_pending_results(None) == ["linear"]
    # With the attributes there, it is itself, and says nothing.
    monkeypatch.setattr(lb.LinearStrategyModule, "__init__", lambda self, tqm: self.__dict__.update(
        _tqm=tqm, _workers=[], _pending_results=0))
    whole = lb.StrategyModule(SimpleNamespace(_terminated=False, has_dead_workers=lambda: False))
    assert not whole._as_linear and len(warnings) == 1
    assert lb.missing_private_api(whole) == []
