"""The live scenario's alert-chain helpers (molecule/live/tests/alert_chain.py) without a host:
the rewrite of the shipped rules, the bounded waits, the DevTools pipe and the process stop,
on their failure paths too (the scenario only walks the paths that work)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "testbed"))
sys.path.insert(0, str(REPO / "molecule" / "live" / "tests"))
import alert_chain  # noqa: E402

SHIPPED = yaml.safe_load((REPO / "examples" / "prometheus" / "alerts.yml").read_text())


def test_the_test_copy_moves_only_the_durations_and_the_staleness_threshold():
    changes = alert_chain.rule_changes(SHIPPED, alert_chain.rules_for_test(SHIPPED))
    assert {(rule, field) for rule, field, _, _ in changes} == (
        {(r["alert"], "for") for g in SHIPPED["groups"] for r in g["rules"]}
        | {("SGLangRemediationTextfileStale", "expr"), ("SGLangAuditTimerStale", "expr")})
    timer = [c for c in changes if c[:2] == ("SGLangAuditTimerStale", "expr")][0]
    assert timer[3] == timer[2].replace(" + 300", "") != timer[2]
    assert ("SGLangRemediationTextfileStale", "expr",
            "time() - sglang_remediation_last_run_timestamp_seconds > 3600",
            "time() - sglang_remediation_last_run_timestamp_seconds > 10") in changes


def test_a_moved_staleness_threshold_is_refused_not_guessed():
    moved = yaml.safe_load(yaml.safe_dump(SHIPPED))
    for rule in moved["groups"][0]["rules"]:
        if rule["alert"] == "SGLangRemediationTextfileStale":
            rule["expr"] = rule["expr"].replace("> 3600", "> 7200")
    with pytest.raises(AssertionError, match="7200"):
        alert_chain.rules_for_test(moved)


def test_rule_changes_sees_every_field_and_refuses_other_rules():
    test = yaml.safe_load(yaml.safe_dump(SHIPPED))
    test["groups"][0]["rules"][0]["labels"]["severity"] = "page"
    assert alert_chain.rule_changes(SHIPPED, test) == [
        ("SGLangHostNonCompliant", "labels", {"severity": "warning"}, {"severity": "page"})]
    test["groups"][0]["rules"][0]["alert"] = "Renamed"
    with pytest.raises(AssertionError):
        alert_chain.rule_changes(SHIPPED, test)


def test_wait_until_retries_through_errors_and_returns_the_first_truthy_result():
    answers = iter([OSError("refused"), None, ValueError("503"), "ready"])

    def probe():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer
    assert alert_chain.wait_until(probe, 5, "probe", interval=0.01) == "ready"


def test_wait_until_names_what_it_waited_for_and_the_last_value_seen():
    with pytest.raises(AssertionError, match=r"the alert firing: not within 0.05s; last seen: \[\]"):
        alert_chain.wait_until(lambda: [], 0.05, "the alert firing", interval=0.01)


def test_stop_process_kills_what_ignores_sigterm():
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; echo up; sleep 30"], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"up\n"
    started = time.monotonic()
    alert_chain.stop_process(proc, grace=0.5)
    assert proc.returncode == -9 and time.monotonic() - started < 10
    alert_chain.stop_process(proc, grace=0.5)  # idempotent
    proc.stdout.close()


def devtools(answers: list[bytes], timeout: float = 2):
    """A _DevTools whose browser side is two pipes: what it was sent, and canned answers."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    os.write(from_w, b"".join(answers))
    return alert_chain._DevTools(to_w, from_r, time.monotonic() + timeout), to_r, from_w


def test_devtools_returns_its_answer_past_events_and_sends_the_session():
    tools, sent, _ = devtools([b'{"method":"Page.loadEventFired","params":{}}\0', b'{"id":1,"result":{"v":2}}\0'])
    assert tools.call("Runtime.evaluate", "S1", expression="1+1") == {"v": 2}
    assert json.loads(os.read(sent, 4096).rstrip(b"\0")) == {
        "id": 1, "method": "Runtime.evaluate", "params": {"expression": "1+1"}, "sessionId": "S1"}


def test_devtools_fails_on_an_error_a_closed_pipe_or_silence():
    tools, _, _ = devtools([b'{"id":1,"error":{"message":"No target"}}\0'])
    with pytest.raises(AssertionError, match="No target"):
        tools.call("Target.attachToTarget")
    tools, _, browser_end = devtools([])
    os.close(browser_end)
    with pytest.raises(AssertionError, match="closed"):
        tools.call("Browser.close")
    tools, _, _ = devtools([b'{"id":1'], timeout=0.1)
    with pytest.raises(AssertionError, match="in time"):
        tools.call("Browser.close")
