"""The live reading of a running server and the node_exporter textfile.

The field names the live reading relies on are checked in the real SGLang release
files; the reading itself runs against the GPU-less test double (degraded at run
time, and started with other flags than the rendered ones); the textfile is checked
by Debian's promtool (``testbed/testbed.py promtool`` extracts it when missing).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import sglang_wheels
from conftest import MODULE_UTILS_DIR, MODULES, USER_IDS, Host, run_module
from double_harness import http, remediated_double

METRICS_MODULE = MODULES / "sglang_metrics.py"
PROBE = MODULES / "sglang_probe.py"
GATE = MODULES / "sglang_gate.py"
EXPECTED = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 15, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 16}
PROMPTS = ["Write a haiku about speculative decoding.", "List three prime numbers."]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, MODULE_UTILS_DIR / (name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


LIVE = _load("_live")
METRICS = _load("_metrics")


# ----------------------------------------------------------- the releases' own field names


def _release_text(version: str, suffixes: Tuple[str, ...]) -> str:
    """The concatenated text of the release's files whose path ends with one of ``suffixes``."""
    with zipfile.ZipFile(sglang_wheels.fetch_wheel(version)) as zf:
        return "\n".join(zf.read(n).decode("utf-8", "replace") for n in zf.namelist()
                         if n.endswith(suffixes))


@pytest.mark.parametrize("version", ["0.5.4.post2", "0.5.9", "0.5.14", "0.5.23"])
def test_the_fields_read_exist_in_the_release(version):
    http_server = _release_text(version, ("sglang/srt/entrypoints/http_server.py",))
    # Every release serves the old name; the new one exists from 0.5.6, hence the fallback order.
    assert '@app.get("/get_server_info")' in http_server
    assert ('@app.get("/server_info")' in http_server) == (version != "0.5.4.post2")
    assert '"internal_states": internal_states' in http_server and '"version": __version__' in http_server
    scheduler = _release_text(version, ("managers/scheduler.py", "scheduler_components/internal_state.py"))
    assert re.search(r'(ret|state)\["avg_spec_accept_length"\]', scheduler), version
    tokenizer = _release_text(version, ("managers/tokenizer_manager.py",))
    assert 'meta_info["spec_verify_ct"] = recv_obj.spec_verify_ct[i]' in tokenizer
    assert 'meta_info["completion_tokens"]' in tokenizer
    # The accept length SGLang reports per request is exactly the probe's quotient.
    assert "recv_obj.completion_tokens[i] / recv_obj.spec_verify_ct[i]" in tokenizer
    collector = _release_text(version, ("metrics/collector.py", "observability/metrics_collector.py"))
    assert 'name="sglang:spec_accept_length"' in collector
    # The settings are ServerArgs fields, reported flat (0.5.23 declares them in arg_groups and
    # flattens them in resolved_dict).
    args = _release_text(version, ("srt/server_args.py", "srt/arg_groups/fields/spec.py"))
    for setting in LIVE.SETTINGS:
        assert re.search(r"^\s+%s: " % setting, args, re.M), setting


# ----------------------------------------------------------------------- judging a reading


def _info(**over: Any) -> Dict[str, Any]:
    info = dict(EXPECTED, version="0.5.9", internal_states=[{"avg_spec_accept_length": 3.5}])
    info.update(over)
    return info


def test_a_server_as_rendered_is_fine_and_the_probe_measurement_is_preferred():
    answers = [{"meta_info": {"completion_tokens": 32, "spec_verify_ct": 10}}] * 2
    r = LIVE.judge(_info(), "/server_info", "", answers, dict(EXPECTED, version="0.5.9"), 2.5)
    assert r["reasons"] == [] and r["read"] is True
    assert (r["accept_length"], r["accept_length_source"]) == (3.2, "probe")
    assert r["accept_length_server_info"] == 3.5 and r["settings"]["speculative_num_steps"] == 15


