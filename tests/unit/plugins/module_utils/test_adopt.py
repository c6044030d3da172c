"""Adopting a running server with no recorded healthy start (module_utils/_adopt.py, sglang_probe).

The running server is a real process: a sleeper for the rules, the GPU-less test double serving a
remediated 0.5.9 for the probe (its live reading must pass). systemctl is the tests' stub: it
answers MainPID with $SGLANG_TEST_MAINPID.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MODULE_UTILS_DIR, MODULES, clock_past, run_module, wait_running
from double_harness import free_port, remediated_double

spec = importlib.util.spec_from_file_location("_adopt", MODULE_UTILS_DIR / "_adopt.py")
A = importlib.util.module_from_spec(spec)
spec.loader.exec_module(A)

PROBE = MODULES / "sglang_probe.py"
EXPECTED = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 15, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 16}


@pytest.fixture
def sleeper(tmp_path):
    """(process, argv, env file, config, seen): a process started after its env file and config were written,
    running by ``seen``."""
    env_file = tmp_path / "sglang.env"
    env_file.write_text('# managed\nHOME=/var/lib/sglang\nHF_TOKEN="hf_s3cret \\\"q\\\""\nN="3"\n')
    config = tmp_path / "config.json"
    config.write_text("{}")
    clock_past(max(env_file.stat().st_ctime, config.stat().st_ctime))
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--model-path", "/models/x y"]
    proc = subprocess.Popen(argv, env={"HOME": "/var/lib/sglang", "HF_TOKEN": 'hf_s3cret "q"', "N": "3",
                                       "EXTRA": "systemd sets others"})
    seen = wait_running(proc, argv)
    yield proc, argv, env_file, config, seen
    proc.kill()
    proc.wait()


def test_a_process_running_the_rendered_command_and_environment_after_its_files_is_adoptable(sleeper):
    proc, argv, env_file, config, _seen = sleeper
    assert A.adoption_blockers(proc.pid, argv, str(env_file), [str(config), "/no/such/file"]) == []


def test_another_command_line_environment_or_a_later_change_blocks_it(sleeper, tmp_path):
    proc, argv, env_file, config, seen = sleeper
    other = argv[:-1] + ["/models/other"]
    assert A.adoption_blockers(proc.pid, other, str(env_file), []) == [
        "its command line differs from the unit's (5 items running, 5 rendered; item 4 is '/models/x y', "
        "rendered '/models/other')"]
    changed = tmp_path / "changed.env"
    changed.write_text('HF_TOKEN="another-s3cret"\nN=3\n')
    blockers = A.adoption_blockers(proc.pid, argv, str(changed), [])
    assert blockers == ["its environment differs in HF_TOKEN"] and "s3cret" not in " ".join(blockers)
    clock_past(seen)
    os.utime(str(config))  # a change after the start: ctime moves
    assert A.adoption_blockers(proc.pid, argv, str(env_file), [str(config)]) == [
        "it started before %s changed" % config]
    assert A.adoption_blockers(None, argv, str(env_file), []) == ["the service has no main process"]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert A.adoption_blockers(gone.pid, argv, str(env_file), [])[0].startswith("the running server cannot be read")


@pytest.mark.parametrize("running, rendered, shown", [
    (["--api-key=s3cret-legacy"], ["--config"], "item 3 is '--api-key=<hidden>', rendered '--config'"),
    (["--api-key", "s3cret-legacy"], ["--api-key", "other-s3cret"],
     "item 4 is <hidden: the value of --api-key>, rendered <hidden: the value of --api-key>"),
    (["--admin-api-key", "s3cret-legacy"], ["--host"], "item 3 is '--admin-api-key', rendered '--host'"),
])
def test_a_difference_never_shows_a_secret_flags_value(tmp_path, running, rendered, shown):
    """A server an older collection started with its keys on the command line: the message names the
    difference, not the key."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)"] + running
    proc = subprocess.Popen(argv)
    try:
        wait_running(proc, argv)
        env_file = tmp_path / "sglang.env"
        env_file.write_text("")
        (blocker,) = A.adoption_blockers(proc.pid, argv[:3] + rendered, str(env_file), [])
    finally:
        proc.kill()
        proc.wait()
    assert shown in blocker and "s3cret" not in blocker, blocker


