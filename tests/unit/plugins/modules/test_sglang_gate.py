"""plugins/modules/sglang_gate.py against the GPU-less test double, run as Ansible runs it.

The gate is one remote call: health polled on the host, the server's view, the
live generation requests and the accept length the server measured.
"""

from __future__ import annotations

import http.server
import sys
import threading
import time
from typing import Any

from conftest import MODULES, run_module
from double_harness import free_port, remediated_double

GATE = MODULES / "sglang_gate.py"
PROMPTS = ["Write a haiku about speculative decoding.", "List three prime numbers."]


def test_waits_for_health_then_reads_view_and_accept_length(tmp_path, run_double, real_059):
    double = remediated_double(tmp_path, run_double, real_059, SGLANG_TEST_DOUBLE_STARTUP_DELAY="1.5")
    start = time.monotonic()
    rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d/" % double.port, wait=30, delay=0.2,
                                              prompts=PROMPTS, max_new_tokens=32))
    assert rc == 0, res
    assert res["ready"] is True and res["status"] == 200 and res["changed"] is False
    # It polled through the 503s of the start-up, on the host, within one call.
    assert res["polls"] > 2, res["polls"]
    assert time.monotonic() - start >= 1.5
    assert res["info"]["version"] == "0.5.9"
    assert res["info"]["speculative_num_draft_tokens"] == 16
    assert [a["meta_info"]["completion_tokens"] for a in res["live"]] == [32, 32]
    accept = res["info_after"]["internal_states"][0]["avg_spec_accept_length"]
    assert 3.2 <= accept <= 3.7, accept
    # The two numbers the role records come from the module, not from Jinja arithmetic.
    assert res["accept_length"] == res["reading"]["accept_length"] and res["accept_length"] > 0
    assert res["accept_length_source"] == res["reading"]["accept_length_source"]
    metas = [a["meta_info"] for a in res["live"]]
    want = round(sum(m["completion_tokens"] for m in metas) / sum(m["e2e_latency"] for m in metas), 1)
    assert res["tokens_per_s"] == want and want > 0


def test_not_ready_is_reported_not_failed(tmp_path, run_double, real_059):
    """The role's `until` retries a not-ready answer; a server that never gets healthy ends there."""
    double = remediated_double(tmp_path, run_double, real_059, SGLANG_TEST_DOUBLE_FAIL_HEALTH="1")
    double.wait_listening()
    # The wait leaves room for polls slowed by a busy machine (CI's two cores ran one poll in over a
    # second); what this proves is the retry, so two polls are enough.
    rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d" % double.port, wait=4, delay=0.2,
                                              prompts=PROMPTS))
    assert rc == 0, res
    assert res["ready"] is False and res["status"] == 503 and res["polls"] >= 2
    assert "not healthy after" in res["msg"] and "info" not in res and "live" not in res


def test_nothing_listening(tmp_path):
    rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d" % free_port(), wait=0.3, delay=0.1))
    assert rc == 0, res
    assert res["ready"] is False and res["status"] is None
    assert "Connection refused" in res["last_error"] or "URLError" in res["last_error"], res["last_error"]


class _HealthyButBroken(http.server.BaseHTTPRequestHandler):
    """Healthy, with a server view, but every /generate answers 500."""

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._send(200, b'{"version": "0.5.9"}')

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(500, b'{"error": "out of memory"}')

    def log_message(self, *args: Any) -> None:
        pass


def test_a_failing_live_request_fails_the_gate(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HealthyButBroken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d" % server.server_address[1], wait=5,
                                                  delay=0.1, prompts=PROMPTS))
    finally:
        server.shutdown()
    assert rc == 1 and res["failed"], res
    assert res["msg"] == "live request 1 of 2 failed: HTTP 500 from http://127.0.0.1:%d/generate" % (
        server.server_address[1]), res["msg"]
    assert res["ready"] is True and res["info"] == {"version": "0.5.9"} and res["live"] == []


EXPECTED = {"version": "0.5.9", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 15,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 16}