def test_other_running_settings_are_a_live_finding():
    info = _info(speculative_num_steps=3, speculative_num_draft_tokens=4)
    r = LIVE.judge(info, "/server_info", "", [], EXPECTED, 0)
    assert r["reasons"] == [{"code": "live.settings_differ",
                             "text": "live: the server runs speculative_num_steps 3 (rendered 15), "
                                     "speculative_num_draft_tokens 4 (rendered 16)"}]
    assert r["classes"] == ["live_settings"]
    assert (r["accept_length"], r["accept_length_source"]) == (3.5, "server info")


def test_low_accept_length_is_a_finding_only_with_a_minimum():
    info = _info(internal_states=[{"avg_spec_accept_length": 1.6}, {"avg_spec_accept_length": 1.7}])
    assert LIVE.judge(info, "/server_info", "", [], EXPECTED, 0)["reasons"] == []
    r = LIVE.judge(info, "/server_info", "", [], EXPECTED, 2.5)
    assert r["reasons"] == [{"code": "live.accept_length_low",
                             "text": "live: accept length 1.65 (server info, since the start) below "
                                     "sglang_accept_length_min 2.5"}]
    assert r["classes"] == ["live_accept_length"]


def test_fields_a_release_lacks_are_said_not_failed():
    info = {"version": "0.5.9"}  # no settings, no internal_states
    answers = [{"meta_info": {"completion_tokens": 32}}]
    r = LIVE.judge(info, "/get_server_info", "", answers, EXPECTED, 2.5)
    assert r["reasons"] == [] and r["accept_length"] is None and r["accept_length_source"] == ""
    assert "internal_states not reported by this release" in r["notes"]
    assert "meta_info.spec_verify_ct not reported by this release" in r["notes"]
    assert "speculative_num_steps not reported by this release" in r["notes"]
    # Before the first speculative step SGLang leaves the field out.
    r = LIVE.judge({"internal_states": [{}]}, "/server_info", "", [], {}, 2.5)
    assert r["notes"] == ["avg_spec_accept_length not reported: SGLang adds it once a speculative step has run"
                          " since the start"]


def test_server_info_falls_back_to_the_old_endpoint_only_on_404():
    calls: List[str] = []

    def old_release(url, timeout, body=None):
        calls.append(url)
        return (404, None, "HTTP 404") if url.endswith("/server_info") else (200, {"version": "0.5.4.post2"}, "")

    assert LIVE.fetch_server_info(old_release, "http://h:1", 5) == ({"version": "0.5.4.post2"}, "/get_server_info", "")
    assert calls == ["http://h:1/server_info", "http://h:1/get_server_info"]
    calls.clear()

    def down(url, timeout, body=None):
        calls.append(url)
        return None, None, "ConnectionRefusedError"

    assert LIVE.fetch_server_info(down, "http://h:1", 5) == (None, "", "ConnectionRefusedError")
    assert calls == ["http://h:1/server_info"]
    r = LIVE.judge(None, "", "ConnectionRefusedError", [], EXPECTED, 2.5)
    assert r["reasons"] == [{"code": "live.unavailable",
                             "text": "live: server info unavailable (ConnectionRefusedError)"}]
    assert r["classes"] == ["live_unavailable"]


# ------------------------------------------------------------------------------ textfile


def _values(**over: Any) -> Dict[str, Any]:
    live = LIVE.judge(_info(), "/server_info", "", [{"meta_info": {"completion_tokens": 32, "spec_verify_ct": 9}}],
                      EXPECTED, 2.5)
    values = dict(compliant=True, release="0.5.9", decision="patch", family="body_a_loop", draft_ids=[-1, 2, 30],
                  mode="audit", live=live, classes=[], accept_length_min=2.5)
    values.update(over)
    return values


def _samples(text: str) -> Dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_textfile_passes_promtool_check_metrics(promtool, tmp_path):
    text = METRICS.render(dict(_values(), restarts_total=2, last_run=1764583200.25, last_success=1764583200.25))
    s = _samples(text)
    assert s["sglang_remediation_compliant"] == 1
    assert s['sglang_remediation_info{release="0.5.9",decision="patch",family="body_a_loop",'
             'draft_ids="-1,2,30",mode="audit"}'] == 1
    assert s['sglang_remediation_live_accept_length{source="probe"}'] == pytest.approx(3.556)
    assert s['sglang_remediation_live_accept_length{source="server_info"}'] == 3.5
    assert s["sglang_remediation_restarts_total"] == 2
    assert s['sglang_remediation_failure{class="live_accept_length"}'] == 0
    assert "# TYPE sglang_remediation_restarts_total counter" in text
    proc = promtool("check", "metrics", stdin=text)
    assert proc.returncode == 0 and proc.stdout.strip() == "" and proc.stderr.strip() == "", proc


