# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a running SGLang server says about its speculative decoding, read without disturbing it.

Shared by ``sglang_probe`` (audits and reruns read the live state of an active
server) and ``sglang_gate`` (the reading after a restart), so both judge a server
the same way. Standard library only; must run
under any host ``python3`` from 3.9.

Field names, read from the released wheels 0.5.4.post2 ... 0.5.23:

- ``/server_info`` from 0.5.6; ``/get_server_info`` in every release (a deprecated alias
  that logs a warning from 0.5.6 on), so the newer name is tried first.
- The resolved server args at the top level of that answer (``speculative_num_steps`` ...),
  ``version``, and ``internal_states``: one dict per data-parallel rank from the
  scheduler's ``get_internal_state``, where ``avg_spec_accept_length`` (accepted tokens per
  verify step, cumulative since the start) appears once a speculative step has run.
- Per request, ``meta_info.completion_tokens`` and ``meta_info.spec_verify_ct``; the
  tokenizer manager computes ``spec_accept_length`` from exactly these two.

A release that lacks a field is said so ("not reported by this release"), never an error.

API keys (``sglang_api_key``): every release from 0.5.4.post2 answers 401 without
``Authorization: Bearer <key>`` on every route but ``/health*`` and ``/metrics`` (``/ready``
too on 0.5.23) once the server has a key (``srt/utils/common.py`` up to 0.5.7,
``decide_request_auth`` in ``srt/utils/auth.py`` from 0.5.8; the routes read here are
its NORMAL level, which the admin key does not open). ``authorized`` adds the header where
a route needs it; a 401 is its own finding (``live.auth_refused``, ``live.auth_missing``), not
a server that is down.
The server info holds the server's arguments, the keys among them: ``redacted`` takes them
out of anything a module returns.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from ansible_collections.fleetops.sglang.plugins.module_utils import _testbed
from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import codes, failure_class, finding

# The speculative settings a server reports, compared with the rendered flags.
SETTINGS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
            "speculative_num_draft_tokens")
INFO_ENDPOINTS = ("/server_info", "/get_server_info")
NOT_REPORTED = "not reported by this release"

# The routes SGLang leaves open when the server has a key (path prefixes, every release).
OPEN_ROUTES = ("/health", "/metrics", "/ready")
# What a 401 means here: the server holds a key, and not the one sent (or none was).
AUTH_REFUSED = "the server refused the key (401)"
AUTH_MISSING = "the server asks for an API key (401) and sglang_api_key is empty"
# Fields of the server info that hold secrets (the server's own arguments are in it).
_SECRET_FIELD = re.compile(r"(^|_)(api_key|password|secret)$")

# request(url, timeout, body=None) -> (status or None, parsed JSON or None, error text)
Requester = Callable[..., Tuple[Optional[int], Any, str]]


def http_request(url: str, timeout: float, body: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, str]] = None) -> Tuple[Optional[int], Any, str]:
    """(status, parsed JSON or None, error text) for one GET or JSON POST; never raises."""
    from urllib.error import HTTPError
    from urllib.request import ProxyHandler, Request, build_opener

    data = None if body is None else json.dumps(body).encode("utf-8")
    headers = dict(headers or {})
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        # Never through a proxy: the server is on this host, and a configured HTTP(S)_PROXY
        # (urllib honours it even for 127.0.0.1 unless no_proxy names it) would otherwise be
        # handed every request, the Authorization header with the API key included.
        # The standard library's (certificates verified), so the host's own audit timer, which runs without
        # Ansible, reads the server exactly as the modules do.
        opener = build_opener(ProxyHandler({}))
        resp = opener.open(Request(url, data=data, headers=headers, method="POST" if body is not None else "GET"),
                           timeout=timeout)
        raw = resp.read()
        status = resp.getcode()
    except HTTPError as exc:
        if exc.code == 401:
            return 401, None, AUTH_REFUSED if "Authorization" in headers else AUTH_MISSING
        return exc.code, None, "HTTP %s from %s" % (exc.code, url)
    except Exception as exc:  # noqa: BLE001 - connection refused, timeout, reset: reported, not raised
        return None, None, "%s: %s" % (type(exc).__name__, exc)
    try:
        return status, json.loads(raw.decode("utf-8")) if raw.strip() else None, ""
    except ValueError:
        return status, None, "%s did not return JSON" % url