def test_a_server_that_passes_records_its_fingerprint_in_the_same_call(tmp_path, run_double, real_059):
    double = remediated_double(tmp_path, run_double, real_059)
    unit = tmp_path / "sglang.service"
    unit.write_text("[Service]\n")
    state = tmp_path / "state" / "running.json"
    args = dict(url="http://127.0.0.1:%d" % double.port, wait=30, delay=0.2, prompts=PROMPTS[:1],
                expected=EXPECTED, accept_length_min=2.0,
                record=dict(components={"unit": str(unit), "sglang": "value:abc"}, state_file=str(state)))
    rc, res = run_module(GATE, tmp_path, args)
    assert rc == 0, res
    assert res["failures"] == [] and res["recorded"] is True and res["changed"] is True
    import json, stat  # noqa: E401
    doc = json.loads(state.read_text())
    assert set(doc["components"]) == {"unit", "sglang"}
    assert stat.S_IMODE(state.stat().st_mode) == 0o600 and stat.S_IMODE(state.parent.stat().st_mode) == 0o700
    # The same fingerprint again: nothing to record.
    rc, res = run_module(GATE, tmp_path, args)
    assert rc == 0 and res["recorded"] is False and res["changed"] is False, res


def test_a_server_that_fails_its_gate_says_why_and_records_nothing(tmp_path, run_double, real_059):
    double = remediated_double(tmp_path, run_double, real_059)
    state = tmp_path / "running.json"
    rc, res = run_module(GATE, tmp_path, dict(
        url="http://127.0.0.1:%d" % double.port, wait=30, delay=0.2, prompts=PROMPTS[:1],
        expected=dict(EXPECTED, speculative_num_steps=9, version="0.5.14"), accept_length_min=50.0,
        record=dict(components={"sglang": "value:abc"}, state_file=str(state))))
    assert rc == 0, res
    assert res["failures"][0] == {
        "code": "live.settings_differ",
        "text": "serves version 0.5.9 with steps/topk/draft tokens 15/1/16; expected 0.5.14 with 9/1/16."}
    assert res["failures"][1]["code"] == "live.accept_length_low", res["failures"]
    assert "below sglang_accept_length_min=50.0" in res["failures"][1]["text"], res["failures"]
    assert res["recorded"] is False and res["changed"] is False and not state.exists()


def test_gate_failures_hold_what_is_expected_and_nothing_more():
    from ansible_collections.fleetops.sglang.plugins.module_utils._live import gate_failures
    info = {"version": "0.5.9", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 15,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 16}
    assert gate_failures(info, EXPECTED, 3.2, 2.5) == []
    # A rollback holds the release only, and no accept length.
    assert gate_failures(dict(info, speculative_num_steps=3), {"version": "0.5.9"}, None, 0) == []
    assert gate_failures(info, {"version": "0.5.12"}, None, 0) == [
        {"code": "live.settings_differ", "text": "serves version 0.5.9, expected 0.5.12."}]
    # A setting the server does not report cannot be shown to run as rendered.
    assert gate_failures(dict(info, speculative_eagle_topk=None), EXPECTED, 3.2, 0) == [
        {"code": "live.settings_differ",
         "text": "serves version 0.5.9 with steps/topk/draft tokens 15/?/16; expected 0.5.9 with 15/1/16."}]
    assert gate_failures(dict(info, speculative_algorithm="NEXTN"), EXPECTED, 3.2, 0) != []
    assert gate_failures(info, EXPECTED, None, 2.5) == [
        {"code": "live.accept_length_low",
         "text": "speculative decoding accepts ? tokens per step, below sglang_accept_length_min=2.5; the draft is "
                 "probably fed other hidden states than it was trained on."}]