def test_a_node_of_a_replica_names_it_and_a_host_of_one_node_keeps_its_series(promtool):
    info = ('sglang_remediation_info{release="0.5.9",decision="patch",family="body_a_loop",draft_ids="-1,2,30",'
            'mode="audit"')
    for replica, series in (("dsv3-r01", info + ',replica="dsv3-r01"}'), ("", info + "}")):
        text = METRICS.render(dict(_values(replica=replica), restarts_total=0, last_run=1.0, last_success=1.0))
        assert _samples(text)[series] == 1, text
        assert promtool("check", "metrics", stdin=text).returncode == 0


def test_restarts_persist_and_last_success_survives_a_failed_run(tmp_path):
    prom, state = tmp_path / "tf" / "sglang_remediation.prom", tmp_path / "state" / "metrics-state.json"
    METRICS.update(str(prom), str(state), _values(), restarts=1, now=1000.0, success=True)
    assert json.loads(state.read_text()) == {"restarts_total": 1}
    # An audit: no restart, so the state file is not even rewritten.
    mtime = state.stat().st_mtime_ns
    METRICS.update(str(prom), str(state), _values(), restarts=0, now=2000.0, success=True)
    assert state.stat().st_mtime_ns == mtime
    bad = _values(compliant=False, classes=["live_accept_length"])
    out = METRICS.update(str(prom), str(state), bad, restarts=2, now=3000.0, success=False)
    s = _samples(prom.read_text())
    assert s["sglang_remediation_restarts_total"] == 3 == out["restarts_total"]
    assert s["sglang_remediation_last_run_timestamp_seconds"] == 3000
    assert s["sglang_remediation_last_success_timestamp_seconds"] == 2000  # kept from the run before
    assert s["sglang_remediation_compliant"] == 0
    assert s['sglang_remediation_failure{class="live_accept_length"}'] == 1
    assert oct(prom.stat().st_mode & 0o777) == "0o644" and oct(state.stat().st_mode & 0o777) == "0o600"
    # Written by rename: nothing but the file itself in node_exporter's directory.
    assert [p.name for p in prom.parent.iterdir()] == ["sglang_remediation.prom"]


def test_drift_codes_map_to_failure_classes():
    drift = ["release.not_pinned", "source.unpatched", "draft.ids_differ", "unit.differs", "server.differs",
             "live.accept_length_low", "live.settings_differ", "live.auth_refused"]
    assert METRICS.classify(drift, "gate failed") == [
        "release", "source", "draft_config", "service_files", "running_server", "live_settings",
        "live_accept_length", "live_auth", "error"]
    assert METRICS.classify(["api_keys.differs"]) == ["service_files"]
    # A text, or a code the table does not know, is an error, not some class.
    for unknown in ("unit file", "live.something_new", None):
        with pytest.raises(ValueError, match="unknown reason code"):
            METRICS.classify([unknown])


def test_metrics_module_writes_nothing_in_check_mode_and_writes_otherwise(tmp_path):
    prom, state = tmp_path / "tf" / "sglang_remediation.prom", tmp_path / "state.json"
    args = dict(path=str(prom), state_file=str(state), compliant=False, release="0.5.9", decision="patch",
                family="body_a_loop", draft_ids=[-1, 2, 30], drift=[{"code": "unit.differs", "text": "unit file"}],
                restarts=1, mode="remediate")
    rc, res = run_module(METRICS_MODULE, tmp_path, args, check_mode=True)
    assert rc == 0 and res["written"] is False and res["changed"] is False, res
    assert not prom.parent.exists() and not state.exists()
    assert "sglang_remediation_restarts_total 1" in res["text"]
    rc, res = run_module(METRICS_MODULE, tmp_path, args)
    assert rc == 0 and res["written"] is True and res["classes"] == ["service_files"], res
    assert prom.read_text() == res["text"] and res["last_success"] is None
    rc, res = run_module(METRICS_MODULE, tmp_path, dict(args, path=str(tmp_path / "x.txt")))
    assert rc == 1 and "only *.prom" in res["msg"]
    # A finding whose code the table does not know fails the module, so the textfile never says "no class".
    rc, res = run_module(METRICS_MODULE, tmp_path, dict(args, drift=[{"code": "unit.reworded", "text": "unit file"}]))
    assert rc == 1 and "unknown reason code 'unit.reworded'" in res["msg"], res