def test_the_start_time_is_the_process_s_own(sleeper):
    proc = sleeper[0]
    assert abs(A.process_start_time(proc.pid) - time.time()) < 30
    assert A.process_start_time(os.getpid()) <= A.process_start_time(proc.pid)


@pytest.fixture
def adoptable(host, tmp_path, run_double, real_059, monkeypatch):
    """A converged host's files whose healthy start was never recorded, and the double serving them."""
    h = host("0.5.9")
    h.env.write_text('SGLANG_TEST_DOUBLE_STARTUP_DELAY="0.3"\n')
    recorded = json.loads(h.state_file.read_text())["components"]
    h.state_file.unlink()
    clock_past(max(p.stat().st_ctime for p in (h.unit, h.env, h.draft)))
    (tmp_path / "srv").mkdir()
    double = remediated_double(tmp_path / "srv", run_double, real_059)
    double.wait_healthy()
    monkeypatch.setenv("SGLANG_TEST_MAINPID", str(double.proc.pid))
    args = h.args(live=dict(url="http://127.0.0.1:%d" % double.port, expected=EXPECTED, prompts=["x"]),
                  adopt=dict(argv=list(double.proc.args), env_file=str(h.env),
                             paths=[str(h.unit), str(h.env), str(h.draft)], record=True))
    return h, double, args, recorded


def test_the_probe_adopts_and_records_what_the_gate_would(adoptable):
    h, _double, args, recorded = adoptable
    rc, res = run_module(PROBE, h.tmp, args, check_mode=True)
    assert rc == 0 and res["compliant"] and res["adoption"] == {"adopted": True, "recorded": False, "blockers": []}
    assert res["changed"] is False and not h.state_file.exists()
    rc, res = run_module(PROBE, h.tmp, args)
    assert rc == 0 and res["compliant"] and res["restart_needed"] is False, res["reasons"]
    assert res["adoption"] == {"adopted": True, "recorded": True, "blockers": []} and res["changed"] is True
    # The same record as a healthy start after the gate: the next probe finds nothing to do.
    assert json.loads(h.state_file.read_text())["components"] == dict(
        recorded, environment=hashlib.sha256(h.env.read_bytes()).hexdigest())
    rc, res = run_module(PROBE, h.tmp, args)
    assert rc == 0 and res["compliant"] and res["adoption"] is None and res["changed"] is False


def test_the_probe_restarts_a_server_it_cannot_adopt(adoptable):
    h, double, args, _recorded = adoptable
    args["adopt"]["argv"] = list(double.proc.args[:-1]) + ["1"]
    rc, res = run_module(PROBE, h.tmp, args)
    assert rc == 0 and not res["compliant"] and res["restart_needed"] is True
    assert res["reasons"] == [{"code": "server.not_recorded",
                               "text": "no healthy start recorded: restart needed (not adopted: its command line "
                                       "differs from the unit's (%d items running, %d rendered; item %d is %r, "
                                       "rendered '1'))" % (len(double.proc.args), len(double.proc.args),
                                                           len(double.proc.args) - 1, double.proc.args[-1])}]
    assert not h.state_file.exists()
    # Live findings come first: a server whose reading fails is not even considered.
    args = dict(args, live=dict(args["live"], expected=dict(EXPECTED, speculative_num_steps=7)))
    rc, res = run_module(PROBE, h.tmp, args)
    assert res["adoption"] is None and res["reasons"] == [
        {"code": "server.not_recorded", "text": "no healthy start recorded: restart needed"}]


def test_a_follower_is_adopted_on_its_health_and_not_without_it(adoptable):
    """A follower of a multi-node replica has no API to read: its stand-in health server's /health stands for the
    live reading (the leader's reading is the replica's). Nothing answering there: not adopted, restarted."""
    h, double, args, _recorded = adoptable
    args = {k: v for k, v in args.items() if k != "live"}
    args["adopt"] = dict(args["adopt"], health_url="http://127.0.0.1:%d" % free_port())
    rc, res = run_module(PROBE, h.tmp, args)
    assert rc == 0 and res["adoption"] is None and res["restart_needed"] is True, res
    args["adopt"] = dict(args["adopt"], health_url="http://127.0.0.1:%d" % double.port)
    rc, res = run_module(PROBE, h.tmp, args)
    assert rc == 0 and res["adoption"] == {"adopted": True, "recorded": True, "blockers": []}, res
    assert res["restart_needed"] is False and h.state_file.exists()