def test_a_key_file_that_cannot_be_read_fails_the_gate_once_healthy(tmp_path, run_double, real_059):
    """The gate's one failure before any request: healthy, but its own key file is gone or bad."""
    double = remediated_double(tmp_path, run_double, real_059)
    args = dict(url="http://127.0.0.1:%d" % double.port, wait=30, delay=0.2, prompts=PROMPTS,
                record=dict(state_file=str(tmp_path / "state" / "running.json"), components={"x": "value:y"}))
    bad = tmp_path / "bad.keys.yaml"
    bad.write_text("api-key: 42\n")  # not the one form the role writes (a JSON string)
    (tmp_path / "a-directory").mkdir()
    for path in (bad, tmp_path / "a-directory"):
        rc, res = run_module(GATE, tmp_path, dict(args, api_key_file=str(path)))
        assert rc != 0 and res["failed"] and res["ready"] is True, res
        assert res["msg"].startswith("healthy, but the key file cannot be read: ") and path.name in res["msg"], res
        # Nothing was asked of the server, and nothing recorded.
        assert "info" not in res and "live" not in res and not (tmp_path / "state" / "running.json").exists()
    # A file that is not there is no key (the role removes it when none is set): the gate goes on.
    rc, res = run_module(GATE, tmp_path, dict(args, api_key_file=str(tmp_path / "no-such.keys.yaml")))
    assert rc == 0 and res["ready"] and "info" in res, res


# --- a server that exits is not waited out (the unit read between polls) ---------------------------


def _unit_stubs(tmp_path, show: str, journal: str = "") -> None:
    """systemctl and journalctl for run_module's PATH (its own stub is only written where none is)."""
    bin_dir = tmp_path / "bin-active"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text("#!/bin/sh\ncat <<'EOF'\n%sEOF\n" % show)
    (bin_dir / "journalctl").write_text("#!/bin/sh\ncat <<'EOF'\n%sEOF\n" % journal)
    for stub in ("systemctl", "journalctl"):
        (bin_dir / stub).chmod(0o755)


def test_a_server_that_exited_ends_the_wait_at_once_with_its_exit_and_journal_redacted(tmp_path):
    key, token = "sk-live-0123456789", "hf_secret_value_42"
    (tmp_path / "keys.yaml").write_text('api-key: "%s"\n' % key)
    (tmp_path / "sglang.env").write_text('HOME=/var/lib/sglang\nHF_TOKEN="%s"\nEXTRA="1"\n' % token)
    _unit_stubs(tmp_path, "ActiveState=activating\nSubState=auto-restart\nNRestarts=3\nMainPID=0\n"
                          "ExecMainCode=1\nExecMainStatus=1\nResult=exit-code\n",
                "server_args=ServerArgs(model_path='/models/x', api_key='%s', port=30000)\n"
                "env: HF_TOKEN=%s, key again %s\nmodel warmup failed\n" % (key, token, key))
    start = time.monotonic()
    rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d" % free_port(), wait=60, delay=0.2,
                                              service="sglang", api_key_file=str(tmp_path / "keys.yaml"),
                                              environment_file=str(tmp_path / "sglang.env")))
    assert rc == 0, res
    assert time.monotonic() - start < 30, "the wait was not cut short"
    assert res["ready"] is False and res["crashed"] is True and res["polls"] == 1 and res["waited"] < 30
    assert res["exit"] == {"state": "activating (auto-restart)", "restarts": 3, "exit": "exited with status 1",
                           "result": "exit-code"}
    assert res["journal"][-1] == "model warmup failed" and len(res["journal"]) == 3
    text = "\n".join(res["journal"])
    assert key not in text and token not in text and "api_key='<redacted>'" in text, text
    assert "exited with status 1" in res["msg"] and "3 restarts by systemd" in res["msg"]


def test_a_unit_that_still_runs_its_server_is_waited_for(tmp_path):
    _unit_stubs(tmp_path, "ActiveState=active\nSubState=running\nNRestarts=0\nMainPID=4242\n"
                          "ExecMainCode=0\nExecMainStatus=0\nResult=success\n")
    rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d" % free_port(), wait=1, delay=0.2,
                                              service="sglang"))
    assert rc == 0, res
    assert res["ready"] is False and res["crashed"] is False and res["polls"] >= 2 and "exit" not in res