def authorized(request: Requester, key: str) -> Requester:
    """``request`` that sends ``Authorization: Bearer <key>`` to the routes SGLang protects."""
    if not key:
        return request

    def send(url: str, timeout: float, body: Optional[Dict[str, Any]] = None) -> Tuple[Optional[int], Any, str]:
        if urlsplit(url).path.startswith(OPEN_ROUTES):
            return request(url, timeout, body)
        return request(url, timeout, body, headers={"Authorization": "Bearer " + key})

    return send


def read_key_file(path: str) -> str:
    """The ``api-key`` of the role's --config file (``api-key: "<JSON string>"``), "" when absent.

    The role writes that file (templates/sglang.keys.yaml.j2) in this one form, so the host
    needs no YAML parser; a file it cannot read that way raises ValueError.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return ""
    for line in lines:
        if line.startswith("api-key:"):
            value = json.loads(line.split(":", 1)[1].strip())
            if not isinstance(value, str):
                raise ValueError("%s: api-key is not a string" % path)
            return value
    return ""


def redacted(value: Any) -> Any:
    """``value`` with every secret field of a server info (api_key, admin_api_key, ...) replaced."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if isinstance(k, str) and _SECRET_FIELD.search(k) and v else redacted(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


# What the gate reads of the server's systemd unit between health polls, to tell a server that
# exited (a crash at start, restarted by systemd again and again) from one still loading its model.
UNIT_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "MainPID", "ExecMainCode", "ExecMainStatus", "Result",
                   "ExecMainStartTimestampMonotonic", "InvocationID")
# A name that holds a secret (an environment variable, a flag, a field a server logs).
SECRET_NAME = re.compile(r"(?i)(api[_-]?key|token|secret|passw(or)?d|credential)")
# A value assigned to such a name (the name ends with the secret's word: hf_token, api_key, not
# max_new_tokens): name=value, name: value, name='value', or a flag and its value (--api-key value).
_SECRET_ASSIGNED = re.compile(r"(?i)(\b[\w.-]*?(?:api[_-]?key|token|secret|passw(?:or)?d|credentials?)['\"]?"
                              r"(?:\s*[=:]\s*|\s+(?=['\"]?[\w./+-]{8,})))(['\"]?)[^\s'\",)}\]]+")
_BEARER = re.compile(r"(?i)(\bbearer\s+)[^\s'\",]+")


def unit_properties(text: str) -> Dict[str, str]:
    """``systemctl show -p ...`` output (KEY=VALUE lines) as a dict."""
    return dict(line.split("=", 1) for line in (text or "").splitlines() if "=" in line)


