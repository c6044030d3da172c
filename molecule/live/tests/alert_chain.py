"""The alert chain on the controller: a Prometheus server, its rules and its HTTP API.

Debian's Prometheus (testbed.ensure_prometheus: the binary and the web UI files of the
`prometheus` package, never installed) runs from a temporary directory with a copy of
examples/prometheus/alerts.yml and scrapes the test host's node_exporter through the port
docker published on 127.0.0.1. The copy differs from the shipped file only where the test
would otherwise wait for minutes or an hour (``rules_for_test``); ``rule_changes`` lists
every difference so that the test can assert that nothing else moved.
"""
from __future__ import annotations

import base64
import copy
import fcntl
import functools
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

import browser

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import scenario_helpers  # noqa: E402

# The scenarios' bounded poll, five times a second: Prometheus evaluates every second, and the
# test records how long an alert took to fire.
wait_until = functools.partial(scenario_helpers.wait_until, interval=0.2)

# Every `for:` of the shipped rules (5 minutes to half an hour) becomes this: long enough
# that an alert is seen pending before it fires (two evaluations at 1 s), short enough
# for a test.
TEST_FOR = "2s"
STALE_RULE = "SGLangRemediationTextfileStale"
SHIPPED_STALE_THRESHOLD = "> 3600"
# The staleness threshold of the copy, in seconds: longer than one evaluation and scrape
# after a run, far shorter than the shipped hour.
TEST_STALE_AFTER_S = 10
# The audit timer's staleness: two intervals and their jitter, and the shipped five minutes more; the copy drops the
# five minutes, so that a timer of seconds (test_live.py's) turns stale seconds after it stopped.
TIMER_STALE_RULE = "SGLangAuditTimerStale"
SHIPPED_TIMER_GRACE = "+ 300"
INTERVAL = "1s"


def rules_for_test(shipped: Dict[str, Any]) -> Dict[str, Any]:
    """The shipped rule groups with short `for:` durations and the staleness threshold in
    seconds instead of an hour; the expressions, labels and annotations otherwise as shipped."""
    rules = copy.deepcopy(shipped)
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = TEST_FOR
            if rule.get("alert") == STALE_RULE:
                # Refuse to guess when the shipped threshold moved: the test must be told.
                assert rule["expr"].count(SHIPPED_STALE_THRESHOLD) == 1, rule["expr"]
                rule["expr"] = rule["expr"].replace(SHIPPED_STALE_THRESHOLD, "> %d" % TEST_STALE_AFTER_S)
            if rule.get("alert") == TIMER_STALE_RULE:
                assert rule["expr"].count(SHIPPED_TIMER_GRACE) == 1, rule["expr"]
                rule["expr"] = rule["expr"].replace(" " + SHIPPED_TIMER_GRACE, "")
    return rules


def rule_changes(shipped: Dict[str, Any], test: Dict[str, Any]) -> List[Tuple[str, str, Any, Any]]:
    """Every (rule, field, shipped value, test value) that differs between two rule files with
    the same groups and rules in the same order."""
    assert [g["name"] for g in shipped["groups"]] == [g["name"] for g in test["groups"]]
    changes = []
    for group_s, group_t in zip(shipped["groups"], test["groups"]):
        assert {k: v for k, v in group_s.items() if k != "rules"} == {k: v for k, v in group_t.items() if k != "rules"}
        assert [r.get("alert") for r in group_s["rules"]] == [r.get("alert") for r in group_t["rules"]]
        for rule_s, rule_t in zip(group_s["rules"], group_t["rules"]):
            for key in sorted(set(rule_s) | set(rule_t)):
                if rule_s.get(key) != rule_t.get(key):
                    changes.append((rule_s["alert"], key, rule_s.get(key), rule_t.get(key)))
    return changes


