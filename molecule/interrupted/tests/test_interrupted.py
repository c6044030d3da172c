"""A run stopped between the patch and the restart is finished by the next run.

Molecule's converge installed 0.5.9 and started it. Two interruptions follow:

1. The upgrade to 0.5.12.post1 runs only up to configure (``--tags
   install,patch,verify,configure``): the new release is installed and patched on
   disk while the old process keeps running. The rerun must restart exactly once,
   without re-patching, and end compliant.
2. A flag change whose run is killed (SIGKILL to ansible-playbook) after the
   restart but before the healthy start was recorded. The rerun must restart
   exactly once more and record it; a third run must change nothing.

The tests run in file order and build on each other.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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
    assert starts(host) == 1
    pid = _main_pid(host)
    run = run_playbook(extra_vars=UPGRADE, args=["--tags", "install,patch,verify,configure"])
    assert run.rc == 0, run.tail(120)
    path = deepseek_path(host)
    assert record_sha256(host) == PRISTINE_0512
    assert sha256(host, path) != PRISTINE_0512
    assert "self.capture_embedding_for_eagle3 = False" in host.file(path).content_string
    assert draft_ids(host) == [-1, 2, 30]
    # Nothing restarted: the 0.5.9 process still serves.
    assert _main_pid(host) == pid and starts(host) == 1
    assert server_info(host)["version"] == "0.5.9"
    _state["patched_mtime"] = _mtime(host, path)


def test_rerun_restarts_exactly_once_without_repatching(host):
    run = run_playbook(extra_vars=UPGRADE)
    assert run.rc == 0 and run.failed() == 0, run.tail(120)
    assert starts(host) == 2, run.tail(120)
    assert "restart: " in run.output
    assert _mtime(host, deepseek_path(host)) == _state["patched_mtime"]  # the patch was not redone
    _compliant(host, "0.5.12.post1", 15)


def test_rerun_after_the_finished_upgrade_changes_nothing(host):
    assert_rerun_changes_nothing(host, UPGRADE, starts_so_far=2)


def test_run_killed_after_the_restart_before_the_record(host, tmp_path):
    pid = _main_pid(host)
    log = open(tmp_path / "killed-run.log", "w")
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(SLOW_FLAGS))
    proc = subprocess.Popen(
        ["ansible-playbook", "-i", inventory(), str(CONVERGE), "-e", "@%s" % vars_file],
        stdout=log, stderr=subprocess.STDOUT, cwd=str(PROJECT), start_new_session=True,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    try:
        # Generous: on a loaded 2-core CI machine the run takes minutes to get there.
        wait_until(lambda: proc.poll() is not None or _main_pid(host) not in (pid, "0"), 900, "the restart", 0.3)
        assert proc.poll() is None, "the run ended before it could be killed: %s" % (tmp_path / "killed-run.log")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    # Over SSH the module running on the host (the gate, waiting for the slow start) dies with the
    # connection; a docker exec'd one would run on and record the start. End it as the lost
    # connection would: a pipelined module is the interpreter alone on its command line.
    host.run("pkill -KILL -f '^/usr/bin/python3$' || true")
    assert "--speculative-num-steps 7" in host.file(UNIT).content_string
    # The killed run's server becomes healthy on its own; count that start first.
    wait_until(lambda: starts(host) == 3, 120, "the killed run's server to come up", 0.3)
    _state["killed_pid"] = _main_pid(host)


def test_rerun_after_the_kill_restarts_exactly_once_and_records(host):
    run = run_playbook(extra_vars=SLOW_FLAGS)
    assert run.rc == 0 and run.failed() == 0, run.tail(120)
    assert starts(host) == 4, run.tail(120)
    assert _main_pid(host) != _state["killed_pid"]
    _compliant(host, "0.5.12.post1", 7)


def test_third_run_changes_nothing(host):
    assert_rerun_changes_nothing(host, SLOW_FLAGS, starts_so_far=4)