def _count(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def started_ago(props: Dict[str, str], monotonic_now: float) -> Optional[float]:
    """Seconds since the unit's main process started (systemd's and Python's monotonic clocks are the
    same, CLOCK_MONOTONIC); None when systemd has no start recorded."""
    started = _count(props.get("ExecMainStartTimestampMonotonic"))
    return round(monotonic_now - started / 1e6, 1) if started > 0 else None


def exit_text(props: Dict[str, str]) -> str:
    """How the unit's main process ended, in words (ExecMainCode: 1 exited, 2 killed, 3 dumped core)."""
    code, status = props.get("ExecMainCode"), props.get("ExecMainStatus", "?")
    if code == "1":
        return "exited with status %s" % status
    if code in ("2", "3"):
        try:
            import signal
            name = " (%s)" % signal.Signals(int(status)).name
        except (ValueError, TypeError):
            name = ""
        return "%s signal %s%s" % ("killed by" if code == "2" else "dumped core on", status, name)
    return "its exit status not recorded"


def unit_exit(first: Dict[str, str], now: Dict[str, str]) -> Optional[Dict[str, Any]]:
    """Why the unit no longer runs the server the gate started waiting on, or None while it does
    (or is still starting it). The server left its running state when systemd waits to restart it
    (SubState auto-restart), gave up (failed) or holds nothing (inactive), or when, since ``first``,
    systemd restarted it (NRestarts grew) or its main process changed."""
    restarts = _count(now.get("NRestarts"))
    pid_before = first.get("MainPID") or "0"
    exited = (now.get("SubState") == "auto-restart" or now.get("ActiveState") in ("failed", "inactive")
              or restarts > _count(first.get("NRestarts"))
              or (pid_before != "0" and now.get("MainPID") != pid_before))
    if not exited:
        return None
    return {"state": "%s (%s)" % (now.get("ActiveState", "?"), now.get("SubState", "?")), "restarts": restarts,
            "exit": exit_text(now), "result": now.get("Result", ""), "invocation": now.get("InvocationID", "")}


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` (log lines) with every value in ``secrets``, every value assigned to a secret's name
    (``api_key='...'``, ``HF_TOKEN=...``, ``--api-key ...``) and every bearer token replaced."""
    for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    text = _SECRET_ASSIGNED.sub(lambda m: m.group(1) + m.group(2) + "<redacted>", text)
    return _BEARER.sub(lambda m: m.group(1) + "<redacted>", text)


def is_auth_error(error: str) -> bool:
    return error in (AUTH_REFUSED, AUTH_MISSING)


def auth_finding(error: str) -> Dict[str, str]:
    """The live finding of a 401 (``error`` is AUTH_REFUSED or AUTH_MISSING)."""
    return finding("live.auth_refused" if error == AUTH_REFUSED else "live.auth_missing", "live: " + error)


def fetch_server_info(request: Requester, base: str, timeout: float) -> Tuple[Optional[Dict[str, Any]], str, str]:
    """(info, endpoint, error): /server_info, or /get_server_info where a release has only that."""
    error = ""
    for endpoint in INFO_ENDPOINTS:
        status, info, error = request(base + endpoint, timeout)
        if status == 200 and isinstance(info, dict):
            return info, endpoint, ""
        if status != 404:
            break  # down, starting or failing: the alias would say the same
    return None, "", error or "no server info"


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def server_accept_length(info: Dict[str, Any]) -> Tuple[Optional[float], str]:
    """Mean ``avg_spec_accept_length`` over the data-parallel ranks that report it, and a note."""
    states = info.get("internal_states")
    if not isinstance(states, list):
        return None, "internal_states " + NOT_REPORTED
    values = [v for v in (_number(s.get("avg_spec_accept_length")) for s in states if isinstance(s, dict))
              if v is not None]
    if not values:
        return None, ("avg_spec_accept_length not reported: SGLang adds it once a speculative step has run"
                      " since the start")
    return sum(values) / len(values), ""


def _meta_sums(answers: Sequence[Any], num_key: str, den_key: str, positive: bool) -> Tuple[float, float]:
    """Sums of two meta_info numbers over the answers holding both (a denominator above 0 when ``positive``)."""
    num = den = 0.0
    for answer in answers:
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        if not isinstance(meta, dict):
            continue
        a, b = _number(meta.get(num_key)), _number(meta.get(den_key))
        if a is None or b is None or (positive and b <= 0):
            continue
        num += a
        den += b
    return num, den


def probe_accept_length(answers: Sequence[Any]) -> Tuple[Optional[float], str]:
    """Accepted tokens per verify step over probe generations: sum(completion_tokens) / sum(spec_verify_ct)."""
    tokens, verify = _meta_sums(answers, "completion_tokens", "spec_verify_ct", positive=True)
    if not answers:
        return None, ""
    if verify == 0:
        return None, "meta_info.spec_verify_ct " + NOT_REPORTED
    return tokens / verify, ""


def tokens_per_s(answers: Sequence[Any]) -> Optional[float]:
    """Generation throughput of the live requests: sum(completion_tokens) / sum(e2e_latency), to 0.1.

    None without timings (an older server, no requests): a missing number is not a zero.
    """
    tokens, seconds = _meta_sums(answers, "completion_tokens", "e2e_latency", positive=False)
    return round(tokens / seconds, 1) if seconds > 0 else None


def running_settings(info: Dict[str, Any]) -> Dict[str, Any]:
    """The speculative settings and version the server reports; None where a release lacks one."""
    out: Dict[str, Any] = {name: info.get(name) for name in SETTINGS}
    out["version"] = info.get("version")
    return out


def settings_differences(running: Dict[str, Any], expected: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    """(differences, notes): one "name running (rendered X)" per setting that differs."""
    diffs: List[str] = []
    notes: List[str] = []
    for name in list(SETTINGS) + ["version"]:
        if name not in expected or expected[name] in (None, ""):
            continue
        have, want = running.get(name), expected[name]
        if have is None:
            notes.append("%s %s" % (name, NOT_REPORTED))
            continue
        if name in ("speculative_algorithm", "version"):
            same = str(have) == str(want)
        else:
            try:
                same = int(have) == int(want)
            except (TypeError, ValueError):
                same = False
        if not same:
            diffs.append("%s %s (%s %s)" % (name, have, "installed" if name == "version" else "rendered", want))
    return diffs, notes


# What the gate holds a restarted server to (sglang_gate's ``expected``), in this order.
GATE_SETTINGS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens")


def test_double_finding(info: Any) -> Optional[Dict[str, str]]:
    """A server that identifies as the test double (its server info's ``test_double``, which no
    SGLang release has) on a host that is not a marked test-bed container (_testbed): it must never
    pass a gate or an audit there. None otherwise."""
    if not isinstance(info, dict) or "test_double" not in info:
        return None
    why = _testbed.mark_problem()
    if not why:
        return None
    return finding("live.test_double", "live: the server is the SGLang test double, not SGLang, and this host is "
                   "not a test-bed container (%s): the test bed reached a real host; remove the double and "
                   "check sglang_server_command" % why)


def gate_failures(info: Dict[str, Any], expected: Dict[str, Any], accept_length: Optional[float],
                  accept_length_min: float) -> List[Dict[str, str]]:
    """Why a restarted server fails its gate, as findings; empty when it passes (then its fingerprint
    is recorded). Their codes are the live reading's for the same facts.

    ``info``: its server info before the live requests. ``expected``: the release
    (``version``) and, unless a rollback, the rendered speculative settings; a setting
    the server does not report fails (it cannot be shown to run what was rendered).
    ``accept_length_min`` > 0 also holds the measured accept length to it.
    """
    failures: List[Dict[str, str]] = []
    double = test_double_finding(info)
    if double:
        failures.append(double)
    have = {name: info.get(name) for name in ("version",) + GATE_SETTINGS}
    held = [name for name in GATE_SETTINGS if name in expected]

    def differs(name: str) -> bool:
        if name in ("version", "speculative_algorithm"):
            return str(have[name]) != str(expected[name])
        try:
            return int(have[name]) != int(expected[name])
        except (TypeError, ValueError):
            return True

    def text(value: Any) -> str:
        return "?" if value is None else str(value)

    if "version" in expected and (differs("version") or any(differs(n) for n in held)):
        if held:
            why = "serves version %s with steps/topk/draft tokens %s; expected %s with %s." % (
                text(have["version"]), "/".join(text(have[n]) for n in GATE_SETTINGS[1:]), expected["version"],
                "/".join(text(expected.get(n)) for n in GATE_SETTINGS[1:]))
        else:
            why = "serves version %s, expected %s." % (text(have["version"]), expected["version"])
        failures.append(finding("live.settings_differ", why))
    if accept_length_min > 0 and (accept_length is None or accept_length < accept_length_min):
        failures.append(finding("live.accept_length_low", "speculative decoding accepts %s tokens per step, below "
                                "sglang_accept_length_min=%s; the draft is probably fed other hidden states than it "
                                "was trained on." % (text(accept_length), accept_length_min)))
    return failures


def judge(info: Optional[Dict[str, Any]], endpoint: str, error: str, answers: Sequence[Any],
          expected: Dict[str, Any], accept_length_min: float, probe_error: str = "") -> Dict[str, Any]:
    """The live reading and its verdict, from what was fetched; pure, so it is tested without a server.

    The probe generations' measurement is preferred: it is what the server accepts now,
    while ``avg_spec_accept_length`` is an average since the start that a drop after
    weeks of good service barely moves. Both are returned.

    ``reasons``: the findings (_reasons), each text starting ``live:``; ``classes``: their
    failure classes, from their codes.
    """
    reading: Dict[str, Any] = dict(read=False, endpoint=endpoint, settings={}, accept_length=None,
                                   accept_length_source="", accept_length_server_info=None,
                                   accept_length_probe=None, probe_requests=len(answers),
                                   notes=[], reasons=[], classes=[])
    if info is None and is_auth_error(error):
        # The server serves (its health routes are open); it holds another key. Not a health failure.
        reading["reasons"].append(auth_finding(error))
        return _classified(reading)
    if info is None:
        reading["reasons"].append(finding("live.unavailable", "live: server info unavailable (%s)" % error))
        return _classified(reading)
    reading["read"] = True
    double = test_double_finding(info)
    if double:
        reading["reasons"].append(double)
    reading["settings"] = running_settings(info)
    diffs, notes = settings_differences(reading["settings"], expected)
    reading["notes"] += notes
    if diffs:
        reading["reasons"].append(finding("live.settings_differ", "live: the server runs " + ", ".join(diffs)))
    server, note = server_accept_length(info)
    reading["accept_length_server_info"] = None if server is None else round(server, 3)
    if note:
        reading["notes"].append(note)
    probe, note = probe_accept_length(answers)
    reading["accept_length_probe"] = None if probe is None else round(probe, 3)
    if note:
        reading["notes"].append(note)
    if probe_error and is_auth_error(probe_error):
        reading["reasons"].append(auth_finding(probe_error))
    elif probe_error:
        reading["reasons"].append(finding("live.probe_failed", "live: probe generation failed (%s)" % probe_error))
    if probe is not None:
        reading["accept_length"], reading["accept_length_source"] = round(probe, 3), "probe"
    elif server is not None:
        reading["accept_length"], reading["accept_length_source"] = round(server, 3), "server info"
    value = reading["accept_length"]
    if value is not None and accept_length_min > 0 and value < accept_length_min:
        why = "live: accept length %s (%s%s) below sglang_accept_length_min %s" % (
            value, reading["accept_length_source"],
            ", %d requests" % len(answers) if reading["accept_length_source"] == "probe" else ", since the start",
            accept_length_min)
        reading["reasons"].append(finding("live.accept_length_low", why))
    return _classified(reading)


def _classified(reading: Dict[str, Any]) -> Dict[str, Any]:
    """The reading with ``classes``, the failure classes of its reasons' codes (each once, in order)."""
    classes: List[str] = []
    for code in codes(reading["reasons"]):
        if failure_class(code) not in classes:
            classes.append(failure_class(code))
    reading["classes"] = classes
    return reading


def read_live(request: Requester, base: str, expected: Dict[str, Any], accept_length_min: float,
              prompts: Sequence[str], max_new_tokens: int, request_timeout: float,
              generate_timeout: float) -> Dict[str, Any]:
    """Fetch server info and send the probe generations, then judge them (see judge)."""
    base = base.rstrip("/")
    info, endpoint, error = fetch_server_info(request, base, request_timeout)
    answers: List[Any] = []
    probe_error = ""
    if info is not None:
        for text in prompts:
            status, answer, err = request(base + "/generate", generate_timeout, body={
                "text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})
            if status != 200 or not isinstance(answer, dict):
                probe_error = err or "HTTP %s" % status
                break
            answers.append(answer)
    return judge(info, endpoint, error, answers, expected, accept_length_min, probe_error)
