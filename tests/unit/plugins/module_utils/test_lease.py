"""The per-host lease: who may take it, when it is stale, what the waiting run is told."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from conftest import COLLECTIONS_PATH

from ansible_collections.fleetops.sglang.plugins.action import sglang_lease as action
from ansible_collections.fleetops.sglang.plugins.module_utils import _lease as lease

NOW = 1_796_128_100.0
ME = {"run_id": "20261201T122800Z-remediate-200", "controller": "bastion-1", "user": "bob", "pid": 200,
      "started": NOW - 20}
OTHER = {"run_id": "20261201T122730Z-remediate-100", "controller": "bastion-2", "user": "alice", "pid": 100,
         "started": NOW - 70, "taken_at": NOW - 60}


def test_a_free_lease_is_taken_and_ones_own_is_kept():
    assert lease.decide(None, ME, NOW, ttl=7200) == (lease.FREE, "")
    assert lease.decide(dict(ME, taken_at=NOW - 5), ME, NOW, ttl=7200) == (lease.OURS, "")


def test_a_fresh_lease_of_another_run_is_held():
    assert lease.decide(OTHER, ME, NOW, ttl=7200) == (lease.HELD, "")


def test_a_lease_older_than_the_ttl_is_stale():
    verdict, why = lease.decide(OTHER, ME, NOW, ttl=30)
    assert verdict == lease.STALE and "60s old" in why and "sglang_lock_ttl=30s" in why


def test_takeover_applies_only_to_the_run_found_dead():
    verdict, why = lease.decide(OTHER, ME, NOW, ttl=7200, takeover=OTHER["run_id"])
    assert verdict == lease.STALE and "process 100 no longer exists on bastion-2" in why
    # The holder changed since the controller looked: wait for the new one.
    assert lease.decide(OTHER, ME, NOW, ttl=7200, takeover="someone-else")[0] == lease.HELD


@pytest.mark.parametrize("text, problem", [("{not json", "not JSON"), ('{"user": "x"}', "names no run_id")])
def test_an_unreadable_lease_names_why(text, problem):
    holder, why = lease.parse(text)
    assert holder is None and problem in why


def test_the_message_names_run_controller_user_and_start_time():
    msg = lease.held_message(OTHER, waited=300, now=NOW)
    assert OTHER["run_id"] in msg and "alice@bastion-2" in msg and "controller pid 100" in msg
    assert "run started 2026-12-01T12:27:10Z" in msg and "lease taken 2026-12-01T12:27:20Z (60s ago)" in msg
    assert "Waited 300s (sglang_lock_timeout)" in msg


def test_file_acquire_release_and_holding(tmp_path):
    path = str(tmp_path / "state" / "lease.json")
    ours = lease.LeaseFile(path)
    got = ours.try_acquire(ME, NOW, ttl=7200)
    assert got["acquired"] and got["previous"] is None
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
    theirs = ours.try_acquire(OTHER, NOW + 1, ttl=7200)
    assert not theirs["acquired"] and theirs["holder"]["run_id"] == ME["run_id"]
    # Somebody else's release leaves the lease alone; ours removes it.
    assert ours.release(OTHER)["released"] is False and os.path.exists(path)
    assert ours.release(ME)["released"] is True and not os.path.exists(path)


def test_a_stale_lease_is_taken_over_and_the_previous_holder_returned(tmp_path):
    path = tmp_path / "lease.json"
    path.write_text(json.dumps(dict(OTHER, taken_at=NOW - 10_000)))
    got = lease.LeaseFile(str(path)).try_acquire(ME, NOW, ttl=7200)
    assert got["acquired"] and got["previous"]["run_id"] == OTHER["run_id"] and "older than" in got["why"]
    assert json.loads(path.read_text())["run_id"] == ME["run_id"]


def test_acquire_waits_for_the_release(tmp_path):
    path = str(tmp_path / "lease.json")
    lease.LeaseFile(path).try_acquire(OTHER, time.time(), ttl=7200)
    threading.Timer(0.6, lease.LeaseFile(path).release, args=(OTHER,)).start()
    started = time.monotonic()
    got = lease.LeaseFile(path).acquire(ME, ttl=7200, wait=10, poll=0.1)
    assert got["acquired"] and 0.5 < time.monotonic() - started < 5


def test_two_processes_racing_take_it_once(tmp_path):
    """The guard makes read-decide-write atomic: of many takers at once, exactly one wins."""
    path = str(tmp_path / "lease.json")
    code = ("import sys, time; sys.path.insert(0, %r);"
            "from ansible_collections.fleetops.sglang.plugins.module_utils._lease import LeaseFile;"
            "r = LeaseFile(%r).try_acquire({'run_id': sys.argv[1]}, time.time(), 7200);"
            "print(r['acquired'])") % (str(COLLECTIONS_PATH), path)
    procs = [subprocess.Popen([sys.executable, "-c", code, "run-%d" % i], stdout=subprocess.PIPE, text=True)
             for i in range(8)]
    outcomes = [p.communicate()[0].strip() for p in procs]
    assert outcomes.count("True") == 1, outcomes


def test_a_local_holder_whose_process_is_gone_is_detected():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert action.local_process_gone(proc.pid, None) is True
    me = os.getpid()
    assert action.local_process_gone(me, lease.process_started(me)) is False
    # The pid reused by a process that started later is not the holder.
    assert action.local_process_gone(me, lease.process_started(me) - 3600) is True
    assert action.local_process_gone("not a pid", None) is False


def test_the_controller_names_itself_by_its_process_whatever_the_environment(monkeypatch):
    parent = os.getppid()
    holder = action.controller_holder()
    assert holder["pid"] == parent and holder["run_id"] == lease.run_id_of(parent, lease.process_started(parent))
    assert re.fullmatch(r"\d{8}T\d{6}Z-%d" % parent, holder["run_id"])
    # Nothing another process left in the environment (1.x's SGLANG_RUN_ID) names this run.
    monkeypatch.setenv("SGLANG_RUN_ID", "%d:parent-run" % parent)
    assert action.controller_holder()["run_id"] == holder["run_id"]


def test_taking_the_lease_creates_the_state_directory_0700_or_fixes_its_mode(tmp_path):
    state = tmp_path / "var" / "lib" / "sglang-remediation"
    me = {"run_id": "r1", "pid": os.getpid()}
    first = lease.LeaseFile(str(state / "lease.json"))
    assert first.acquire(me, ttl=60, wait=0)["acquired"] is True
    assert first.dir_changed is True and (state.stat().st_mode & 0o7777) == 0o700
    first.release(me)
    # As it should be: nothing to change (a rerun reports changed=false).
    again = lease.LeaseFile(str(state / "lease.json"))
    again.acquire(me, ttl=60, wait=0)
    assert again.dir_changed is False
    again.release(me)
    # Someone loosened it: put back to 0700.
    os.chmod(state, 0o755)
    fixed = lease.LeaseFile(str(state / "lease.json"))
    fixed.acquire(me, ttl=60, wait=0)
    assert fixed.dir_changed is True and (state.stat().st_mode & 0o7777) == 0o700


# --- heartbeats across controllers, and breaking a lease -----------------------------------
def test_a_lease_whose_heartbeat_is_older_than_stale_is_taken_over_from_any_controller():
    quiet = dict(OTHER, heartbeat=NOW - 400)
    verdict, why = lease.decide(quiet, ME, NOW, ttl=7200, stale=300)
    assert verdict == lease.STALE and "last heartbeat is 400s old" in why
    assert "sglang_lock_stale_seconds=300s" in why
    # A fresh heartbeat keeps an old lease held (a long model load is not a dead run).
    assert lease.decide(dict(OTHER, taken_at=NOW - 3000, heartbeat=NOW - 10), ME, NOW, ttl=7200,
                        stale=300) == (lease.HELD, "")
    # A lease of 1.x has no heartbeat: its age counts from when it was taken.
    assert lease.decide(dict(OTHER, taken_at=NOW - 400), ME, NOW, ttl=7200, stale=300)[0] == lease.STALE


def test_the_holder_message_gives_the_last_heartbeat():
    text = lease.describe(dict(OTHER, heartbeat=NOW - 7), NOW)
    assert "bastion-2" in text and "last heartbeat 7s ago" in text


def test_beat_refreshes_only_the_holders_own_lease(tmp_path):
    path = str(tmp_path / "lease.json")
    ours = lease.LeaseFile(path)
    ours.try_acquire(ME, NOW, ttl=7200)
    assert json.loads(open(path).read())["heartbeat"] == NOW
    assert lease.beat({"path": path, "run_id": ME["run_id"]}, now=NOW + 50) is True
    held = json.loads(open(path).read())
    assert held["heartbeat"] == NOW + 50 and held["taken_at"] == NOW
    assert lease.beat({"path": path, "run_id": OTHER["run_id"]}, now=NOW + 60) is False
    assert json.loads(open(path).read())["heartbeat"] == NOW + 50
    assert lease.beat(None) is False and lease.beat({"path": str(tmp_path / "none.json"), "run_id": "x"}) is False


def test_break_removes_anyones_lease_and_records_who_why_and_whose(tmp_path):
    path = tmp_path / "lease.json"
    path.write_text(json.dumps(dict(OTHER, heartbeat=NOW - 5)))
    got = lease.LeaseFile(str(path)).break_lease(ME, "AWX job 4711 cancelled", NOW)
    assert got["broken"] and got["previous"]["run_id"] == OTHER["run_id"] and not path.exists()
    entry = json.loads((tmp_path / lease.BREAK_LOG).read_text().splitlines()[-1])
    assert entry["reason"] == "AWX job 4711 cancelled" and entry["by"]["run_id"] == ME["run_id"]
    assert entry["holder"]["controller"] == "bastion-2" and entry["at"] == NOW
    assert oct(os.stat(tmp_path / lease.BREAK_LOG).st_mode & 0o777) == "0o600"
    assert lease.LeaseFile(str(path)).break_lease(ME, "again", NOW)["broken"] is False


def test_the_module_breaks_a_lease_only_with_a_reason(tmp_path):
    from conftest import MODULES, run_module
    path = tmp_path / "state" / "lease.json"
    path.parent.mkdir()
    path.write_text(json.dumps(dict(OTHER, heartbeat=NOW - 5)))
    rc, res = run_module(MODULES / "sglang_lease.py", tmp_path, dict(path=str(path), state="broken", holder=ME,
                                                                      reason="  "))
    assert rc != 0 and "reason is required" in res["msg"] and path.exists()
    rc, res = run_module(MODULES / "sglang_lease.py", tmp_path, dict(path=str(path), state="broken", holder=ME,
                                                                      reason="controller lost"))
    assert rc == 0 and res["broken"] and res["changed"] and res["previous"]["run_id"] == OTHER["run_id"]
    assert "broke the lease of run %s" % OTHER["run_id"] in json.dumps(res.get("warnings")), res