# ------------------------------------------------------- against the running test double


def _remediated_double(tmp_path: Path, run_double, real_059, steps=15, draft_tokens=16, **env):
    double = remediated_double(tmp_path, run_double, real_059, steps, draft_tokens, ["--enable-metrics"], **env)
    double.wait_healthy()
    return double


def test_double_degrades_at_run_time_and_serves_sglang_metrics(tmp_path, run_double, real_059, promtool):
    double = _remediated_double(tmp_path, run_double, real_059, SGLANG_TEST_DOUBLE_DEGRADE_AFTER="2")
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 64}}
    metas = [http(double.port, "/generate", body)[1]["meta_info"] for _ in range(4)]
    accepts = [m["completion_tokens"] / m["spec_verify_ct"] for m in metas]
    assert accepts[0] == accepts[1] > 3.2 and accepts[2] == accepts[3] < 1.8, accepts
    info = http(double.port, "/server_info")[1]
    assert info["test_double"]["degraded"] is True and info["test_double"]["requests"] == 4
    # Cumulative since the start: between the two.
    assert 1.8 < info["internal_states"][0]["avg_spec_accept_length"] < 3.2
    status, text = http(double.port, "/metrics")
    assert status == 200
    assert re.search(r'^sglang:spec_accept_length\{model_name="[^"]+"\} 1\.\d+$', text, re.M), text
    assert "# HELP sglang:spec_accept_length " in text and "# TYPE sglang:spec_accept_length gauge" in text
    proc = promtool("check", "metrics", stdin=text)
    # The format parses; the linter's only remark is SGLang's own colon names (a recording-rule
    # convention SGLang uses for its metrics), so the double serves what SGLang serves.
    assert proc.returncode == 3, proc
    remarks = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert remarks and all(line.endswith("metric names should not contain ':'") for line in remarks), proc


def test_gate_reading_matches_the_probe_shape(tmp_path, run_double, real_059):
    double = _remediated_double(tmp_path, run_double, real_059)
    rc, res = run_module(GATE, tmp_path, dict(url="http://127.0.0.1:%d" % double.port, wait=10, delay=0.2,
                                              prompts=PROMPTS, max_new_tokens=32,
                                              expected=dict(EXPECTED, version="0.5.9"), accept_length_min=2.5))
    assert rc == 0, res
    reading = res["reading"]
    assert reading["reasons"] == [] and reading["accept_length_source"] == "probe"
    assert 3.2 <= reading["accept_length"] <= 3.7 and reading["endpoint"] == "/server_info"


def _probe_args(h: Host, double, tmp_path: Path, **live: Any) -> Dict[str, Any]:
    return h.args(
        live=dict(dict(url="http://127.0.0.1:%d" % double.port, expected=EXPECTED, accept_length_min=2.5,
                       prompts=PROMPTS), **live),
        textfile=dict(path=str(tmp_path / "textfile" / "sglang_remediation.prom"),
                      state_file=str(tmp_path / "state" / "metrics-state.json"), mode="audit"))


