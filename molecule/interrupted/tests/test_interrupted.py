"""A run stopped between the patch and the restart is finished by the next run.

Molecule's converge installed 0.5.9 and started it. Two interruptions follow:

1. The upgrade to 0.5.12.post1 runs only up to configure (``--tags
   sglang_install,sglang_patch,sglang_verify,sglang_configure``): the new release is installed and patched on
   disk while the old process keeps running. The rerun must restart exactly once,
   without re-patching, and end compliant.
2. A flag change whose run is killed (SIGKILL to ansible-playbook) after the
   restart but before the healthy start was recorded. Its lease, made to look like
   another controller's (an AWX pod), is waited for while its heartbeat is fresh,
   refused to playbooks/lease_break.yml without a reason, broken with one (recorded
   on the host), and, left again with a heartbeat gone stale, taken over by the
   rerun with a warning naming it. The rerun must restart exactly once more and
   record it; a third run must change nothing.

The tests run in file order and build on each other.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from operator_runs import main_pid  # noqa: E402

from scenario_helpers import (  # noqa: E402
    CONVERGE, PROJECT, UNIT, assert_rerun_changes_nothing, deepseek_path, draft_ids, inventory, record_sha256,
    run_playbook, server_info, sha256, starts, wait_until,
)

UPGRADE = {"sglang_version": "0.5.12.post1"}
PRISTINE_0512 = "3947d605e2ffeafb2d20baa2d87490d02a5671df0eb7bd0527ec60581580a49c"
NAME = "%s-interrupted-%s" % (os.environ.get("SGLANG_TESTBED_PREFIX", "sglang"), os.environ.get("MOLECULE_DISTRO", "bookworm"))
# A slow start leaves a wide window between the restart and the record.
SLOW_FLAGS = {
    "sglang_version": "0.5.12.post1",
    "sglang_speculative_num_steps": 7,
    "sglang_speculative_num_draft_tokens": 8,
    "sglang_environment": {
        # Long enough that the kill below lands while the gate still waits, on a loaded machine too.
        "SGLANG_TEST_DOUBLE_STARTUP_DELAY": "45",
        "SGLANG_TEST_DOUBLE_START_LOG": "/var/lib/sglang/starts.log",
        "HF_TOKEN": "hf_demo_not_a_real_token",
    },
}
_state = {}
LEASE = "/var/lib/sglang-remediation/lease.json"
RUNNING = "/var/lib/sglang-remediation/running.json"
OTHER_CONTROLLER = "awx-ee-7f9c4-job-4711"


def _main_pid(host) -> str:
    # docker exec (operator_runs), not testinfra's Ansible backend: seconds sooner under load.
    return str(main_pid(NAME))


def _mtime(host, path: str) -> str:
    return host.check_output("stat -c %%Y.%%Z %s" % path).strip()


def _compliant(host, version: str, steps: int) -> None:
    info = server_info(host)
    assert info["version"] == version
    assert info["speculative_num_steps"] == steps
    assert info["test_double"]["wiring_matches_training"], info["test_double"]


def test_run_stopped_before_the_restart_leaves_the_old_process_running(host):
    """A run without the restart tags builds, patches, verifies and seals 0.5.12.post1 beside the release
    that serves; the link (the switch) is moved only at the restart, so 0.5.9 still serves, and is what
    the unit would start."""
    assert starts(host) == 1
    pid = _main_pid(host)
    serving = host.check_output("readlink -f /opt/sglang/venv").strip()
    run = run_playbook(extra_vars=UPGRADE, args=["--tags", "sglang_install,sglang_patch,sglang_verify,sglang_configure"])
    assert run.rc == 0, run.tail(120)
    assert host.check_output("readlink -f /opt/sglang/venv").strip() == serving
    built = host.check_output("ls -d /opt/sglang/releases/0.5.12.post1-*").strip()
    path = host.check_output("ls %s/lib/python3*/site-packages/sglang/srt/models/deepseek_v2.py" % built).strip()
    assert sha256(host, path) != PRISTINE_0512
    assert "self.capture_embedding_for_eagle3 = False" in host.file(path).content_string
    marker = json.loads(host.file(built + "/.fleetops-release.json").content_string)
    assert marker["version"] == "0.5.12.post1" and marker["files"]["sglang/srt/models/deepseek_v2.py"] == sha256(
        host, path)
    assert draft_ids(host) == [-1, 2, 30]
    # Nothing restarted: the 0.5.9 process still serves.
    assert _main_pid(host) == pid and starts(host) == 1
    assert server_info(host)["version"] == "0.5.9"
    _state["patched_mtime"], _state["built"] = _mtime(host, path), built


def test_rerun_restarts_exactly_once_without_repatching(host):
    run = run_playbook(extra_vars=UPGRADE)
    assert run.rc == 0 and run.failed() == 0, run.tail(120)
    assert starts(host) == 2, run.tail(120)
    assert "restart: " in run.output
    # Switched to the release built before, not built or patched again.
    assert host.check_output("readlink -f /opt/sglang/venv").strip() == _state["built"]
    assert record_sha256(host) == PRISTINE_0512
    assert _mtime(host, deepseek_path(host)) == _state["patched_mtime"]  # the patch was not redone
    _compliant(host, "0.5.12.post1", 15)


def test_rerun_after_the_finished_upgrade_changes_nothing(host):
    assert_rerun_changes_nothing(host, UPGRADE, starts_so_far=2)


def test_run_killed_after_the_restart_before_the_record(host, tmp_path):
    pid = _main_pid(host)
    recorded = _mtime(host, RUNNING)
    log = open(tmp_path / "killed-run.log", "w")
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(SLOW_FLAGS))
    proc = subprocess.Popen(
        ["ansible-playbook", "-i", inventory(), str(CONVERGE), "-e", "@%s" % vars_file],
        stdout=log, stderr=subprocess.STDOUT, cwd=str(PROJECT), start_new_session=True,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    try:
        # Generous: on a loaded 2-core CI machine the run takes minutes to get there.
        # A look every 2 s (a docker exec each) lands well inside the 45 s the slow start keeps the gate waiting.
        wait_until(lambda: proc.poll() is not None or _main_pid(host) not in (pid, "0"), 900, "the restart", 2)
        assert proc.poll() is None, "the run ended before it could be killed: %s" % (tmp_path / "killed-run.log")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    # Over SSH the module running on the host (the gate, waiting for the slow start) dies with the
    # connection; a docker exec'd one would run on and record the start. End it as the lost
    # connection would: a pipelined module is the interpreter alone on its command line.
    # For a few seconds: a module whose docker exec was on its way when the controller died starts
    # after a single pkill, and would record the start the rerun must make.
    host.run("for i in $(seq 30); do pkill -KILL -f '^/usr/bin/python3$'; sleep 0.1; done; true")
    assert "--speculative-num-steps 7" in host.file(UNIT).content_string
    # The killed run's server becomes healthy on its own; count that start first.
    wait_until(lambda: starts(host) == 3, 120, "the killed run's server to come up", 2)
    # Healthy now, and no module of the killed run left on the host that could still record it: what the
    # record says now is what it will say.
    survivors = host.run("pgrep -af '^/usr/bin/python3$'")
    assert survivors.rc == 1, "a module of the killed run outlived the kill: %s" % survivors.stdout
    assert _mtime(host, RUNNING) == recorded, "the killed run's gate recorded the start after all"
    _state["killed_pid"] = _main_pid(host)


def _leave_lease(host, heartbeat_age: float) -> dict:
    """The killed run's lease as another controller's run would leave it, last heartbeat that long ago."""
    if "lease" not in _state:
        _state["lease"] = json.loads(host.file(LEASE).content_string)
    lease = _state["lease"]
    lease = dict(lease, controller=OTHER_CONTROLLER, pid=4242, heartbeat=time.time() - heartbeat_age)
    host.run("umask 077; cat > %s <<'EOF'\n%s\nEOF" % (LEASE, json.dumps(lease)))
    return lease


def test_a_live_lease_of_another_controller_is_waited_for(host):
    lease = _leave_lease(host, heartbeat_age=5)
    run = run_playbook(extra_vars=dict(SLOW_FLAGS, sglang_lock_timeout=0))
    assert run.rc != 0, run.tail(60)
    assert "another run holds this host's lease: run %s by" % lease["run_id"] in run.output, run.tail(60)
    assert OTHER_CONTROLLER in run.output and "last heartbeat" in run.output, run.tail(60)
    assert starts(host) == 3


def test_lease_break_needs_a_reason_then_records_it(host):
    playbook = PROJECT / "playbooks" / "lease_break.yml"
    refused = run_playbook(playbook, args=["--limit", NAME])
    assert refused.rc != 0 and "breaking a lease needs both a reason" in refused.output, refused.tail(40)
    assert host.file(LEASE).exists
    reason = "AWX job 4711 cancelled mid-run (test)"
    run = run_playbook(playbook, extra_vars={"sglang_lease_break_reason": reason}, args=["--limit", NAME])
    assert run.rc == 0, run.tail(40)
    assert "broke the lease of run %s by" % _state["lease"]["run_id"] in run.output, run.tail(40)
    assert not host.file(LEASE).exists
    entry = json.loads(host.file("/var/lib/sglang-remediation/lease-breaks.jsonl").content_string.splitlines()[-1])
    assert entry["reason"] == reason and entry["holder"]["controller"] == OTHER_CONTROLLER
    assert entry["by"]["run_id"] and entry["by"]["run_id"] != _state["lease"]["run_id"]
    again = run_playbook(playbook, extra_vars={"sglang_lease_break_reason": reason}, args=["--limit", NAME])
    assert again.rc == 0 and "no lease to break" in again.output, again.tail(40)


def test_rerun_after_the_kill_restarts_exactly_once_and_records(host):
    # The killed run's lease once more, its heartbeat gone stale: taken over from "another controller".
    lease = _leave_lease(host, heartbeat_age=600)
    run = run_playbook(extra_vars=dict(SLOW_FLAGS, sglang_lock_stale_seconds=300))
    assert run.rc == 0 and run.failed() == 0, run.tail(120)
    assert "took over the lease of run %s by" % lease["run_id"] in run.output, run.tail(120)
    assert "older than sglang_lock_stale_seconds=300s" in run.output, run.tail(120)
    assert starts(host) == 4, run.tail(120)
    assert _main_pid(host) != _state["killed_pid"]
    _compliant(host, "0.5.12.post1", 7)


def test_third_run_changes_nothing(host):
    # With the variables of the run before: sglang_lock_stale_seconds is in the audit timer's spec too (the timer
    # judges a lease stale as a run would), so another value would rewrite it, and say so.
    assert_rerun_changes_nothing(host, dict(SLOW_FLAGS, sglang_lock_stale_seconds=300), starts_so_far=4)