def test_what_counts_as_a_server_that_left_its_running_state():
    from ansible_collections.fleetops.sglang.plugins.module_utils import _live
    running = {"ActiveState": "active", "SubState": "running", "NRestarts": "0", "MainPID": "10"}
    assert _live.unit_exit(running, running) is None
    assert _live.unit_exit({}, {"ActiveState": "activating", "SubState": "start"}) is None  # still starting
    for now in ({"SubState": "auto-restart"}, {"ActiveState": "failed"}, {"ActiveState": "inactive"},
                dict(running, NRestarts="1"), dict(running, MainPID="11")):
        assert _live.unit_exit(running, dict(running, **now)) is not None, now
    assert _live.exit_text({"ExecMainCode": "2", "ExecMainStatus": "9"}) == "killed by signal 9 (SIGKILL)"
    assert _live.exit_text({"ExecMainCode": "3", "ExecMainStatus": "11"}) == "dumped core on signal 11 (SIGSEGV)"


def test_log_lines_lose_every_secret_but_keep_what_only_looks_like_one():
    from ansible_collections.fleetops.sglang.plugins.module_utils import _live
    lines = {
        "ServerArgs(api_key='sk-1', admin_api_key=\"adm-2\", hf_token=None)":
            "ServerArgs(api_key='<redacted>', admin_api_key=\"<redacted>\", hf_token=<redacted>)",
        "HF_TOKEN=hf_abc OTHER=1": "HF_TOKEN=<redacted> OTHER=1",
        "--api-key sk-0123456789 --port 30000": "--api-key <redacted> --port 30000",
        "Authorization: Bearer abc.def": "Authorization: Bearer <redacted>",
        "max_new_tokens=64 tokens_per_s=88.1 the token budget": "max_new_tokens=64 tokens_per_s=88.1 the token budget",
        "a known value: s3cr3t-value here": "a known value: <redacted> here",
    }
    for line, want in lines.items():
        assert _live.redact_text(line, ["s3cr3t-value"]) == want, line


def test_a_healthy_server_says_how_long_it_took_from_its_start(tmp_path, run_double, real_059):
    double = remediated_double(tmp_path, run_double, real_059, SGLANG_TEST_DOUBLE_STARTUP_DELAY="0.5")
    # systemd's monotonic start of the main process: 5 s before this stub runs (one clock, CLOCK_MONOTONIC).
    bin_dir = tmp_path / "bin-active"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(
        "#!%s\nimport time\nprint('ActiveState=active\\nSubState=running\\nNRestarts=0\\nMainPID=7\\n'\n"
        "      'ExecMainStartTimestampMonotonic=%%d' %% int((time.monotonic() - 5) * 1e6))\n" % sys.executable)
    (bin_dir / "systemctl").chmod(0o755)
    rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d" % double.port, wait=30, delay=0.2,
                                              service="sglang"))
    assert rc == 0 and res["ready"] is True and res["crashed"] is False, res
    assert 4.5 <= res["healthy_after"] <= 15, res["healthy_after"]


class _StandIn(http.server.BaseHTTPRequestHandler):
    """SGLang's launch_dummy_health_check_server on a rank >= 1: the health routes, nothing else."""

    paths = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.paths.append(self.path)
        code = 200 if self.path in ("/ping", "/health", "/health_generate") else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_followers_gate_is_its_stand_in_health_and_the_record(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    unit = tmp_path / "sglang.service"
    unit.write_text("[Service]\n")
    state = tmp_path / "state" / "running.json"
    args = dict(url="http://127.0.0.1:%d" % server.server_address[1], wait=5, delay=0.1, prompts=PROMPTS,
                expected=EXPECTED, accept_length_min=2.0,
                record=dict(components={"unit": str(unit)}, state_file=str(state)))
    try:
        # As the leader's gate it fails: a stand-in server has no server info.
        rc, res = run_module(GATE, tmp_path, args)
        assert rc == 1 and "/server_info and /get_server_info failed" in res["msg"], res
        assert not state.exists()
        _StandIn.paths.clear()
        rc, res = run_module(GATE, tmp_path, dict(args, node_rank=1))
    finally:
        server.shutdown()
    assert rc == 0, res
    assert res["ready"] is True and res["follower"] is True and res["failures"] == [], res
    assert res["recorded"] is True and state.exists()
    assert "info" not in res and "live" not in res
    assert _StandIn.paths == ["/health_generate"], _StandIn.paths