def test_probe_finds_a_host_degraded_at_run_time_while_its_files_are_compliant(
        host, tmp_path, run_double, real_059, promtool):
    h = host("0.5.9")
    (tmp_path / "srv").mkdir()
    double = _remediated_double(tmp_path / "srv", run_double, real_059, SGLANG_TEST_DOUBLE_DEGRADE_AFTER="2")
    prom = tmp_path / "textfile" / "sglang_remediation.prom"
    res = h.probe(**_probe_args(h, double, tmp_path))
    assert res["compliant"] is True and res["reasons"] == [], res["reasons"]
    assert res["live"]["reasons"] == [] and res["live"]["accept_length_source"] == "probe"
    assert res["textfile"] == str(prom)
    first = _samples(prom.read_text())
    assert first["sglang_remediation_compliant"] == 1
    assert first["sglang_remediation_last_success_timestamp_seconds"] == first[
        "sglang_remediation_last_run_timestamp_seconds"]
    time.sleep(0.05)
    res = h.probe(**_probe_args(h, double, tmp_path))
    # The files are still right: the probe ends the run there; live says what is wrong.
    assert res["compliant"] is True and res["restart_needed"] is False
    assert res["live"]["classes"] == ["live_accept_length"], res["live"]
    assert res["live"]["reasons"][0]["code"] == "live.accept_length_low"
    assert res["live"]["reasons"][0]["text"].startswith("live: accept length 1.")
    second = _samples(prom.read_text())
    assert second["sglang_remediation_compliant"] == 0
    assert second['sglang_remediation_failure{class="live_accept_length"}'] == 1
    assert second['sglang_remediation_live_accept_length{source="probe"}'] < 2
    assert second["sglang_remediation_last_success_timestamp_seconds"] == first[
        "sglang_remediation_last_success_timestamp_seconds"]
    assert second["sglang_remediation_last_run_timestamp_seconds"] > first[
        "sglang_remediation_last_run_timestamp_seconds"]
    assert promtool("check", "metrics", stdin=prom.read_text()).returncode == 0
    # Check mode reads live but writes no textfile.
    prom.unlink()
    res = h.probe(check_mode=True, **_probe_args(h, double, tmp_path))
    assert res["textfile"] is None and not prom.exists() and res["live"]["read"] is True


def test_probe_finds_a_server_started_with_other_flags(host, tmp_path, run_double, real_059):
    h = host("0.5.9")
    (tmp_path / "srv").mkdir()
    double = _remediated_double(tmp_path / "srv", run_double, real_059, steps=3, draft_tokens=4)
    res = h.probe(**_probe_args(h, double, tmp_path, prompts=[]))
    assert res["compliant"] is True
    assert res["live"]["reasons"] == [{"code": "live.settings_differ",
                                       "text": "live: the server runs speculative_num_steps 3 (rendered 15), "
                                               "speculative_num_draft_tokens 4 (rendered 16)"}], res["live"]
    assert res["live"]["settings"]["version"] == "0.5.9"
    text = (tmp_path / "textfile" / "sglang_remediation.prom").read_text()
    assert 'sglang_remediation_failure{class="live_settings"} 1' in text
    assert 'speculative_num_steps="3"' in text


# ------------------------------------------------------------------------------ API keys

KEY = "the-role-key-0123456789"


def _keyed_double(tmp_path: Path, run_double, real_059, **env):
    """The remediated double with the role's key file on its command line (--config), as the unit runs it."""
    config = tmp_path / "sglang.keys.yaml"
    config.write_text("# managed\napi-key: %s\nadmin-api-key: %s\n" % (json.dumps(KEY), json.dumps(KEY + "-admin")))
    double = remediated_double(tmp_path, run_double, real_059, 15, 16, ["--enable-metrics", "--config", str(config)],
                               **env)
    double.wait_healthy()
    return double, config


def test_authorized_sends_the_key_only_where_sglang_asks_for_it():
    sent: List[Tuple[str, Any]] = []

    def record(url, timeout, body=None, headers=None):
        sent.append((url, headers))
        return 200, {}, ""

    request = LIVE.authorized(record, KEY)
    for path in ("/health_generate", "/metrics", "/ready", "/server_info", "/get_server_info", "/generate"):
        request("http://127.0.0.1:30000" + path, 5)
    assert [h for _u, h in sent] == [None] * 3 + [{"Authorization": "Bearer " + KEY}] * 3
    assert LIVE.authorized(record, "") is record