def free_loopback_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Prometheus:
    """One Prometheus server on 127.0.0.1 with its data in a temporary directory; ``stop``
    ends it and removes the directory."""

    def __init__(self, binary: Path, assets: Path, target: str, rules: Dict[str, Any], log: Path) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="live-prometheus-")
        root = Path(self.tmp.name)
        (root / "alerts.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
        (root / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL, "scrape_timeout": INTERVAL},
            "rule_files": [str(root / "alerts.yml")],
            "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": [target]}]}],
        }, sort_keys=False))
        self.port = free_loopback_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.target = target
        self.log = log
        self.rules_file = root / "alerts.yml"
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "w")
        self.proc = subprocess.Popen([
            str(binary), "--config.file=%s" % (root / "prometheus.yml"),
            "--storage.tsdb.path=%s" % (root / "data"),
            "--web.listen-address=127.0.0.1:%d" % self.port,
            "--web.local-assets=%s" % assets,
            "--log.level=warn",
        ], stdout=self._log, stderr=subprocess.STDOUT)

    def get(self, path: str, **params: str) -> Any:
        """The ``data`` of one API answer (status success), within 5 seconds."""
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        with urllib.request.urlopen(self.url + path + query, timeout=5) as resp:
            body = json.loads(resp.read().decode())
        if body.get("status") != "success":
            raise ValueError(body)
        return body["data"]

    def wait_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError("prometheus exited with %s:\n%s" % (self.proc.returncode, self.log.read_text()))
            with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as resp:
                return resp.status == 200
        wait_until(ready, timeout, "prometheus ready at %s" % self.url)

    def query(self, expr: str) -> List[Dict[str, Any]]:
        """An instant vector: [{metric: labels, value: [time, "v"]}]."""
        return self.get("/api/v1/query", query=expr)["result"]

    def alerts(self, name: str) -> List[Dict[str, Any]]:
        """The active (pending or firing) alerts of one rule on the scraped host."""
        return [a for a in self.get("/api/v1/alerts")["alerts"]
                if a["labels"].get("alertname") == name and a["labels"].get("instance") == self.target]

    def stop(self) -> None:
        """Ends the server and removes its data; idempotent."""
        stop_process(self.proc, grace=20)
        self._log.close()
        self.tmp.cleanup()


def stop_process(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM, and SIGKILL if ``proc`` is still there ``grace`` seconds later; idempotent.
    Nothing the test started outlives it, even what hangs on its way out."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class _DevTools:
    """Chromium's DevTools protocol over the pipe of --remote-debugging-pipe (JSON messages,
    each ended by a NUL byte): no port, no websocket, nothing another process can reach."""

    def __init__(self, to_browser: int, from_browser: int, deadline: float) -> None:
        self.to_browser, self.from_browser, self.deadline = to_browser, from_browser, deadline
        self.buffer = b""
        self.last_id = 0

    def _message(self) -> Dict[str, Any]:
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_browser], [], [], left)[0]:
                raise AssertionError("chromium did not answer over its DevTools pipe in time")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise AssertionError("chromium closed its DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: Optional[str] = None, **params: Any) -> Dict[str, Any]:
        """The result of one command (events in between are dropped)."""
        self.last_id += 1
        request: Dict[str, Any] = {"id": self.last_id, "method": method, "params": params}
        if session:
            request["sessionId"] = session
        os.write(self.to_browser, json.dumps(request).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self.last_id:
                if "error" in answer:
                    raise AssertionError("chromium: %s: %s" % (method, answer["error"]))
                return answer["result"]


def _above_9(fd: int) -> int:
    """``fd`` moved to a descriptor above 9 (the original closed)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def screenshot_after_click(url: str, path: Path, ready: str, click: str, width: int = 1280,
                           timeout: float = 60) -> Path:
    """A PNG of the whole page at ``url`` once the JavaScript expression ``ready`` is true and
    ``click`` (an expression that clicks what the picture should show opened and returns how
    many it clicked; at least one) has run. Prometheus's classic alerts page shows an alert's
    labels, state and value only after its row is clicked, which testbed/browser.py's one-shot
    --screenshot cannot do; this drives the same headless Chromium, with the same flags, over
    its DevTools pipe."""
    deadline = time.monotonic() + timeout
    with browser.profile() as profile:
        argv = [arg for arg in browser.chromium_argv(browser.ensure_chromium(), profile, width, 900, 0)
                if not arg.startswith("--virtual-time-budget")]
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # The protocol's pipe is fd 3 (commands in) and fd 4 (answers out) of the browser. bash
        # moves them there; from fds above 9, which none of 3 and 4 can be, whatever the test
        # runner holds open.
        to_r, from_w = _above_9(to_r), _above_9(from_w)
        proc = subprocess.Popen(["bash", "-c", 'exec "$@" 3<&%d 4>&%d %d<&- %d>&-' % (to_r, from_w, to_r, from_w),
                                 "bash", *argv, "--remote-debugging-pipe", "about:blank"],
                                pass_fds=(to_r, from_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=dict(os.environ, HOME=profile))
        os.close(to_r)
        os.close(from_w)
        try:
            tools = _DevTools(to_w, from_r, deadline)
            target = tools.call("Target.createTarget", url="about:blank")["targetId"]
            session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

            def evaluate(expression: str) -> Any:
                result = tools.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
                assert "exceptionDetails" not in result, result
                return result["result"].get("value")
            tools.call("Page.navigate", session, url=url)
            wait_until(lambda: evaluate("document.readyState === 'complete' && (%s)" % ready),
                       max(1.0, deadline - time.monotonic()), "%s ready in chromium" % url)
            clicked = evaluate(click)
            assert clicked, "nothing to click on %s: %r" % (url, clicked)
            height = evaluate("document.documentElement.scrollHeight")
            shot = tools.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True,
                              clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(shot["data"]))
            tools.call("Browser.close")
        finally:
            stop_process(proc, grace=10)
            os.close(to_w)
            os.close(from_r)
    return path