def test_the_key_file_is_read_as_the_role_writes_it(tmp_path):
    path = tmp_path / "k.yaml"
    assert LIVE.read_key_file(str(path)) == ""
    path.write_text('# #\n# Ansible managed\n#\napi-key: "a\\"b\\\\c"\nadmin-api-key: "x"\n')
    assert LIVE.read_key_file(str(path)) == 'a"b\\c'
    path.write_text('admin-api-key: "x"\n')
    assert LIVE.read_key_file(str(path)) == ""
    path.write_text("api-key: 12\n")
    with pytest.raises(ValueError):
        LIVE.read_key_file(str(path))


def test_secrets_are_redacted_from_server_info():
    info = {"api_key": KEY, "admin_api_key": None, "ssl_keyfile_password": "p", "port": 1,
            "internal_states": [{"api_key": KEY, "avg_spec_accept_length": 3.0}]}
    out = LIVE.redacted(info)
    assert KEY not in json.dumps(out) and '"p"' not in json.dumps(out)
    assert out["admin_api_key"] is None and out["port"] == 1 and out["internal_states"][0]["avg_spec_accept_length"] == 3.0


@pytest.mark.parametrize("key, reason", [
    ("wrong-key-0123456789", {"code": "live.auth_refused", "text": "live: the server refused the key (401)"}),
    ("", {"code": "live.auth_missing",
          "text": "live: the server asks for an API key (401) and sglang_api_key is empty"})])
def test_probe_of_a_keyed_server_reads_with_the_key_and_reports_a_refused_one(host, tmp_path, run_double, real_059,
                                                                             key, reason):
    h = host("0.5.9")
    (tmp_path / "srv").mkdir()
    double, _config = _keyed_double(tmp_path / "srv", run_double, real_059)
    res = h.probe(**_probe_args(h, double, tmp_path, api_key=KEY))
    assert res["live"]["reasons"] == [] and res["live"]["accept_length_source"] == "probe", res["live"]
    assert KEY not in json.dumps(res)
    res = h.probe(**_probe_args(h, double, tmp_path, api_key=key))
    # Not a health failure: the files decide the restart, the reading says why it cannot read.
    assert res["compliant"] is True and res["restart_needed"] is False
    assert res["live"]["reasons"] == [reason] and res["live"]["classes"] == ["live_auth"], res["live"]
    text = (tmp_path / "textfile" / "sglang_remediation.prom").read_text()
    assert 'sglang_remediation_failure{class="live_auth"} 1' in text
    assert 'sglang_remediation_failure{class="live_unavailable"} 0' in text


def test_gate_reads_the_key_of_the_file_the_server_was_started_on(tmp_path, run_double, real_059):
    double, config = _keyed_double(tmp_path, run_double, real_059)
    args = dict(url="http://127.0.0.1:%d" % double.port, wait=10, delay=0.2, prompts=PROMPTS, max_new_tokens=32,
                expected=dict(EXPECTED, version="0.5.9"), accept_length_min=2.5, api_key_file=str(config),
                record=dict(components={"api_keys": str(config)}, state_file=str(tmp_path / "running.json")))
    rc, res = run_module(GATE, tmp_path, args)
    assert rc == 0 and res["failures"] == [] and res["recorded"] is True, res
    assert res["info"]["api_key"] == res["info_after"]["admin_api_key"] == "<redacted>"
    assert KEY not in json.dumps(res) and KEY not in (tmp_path / "running.json").read_text()
    # Without the file, and with another key in it: healthy, refused, recorded (no restart loop follows).
    (tmp_path / "running.json").unlink()
    for content in (None, 'api-key: "another-key-0123456789"\n'):
        other = tmp_path / "other.yaml"
        if content:
            other.write_text(content)
        rc, res = run_module(GATE, tmp_path, dict(args, api_key_file=str(other)))
        assert rc != 0 and res["auth_refused"] is True and res["ready"] is True, res
        assert "live: the server " in res["msg"] and "(401)" in res["msg"], res["msg"]
        assert (tmp_path / "running.json").exists()


def test_probe_without_live_or_textfile_is_unchanged(host):
    res = host("0.5.9").probe()
    assert res["live"] is None and res["textfile"] is None and res["compliant"] is True
