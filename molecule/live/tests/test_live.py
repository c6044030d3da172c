"""Live speculative health: audits read the running server, the textfile tells Prometheus.

The tests run in file order and build on each other (converged and idempotent host,
healthy audit, degraded at run time, the alert chain, --check, runtime override). The
textfile is read out of the container with testinfra and checked by the controller's
promtool (Debian's, extracted by testbed/testbed.py).

The alert chain: node_exporter on the host (prepare.yml) serves the textfile on a port
docker publishes on 127.0.0.1; a Prometheus on the controller (alert_chain.py) scrapes it
with examples/prometheus/alerts.yml loaded, its durations and staleness threshold
shortened (and checked to be the only changes). From its HTTP API: the series with their
documented labels, the accept-length alert firing after the degraded audit and resolving
after the host is put right and remediated, the staleness alert firing on a textfile no
run rewrites. Seconds to each are kept in .cache/molecule-logs/live-artifacts/alert-chain.json,
a picture of the firing alert in Prometheus's own UI in .cache/prometheus/shots/.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import PROJECT, Run, run_playbook, server_info, sha256, starts, _quote  # noqa: E402

sys.path.insert(0, str(PROJECT / "testbed"))
import testbed  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import alert_chain  # noqa: E402
from alert_chain import wait_until  # noqa: E402

AUDIT = PROJECT / "playbooks" / "audit.yml"
REMEDIATE = PROJECT / "playbooks" / "remediate.yml"
VARS = ["-e", "@" + str(PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml"),
        "-e", "@" + str(PROJECT / "molecule" / "live" / "vars" / "live.yml")]
TEXTFILE = "/var/lib/prometheus/node-exporter/sglang_remediation.prom"
METRICS_STATE = "/var/lib/sglang-remediation/metrics-state.json"
ETC_FILES = ("/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env")
DROP_IN = "/run/systemd/system/sglang.service.d/override.conf"
# What this scenario leaves for a reader (the pasted textfile and audit row).
ARTIFACTS = PROJECT / ".cache" / "molecule-logs" / "live-artifacts"
STATE: Dict[str, Any] = {}
SHIPPED_RULES = PROJECT / "examples" / "prometheus" / "alerts.yml"
GUIDE = PROJECT / "docs" / "docsite" / "rst" / "guide_live_metrics.rst"
SHOT = PROJECT / ".cache" / "prometheus" / "shots" / "alert-firing.png"
ACCEPT_ALERT = "SGLangLiveAcceptLengthLow"
TIMER_STALE_EXPR = ("time() - sglang_audit_timer_last_run_timestamp_seconds\n  > 2 * (sglang_audit_timer_interval_seconds"
                    " + sglang_audit_timer_jitter_seconds) + 300")
# Each series of the textfile and the labels the guide documents for it (Prometheus adds job
# and instance).
DOCUMENTED_LABELS = {
    "sglang_remediation_accept_length_min": set(),
    "sglang_remediation_audit_timer": set(),
    "sglang_remediation_compliant": set(),
    "sglang_remediation_failure": {"class"},
    "sglang_remediation_info": {"release", "decision", "family", "draft_ids", "mode"},
    "sglang_remediation_last_run_timestamp_seconds": set(),
    "sglang_remediation_last_success_timestamp_seconds": set(),
    "sglang_remediation_live_accept_length": {"source"},
    "sglang_remediation_live_info": {"version", "speculative_algorithm", "speculative_num_steps",
                                     "speculative_eagle_topk", "speculative_num_draft_tokens"},
    "sglang_remediation_live_read": set(),
    "sglang_remediation_restarts_total": set(),
}


def run(playbook: Path, name: str, args=(), env=None) -> Tuple[Run, Dict[str, Any]]:
    """One run with the fleet report enabled; (run, this host's report row)."""
    report_dir = ARTIFACTS / ("reports-" + name)
    result = run_playbook(playbook, args=[*VARS, *args], env=dict({
        "ANSIBLE_CALLBACKS_ENABLED": "fleetops.sglang.sglang_report", "SGLANG_REPORT_DIR": str(report_dir)},
        **(env or {})))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / (name + ".log")).write_text(result.output)
    report = report_dir / "latest" / "fleet.json"
    rows = json.loads(report.read_text())["hosts"] if report.exists() else []
    return result, (rows[0] if rows else {})


def textfile(host, name: str) -> Dict[str, float]:
    """The host's textfile, checked by promtool and kept; sample name -> value."""
    text = host.file(TEXTFILE).content_string
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / (name + ".prom")).write_text(text)
    proc = subprocess.run([str(testbed.ensure_promtool()), "check", "metrics"], input=text,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not (proc.stdout + proc.stderr).strip(), proc
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def generate(host, count: int) -> None:
    script = ("import json,urllib.request\n"
              "for _ in range(%d):\n"
              " r=urllib.request.Request('http://127.0.0.1:30000/generate',data=json.dumps("
              "{'text':'x','sampling_params':{'max_new_tokens':32}}).encode(),"
              "headers={'Content-Type':'application/json'})\n"
              " urllib.request.urlopen(r,timeout=30).read()\n" % count)
    host.check_output("python3 -c %s" % _quote(script))


def double_state(host) -> Dict[str, Any]:
    out = host.check_output("python3 -c %s" % _quote(
        "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:30000/server_info',"
        "timeout=30).read().decode())"))
    return json.loads(out)["test_double"]


def wait_healthy(host) -> None:
    host.check_output("for i in $(seq 60); do python3 -c \"import urllib.request;urllib.request.urlopen("
                      "'http://127.0.0.1:30000/health_generate', timeout=5)\" 2>/dev/null && exit 0; sleep 0.5;"
                      " done; exit 1")


def samples(text: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """A textfile's samples: (name, sorted labels) -> value."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{", 1)[0]
            out[(name, tuple(sorted(re.findall(r'(\w+)="([^"]*)"', series))))] = float(value)
    return out


def epoch(rfc3339: str) -> float:
    """Prometheus's timestamps (nanoseconds, Z) as seconds since the epoch."""
    stamp, _, frac = rfc3339.rstrip("Z").partition(".")
    whole = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return whole + float("0." + frac + "0")  # Prometheus leaves out a fraction of zero


def record(key: str, seconds: float) -> None:
    """One measured delay of the alert chain, kept for a reader (and the closing note)."""
    path = ARTIFACTS / "alert-chain.json"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    found = json.loads(path.read_text()) if path.exists() else {}
    found[key] = round(seconds, 1)
    path.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="module")
def prometheus(host):
    """The controller's Prometheus, scraping this host's node_exporter through 127.0.0.1."""
    name = host.backend.host
    ports = subprocess.run(["docker", "port", name, "9100/tcp"], capture_output=True, text=True,
                           timeout=30, check=True).stdout.split()
    loopback = [p for p in ports if p.startswith("127.0.0.1:")]
    assert loopback and len(loopback) == len(ports), (
        "%s: node_exporter published as %r, not on 127.0.0.1 only" % (name, ports))
    binary, assets = testbed.ensure_prometheus()
    server = alert_chain.Prometheus(binary, assets, loopback[0], alert_chain.rules_for_test(
        yaml.safe_load(SHIPPED_RULES.read_text())), ARTIFACTS / "prometheus.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_textfile_after_remediate(host):
    s = textfile(host, "after-remediate")
    assert s["sglang_remediation_compliant"] == 1
    # The idempotence run ended at the probe, which wrote this file: the converge's restart counted once.
    assert s["sglang_remediation_restarts_total"] == 1 and starts(host) == 1
    assert s['sglang_remediation_info{release="0.5.9",decision="patch",family="body_a_loop",'
             'draft_ids="-1,2,30",mode="remediate"}'] == 1
    assert 3.2 <= s['sglang_remediation_live_accept_length{source="probe"}'] <= 3.7
    assert s["sglang_remediation_accept_length_min"] == 2.5
    assert s["sglang_remediation_last_success_timestamp_seconds"] == s["sglang_remediation_last_run_timestamp_seconds"]
    assert all(v == 0 for k, v in s.items() if k.startswith("sglang_remediation_failure"))
    assert host.file(TEXTFILE).mode == 0o644
    assert json.loads(host.file(METRICS_STATE).content_string) == {"restarts_total": 1}


def test_systemd_expands_nothing_in_the_servers_arguments(host):
    """live.yml's --served-model-name deepseek-v3-${HF_TOKEN}, HF_TOKEN being in the environment file:
    the unit writes "$$", so the server runs the argument as given and the token stays out of its argv
    (readable by every local user) and out of the model name it serves."""
    live = yaml.safe_load((PROJECT / "molecule" / "live" / "vars" / "live.yml").read_text())
    token = live["sglang_environment"]["HF_TOKEN"]
    pid = host.check_output("systemctl show -p MainPID --value sglang")
    argv = host.check_output("tr '\\0' '\\n' < /proc/%s/cmdline" % pid).splitlines()
    assert argv[argv.index("--served-model-name") + 1] == "deepseek-v3-${HF_TOKEN}", argv
    assert not any(token in arg for arg in argv), argv
    # sglang_enable_metrics: true (live.yml): the flag reaches the server, which then serves SGLang's own
    # metrics on its /metrics (read from the host's loopback), the model name as given there too.
    assert live["sglang_enable_metrics"] is True and "--enable-metrics" in argv, argv
    metrics = host.check_output("python3 -c %s" % _quote(
        "import urllib.request;"
        "print(urllib.request.urlopen('http://127.0.0.1:30000/metrics', timeout=30).read().decode())"))
    assert 'sglang:spec_accept_length{model_name="deepseek-v3-${HF_TOKEN}"}' in metrics, metrics
    assert token not in metrics
    environ = host.check_output("tr '\\0' '\\n' < /proc/%s/environ" % pid).splitlines()
    assert "HF_TOKEN=%s" % token in environ
    info = server_info(host)
    assert info["served_model_name"] == "deepseek-v3-${HF_TOKEN}"
    # Run from root's /, not from the service user's writable home (the unit the running server was started
    # from: reading /proc/<pid>/cwd of another user's process takes CAP_SYS_PTRACE, which no container here has).
    assert host.check_output("systemctl show -p WorkingDirectory --value sglang") == "/"
    assert host.check_output("systemctl show -p MainPID --value sglang") == pid


def audit_with_bench(name: str, args=()) -> Tuple[Run, Dict[str, Any], Dict[str, Any]]:
    """An audit with fleetops.sglang.sglang_bench counting too: (run, row, the host's bench counts)."""
    out = ARTIFACTS / ("bench-%s.json" % name)
    out.unlink(missing_ok=True)
    result, row = run(AUDIT, name, args, env={
        "ANSIBLE_CALLBACKS_ENABLED": "fleetops.sglang.sglang_report,fleetops.sglang.sglang_bench",
        "SGLANG_BENCH_OUT": str(out)})
    counts = json.loads(out.read_text()) if out.exists() else {}
    return result, row, counts.get(row.get("host", ""), {})


def test_audit_of_a_healthy_host_reads_it_live(host):
    result, row, bench = audit_with_bench("audit-healthy")
    assert result.rc == 0 and result.changed() == 0, result.tail()
    assert row["compliant"] is True and row["status"] == "ok", row
    assert row["live_source"] == "probe" and 3.2 <= row["live_accept_length"] <= 3.7, row
    assert row["live_settings"]["speculative_num_steps"] == 15
    # The remediation's probe left the memo of its executed check: the audit answers from it.
    assert bench.get("memo") == "hit", bench
    # sglang_audit_memo=false: the check run again instead ("off"), the same files and live reading found
    # right. The host audit timer's spec holds the probe's arguments, the memo's among them: the timer
    # such a run would install differs from the one installed, its only finding. (The textfile is left as
    # it is: sglang_metrics_textfile=false.)
    result, unmemoed, bench = audit_with_bench("audit-healthy-no-memo", [
        "-e", "sglang_audit_memo=false", "-e", "sglang_metrics_textfile=false"])
    assert result.changed() == 0 and bench.get("memo") == "off", (bench, result.tail())
    assert [d["code"] for d in unmemoed["drift"]] == ["timer.differs"], unmemoed["drift"]
    assert unmemoed["live_source"] == "probe" and 3.2 <= unmemoed["live_accept_length"] <= 3.7, unmemoed
    s = textfile(host, "after-audit-healthy")
    assert s["sglang_remediation_compliant"] == 1 and s["sglang_remediation_restarts_total"] == 1
    assert 'mode="audit"' in "".join(k for k in s if k.startswith("sglang_remediation_info"))
    STATE["last_success"] = s["sglang_remediation_last_success_timestamp_seconds"]


def test_the_test_rules_differ_from_the_shipped_ones_only_where_said():
    shipped = yaml.safe_load(SHIPPED_RULES.read_text())
    short = alert_chain.TEST_FOR
    # Exactly these fields move; every expression, label and annotation else is the shipped one.
    assert alert_chain.rule_changes(shipped, alert_chain.rules_for_test(shipped)) == [
        ("SGLangHostNonCompliant", "for", "30m", short),
        ("SGLangLiveSettingsDiffer", "for", "5m", short),
        ("SGLangLiveAcceptLengthLow", "for", "15m", short),
        ("SGLangNoSuccessfulRemediationRun", "for", "10m", short),
        ("SGLangRemediationTextfileStale", "expr",
         "time() - sglang_remediation_last_run_timestamp_seconds > 3600",
         "time() - sglang_remediation_last_run_timestamp_seconds > %d" % alert_chain.TEST_STALE_AFTER_S),
        ("SGLangRemediationTextfileStale", "for", "5m", short),
        ("SGLangAuditTimerStale", "expr", TIMER_STALE_EXPR, TIMER_STALE_EXPR.replace(" + 300", "")),
        ("SGLangAuditTimerStale", "for", "10m", short),
        ("SGLangAuditTimerFailing", "for", "15m", short),
        ("SGLangAuditTimerMissing", "for", "1h", short),
        ("SGLangSpecAcceptLengthLow", "for", "15m", short),
    ]


def test_prometheus_scrapes_the_textfile_with_the_documented_labels(host, prometheus):
    loaded = [r for g in prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]]
    assert len(loaded) == 9 and all(r["type"] == "alerting" and r["duration"] == 2 for r in loaded), loaded
    text = host.file(TEXTFILE).content_string
    want = samples(text)
    last_run = want[("sglang_remediation_last_run_timestamp_seconds", ())]

    def scraped():
        got = prometheus.query('{__name__=~"sglang_remediation_.+"}')
        if any(r["metric"]["__name__"] == "sglang_remediation_last_run_timestamp_seconds"
               and float(r["value"][1]) == last_run for r in got):
            return got
        return None
    got = wait_until(scraped, 30, "the healthy audit's textfile scraped by Prometheus from %s" % prometheus.target)
    seen = {}
    for r in got:
        labels = dict(r["metric"])
        name = labels.pop("__name__")
        assert labels.pop("instance") == prometheus.target and labels.pop("job") == "node", r
        seen[(name, tuple(sorted(labels.items())))] = float(r["value"][1])
    # Every sample of the file, with its labels and value, and nothing else.
    assert seen == want
    assert {name: {k for k, _ in labels} for name, labels in seen} == DOCUMENTED_LABELS
    guide = GUIDE.read_text()
    for name, labels in DOCUMENTED_LABELS.items():
        assert name in guide and all('%s="' % label in guide for label in labels), name
    # node_exporter read the file (root's 0644, read by its own user) without an error.
    assert [r["value"][1] for r in prometheus.query("node_textfile_scrape_error")] == ["0"]
    assert prometheus.alerts(ACCEPT_ALERT) == []
    STATE["series"] = sorted({name for name, _ in seen})
    (ARTIFACTS / "prometheus-series.json").write_text(json.dumps(got, indent=2) + "\n")


def test_a_host_degraded_at_run_time_is_live_noncompliant_while_its_files_are_compliant(host):
    before = {path: sha256(host, path) for path in ETC_FILES}
    state = double_state(host)
    assert state["degraded"] is False
    generate(host, state["degrade_after"] - state["requests"])
    result, row = run(AUDIT, "audit-degraded")
    STATE["degraded_audit_end"] = time.time()
    assert result.rc != 0, result.tail()
    assert "is not compliant: live: accept length 1." in result.output, result.tail()
    assert row["status"] == "noncompliant" and row["compliant"] is False, row
    # Every file is right: the only findings are live ones, and the run ended at the probe.
    assert row["drift"] and all(d["code"] == "live.accept_length_low" for d in row["drift"]), row["drift"]
    assert "Remediate the EAGLE-3 embedding capture in the release this run deploys" not in result.output
    assert row["live_source"] == "probe" and row["live_accept_length"] < 2.0, row
    s = textfile(host, "after-audit-degraded")
    assert s["sglang_remediation_compliant"] == 0
    assert s['sglang_remediation_failure{class="live_accept_length"}'] == 1
    assert s['sglang_remediation_failure{class="source"}'] == 0
    assert s['sglang_remediation_live_accept_length{source="probe"}'] < 2.0
    # Kept from the healthy audit; the run itself is newer.
    assert s["sglang_remediation_last_success_timestamp_seconds"] == STATE["last_success"]
    assert s["sglang_remediation_last_run_timestamp_seconds"] > STATE["last_success"]
    STATE["degraded_last_run"] = s["sglang_remediation_last_run_timestamp_seconds"]
    assert {path: sha256(host, path) for path in ETC_FILES} == before
    assert starts(host) == 1
    (ARTIFACTS / "audit-degraded-row.json").write_text(json.dumps(row, indent=2) + "\n")
    # sglang_live_check=false: the files alone are judged, and they are right: no live reading in the row and
    # no live finding; the only one is the host audit timer's, whose spec would lose its live reading too.
    # With sglang_metrics_textfile=false the degraded textfile (and the alert it fires) stays as it was.
    text = host.file(TEXTFILE).content_string
    result, files_only = run(AUDIT, "audit-degraded-no-live",
                             ["-e", "sglang_live_check=false", "-e", "sglang_metrics_textfile=false"])
    assert result.changed() == 0, result.tail()
    assert [d["code"] for d in files_only["drift"]] == ["timer.differs"], files_only["drift"]
    assert files_only["live_source"] == "not read" and files_only["live_accept_length"] is None, files_only
    assert host.file(TEXTFILE).content_string == text
    assert starts(host) == 1


def test_the_accept_length_alert_fires_on_the_degraded_host(prometheus):
    def firing():
        return [a for a in prometheus.alerts(ACCEPT_ALERT) if a["state"] == "firing"]
    alerts = wait_until(firing, 60, "%s firing for %s after the degraded audit" % (ACCEPT_ALERT, prometheus.target))
    record("degraded_audit_end_to_firing_s", time.time() - STATE["degraded_audit_end"])
    record("degraded_textfile_to_firing_s", time.time() - STATE["degraded_last_run"])
    assert len(alerts) == 1, alerts
    alert = alerts[0]
    assert alert["labels"]["source"] == "probe" and alert["labels"]["severity"] == "critical", alert
    assert float(alert["value"]) < 2.0
    summary = "%s: speculative decoding accepts %.2f tokens per step; run playbooks/audit.yml --limit on it" % (
        prometheus.target, float(alert["value"]))
    assert alert["annotations"]["summary"] == summary
    assert alert["annotations"]["runbook_url"].endswith("guide_live_metrics.rst#sglangliveacceptlengthlow")
    # The page an on-call engineer opens: Debian's build serves Prometheus's classic UI, rendered
    # by the server, each rule a row coloured by its state; a click on the row shows its alerts.
    page = urllib.request.urlopen(prometheus.url + "/classic/alerts", timeout=10).read().decode()
    assert re.search(r'alert-danger alert_header">\s*<td><i class="icon-chevron-down"></i> <b>%s</b> \(1 active\)'
                     % ACCEPT_ALERT, page), page
    opened = alert_chain.screenshot_after_click(
        prometheus.url + "/classic/alerts", SHOT,
        # jQuery and the page's own script loaded (the libraries Debian links in, see testbed.py).
        ready="typeof $ === 'function' && $('tr.alert_header').length > 0",
        click="(() => { const rows = [...document.querySelectorAll('tr.alert_header')]"
              ".filter(r => r.querySelector('b').textContent === %s); rows.forEach(r => r.click());"
              " document.querySelector('div.show-annotations').click();"
              " return rows.length === 1 && getComputedStyle(rows[0].nextElementSibling).display !== 'none'"
              " && rows[0].nextElementSibling.textContent.includes('firing'); })()" % json.dumps(ACCEPT_ALERT))
    assert opened.stat().st_size > 10000


def test_the_alert_resolves_once_the_host_is_put_right_and_remediated(host, prometheus):
    # What a person does about a swapped draft: put it back and restart the server. The test
    # double's degradation lives in its process, so the restart alone puts it right; the next
    # remediate run then finds the host compliant and rewrites the textfile.
    assert [a["state"] for a in prometheus.alerts(ACCEPT_ALERT)] == ["firing"]
    resolved: Dict[str, Any] = {}

    def watch() -> None:
        # Watched from before the restart: the run's probe rewrites the textfile seconds before
        # the run ends, and the alert may be gone by then. (A timeout here leaves "at" unset.)
        resolved["at"] = wait_until(lambda: prometheus.alerts(ACCEPT_ALERT) == [] and time.time(), 120,
                                    "%s resolved for %s" % (ACCEPT_ALERT, prometheus.target))
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    host.check_output("systemctl restart sglang")
    wait_healthy(host)
    result, row = run(REMEDIATE, "remediate-restored")
    assert result.rc == 0 and row["compliant"] is True, result.tail()
    assert 3.2 <= row["live_accept_length"] <= 3.7, row
    watcher.join(timeout=130)
    assert "at" in resolved, resolved
    last_run = textfile(host, "after-remediate-restored")["sglang_remediation_last_run_timestamp_seconds"]
    # Resolved by the run's textfile, not before it: the restart alone moves no series.
    assert resolved["at"] > last_run, (resolved, last_run)
    record("remediation_textfile_to_resolved_s", resolved["at"] - last_run)
    assert [r["value"][1] for r in prometheus.query("sglang_remediation_compliant")] == ["1"]


def test_a_textfile_no_run_rewrites_fires_the_staleness_alert(host, prometheus):
    last_run = textfile(host, "before-stale")["sglang_remediation_last_run_timestamp_seconds"]

    def firing_since_last_run():
        return [a for a in prometheus.alerts("SGLangRemediationTextfileStale")
                if a["state"] == "firing" and epoch(a["activeAt"]) > last_run]
    alerts = wait_until(firing_since_last_run, alert_chain.TEST_STALE_AFTER_S + 60,
                        "SGLangRemediationTextfileStale firing for %s" % prometheus.target)
    record("last_run_to_stale_firing_s", time.time() - last_run)
    # Pending only once the file was older than the threshold, firing after its `for`.
    assert epoch(alerts[0]["activeAt"]) > last_run + alert_chain.TEST_STALE_AFTER_S, (alerts, last_run)
    assert float(alerts[0]["value"]) > alert_chain.TEST_STALE_AFTER_S
    assert alerts[0]["labels"]["severity"] == "warning"


def test_check_mode_writes_no_textfile(host):
    host.check_output("rm -f %s" % TEXTFILE)
    state_before = host.file(METRICS_STATE).mtime
    starts_before = starts(host)
    result, _ = run(REMEDIATE, "check", args=["--check"])
    assert result.rc == 0, result.tail()
    assert not host.file(TEXTFILE).exists
    assert host.file(METRICS_STATE).mtime == state_before
    assert host.file(TEXTFILE).exists is False and starts(host) == starts_before


def test_a_runtime_override_with_other_flags_is_found_live(host):
    before = {path: sha256(host, path) for path in ETC_FILES}
    unit = host.file("/etc/systemd/system/sglang.service").content_string
    exec_start = re.search(r"^ExecStart=.*?[^\\]$", unit, re.M | re.S).group(0)
    override = (exec_start.replace("--speculative-num-steps 15", "--speculative-num-steps 3")
                .replace("--speculative-num-draft-tokens 16", "--speculative-num-draft-tokens 4"))
    assert override != exec_start
    host.check_output("mkdir -p %s && printf '%%s\\n' %s %s > %s" % (
        str(Path(DROP_IN).parent), _quote("[Service]\nExecStart="), _quote(override), DROP_IN))
    host.check_output("systemctl daemon-reload && systemctl restart sglang")
    wait_healthy(host)
    result, row = run(AUDIT, "audit-override")
    assert result.rc != 0, result.tail()
    assert ("live: the server runs speculative_num_steps 3 (rendered 15), speculative_num_draft_tokens 4"
            " (rendered 16)") in result.output, result.tail()
    assert row["live_settings"]["speculative_num_steps"] == 3 and row["status"] == "noncompliant", row
    s = textfile(host, "after-audit-override")
    assert s['sglang_remediation_failure{class="live_settings"}'] == 1
    assert any('speculative_num_steps="3"' in k for k in s if k.startswith("sglang_remediation_live_info"))
    assert {path: sha256(host, path) for path in ETC_FILES} == before
    (ARTIFACTS / "audit-override-row.json").write_text(json.dumps(row, indent=2) + "\n")


# ---------------------------------------------------------------- the host's own audit timer
TIMER_VARS = ["-e", "sglang_audit_timer_interval=5", "-e", "sglang_audit_timer_jitter=2"]  # TIMER_INTERVAL_S, ..._JITTER_S
HEARTBEAT = "/var/lib/prometheus/node-exporter/sglang_remediation_audit_timer.prom"
TIMER_UNIT = "sglang-audit.timer"
# One interval and its jitter until a run starts (asserted from the run's own start time); the run itself may take
# long on a busy test machine (the service runs at Nice=19 and idle I/O), so the wait for its end is longer.
TIMER_INTERVAL_S, TIMER_JITTER_S = 5, 2
TIMER_WAIT_S = 120


def heartbeat(host) -> Dict[str, float]:
    res = host.run("cat %s" % HEARTBEAT)
    if res.rc != 0:
        return {}
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in res.stdout.splitlines() if line and not line.startswith("#")}


def next_timer_run(host, after: float, outcome: str) -> Dict[str, float]:
    """The timer's textfile once a run newer than ``after`` wrote it with ``outcome``."""
    def ran():
        beat = heartbeat(host)
        return beat if beat.get("sglang_audit_timer_last_run_timestamp_seconds", 0) > after and \
            beat.get('sglang_audit_timer_outcome{outcome="%s"}' % outcome) == 1 else None
    beat = wait_until(ran, TIMER_WAIT_S, "a run of %s with outcome %s" % (TIMER_UNIT, outcome))
    # A tick every interval, each up to the jitter late (and the clock's second): a run started within that.
    assert beat["sglang_audit_timer_last_run_timestamp_seconds"] - after <= TIMER_INTERVAL_S + TIMER_JITTER_S + 1.5, (
        beat, after)
    return beat


def test_the_timer_is_installed_and_audits_the_host_without_restarting_it(host):
    # Put the runtime override of the test above away by hand (a restart on the unit's own flags), then a
    # remediation with a timer of seconds: the host is compliant, so the probe installs it in its one call.
    host.check_output("rm -f %s && systemctl daemon-reload && systemctl restart sglang" % DROP_IN)
    wait_healthy(host)
    STATE["timer_starts"] = starts(host)
    result, row = run(REMEDIATE, "remediate-timer", args=TIMER_VARS)
    assert result.rc == 0 and row["compliant"] is True, result.tail()
    assert result.changed() == 1, result.tail()
    assert host.service(TIMER_UNIT).is_enabled and host.service(TIMER_UNIT).is_running
    unit = host.file("/etc/systemd/system/sglang-audit.service").content_string
    assert "ExecStart=/usr/bin/python3 -I /usr/local/lib/fleetops-sglang/sglang-audit.pyz /etc/sglang/sglang.audit.json" \
        in unit
    spec = host.file("/etc/sglang/sglang.audit.json")
    assert spec.mode == 0o600 and "hf_live_token_never_in_argv" not in spec.content_string
    installed_at = time.time()
    beat = next_timer_run(host, installed_at, "audited")
    STATE["timer_cpu_s"] = beat["sglang_audit_timer_cpu_seconds"]
    record("timer_cpu_milliseconds_per_run", 1000 * beat["sglang_audit_timer_cpu_seconds"])
    assert 0 < beat["sglang_audit_timer_cpu_seconds"] < 10, beat
    assert beat["sglang_audit_timer_interval_seconds"] == 5 and beat["sglang_audit_timer_jitter_seconds"] == 2
    s = textfile(host, "after-timer")
    assert s["sglang_remediation_compliant"] == 1 and s["sglang_remediation_audit_timer"] == 1
    assert any('mode="timer"' in k for k in s if k.startswith("sglang_remediation_info")), s
    assert 3.2 <= s['sglang_remediation_live_accept_length{source="probe"}'] <= 3.7
    # What the service ran as, and what it said.
    journal = host.check_output("journalctl -u sglang-audit.service --no-pager -o cat")
    assert "audited: compliant" in journal, journal
    show = host.check_output("systemctl show sglang-audit.service -p User -p CapabilityBoundingSet -p ProtectSystem"
                             " -p NoNewPrivileges -p ReadWritePaths")
    assert "ProtectSystem=strict" in show and "NoNewPrivileges=yes" in show, show
    assert "ReadWritePaths=/var/lib/prometheus/node-exporter" in show, show
    assert starts(host) == STATE["timer_starts"]


def test_a_timer_run_while_a_remediation_holds_the_lease_skips_and_says_so(host):
    before = textfile(host, "before-lease")["sglang_remediation_last_run_timestamp_seconds"]
    now = time.time()
    lease = {"run_id": "controller-4242-1", "controller": "controller", "user": "sre", "pid": 4242,
             "started": now, "taken_at": now, "heartbeat": now}
    host.check_output("printf '%%s' %s > /var/lib/sglang-remediation/lease.json" % _quote(json.dumps(lease)))
    try:
        next_timer_run(host, now, "skipped")
        journal = host.check_output("journalctl -u sglang-audit.service --no-pager -o cat --since=-30s")
        assert "skipped: a remediation run holds this host's lease (run controller-4242-1" in journal, journal
        # Nothing written but its own textfile.
        assert textfile(host, "during-lease")["sglang_remediation_last_run_timestamp_seconds"] == before
    finally:
        host.check_output("rm -f /var/lib/sglang-remediation/lease.json")
    next_timer_run(host, time.time(), "audited")
    assert starts(host) == STATE["timer_starts"]


def test_a_stopped_timer_fires_its_own_alert_not_the_drift_alerts(host, prometheus):
    host.check_output("systemctl stop %s" % TIMER_UNIT)
    stopped = time.time()
    try:
        def firing():
            return [a for a in prometheus.alerts("SGLangAuditTimerStale") if a["state"] == "firing"]
        alerts = wait_until(firing, 2 * (5 + 2) + 40, "SGLangAuditTimerStale firing for %s" % prometheus.target)
        record("timer_stopped_to_stale_firing_s", time.time() - stopped)
        assert alerts[0]["labels"]["severity"] == "warning"
        assert alerts[0]["annotations"]["runbook_url"].endswith("#sglangaudittimerstale")
        # The host itself is fine: no drift alert.
        for name in ("SGLangHostNonCompliant", ACCEPT_ALERT, "SGLangLiveSettingsDiffer", "SGLangAuditTimerFailing"):
            assert prometheus.alerts(name) == [], name
        # A controller's audit says what differs (the probe's timer.differs), and changes nothing.
        result, row = run(AUDIT, "audit-timer-stopped")
        assert result.rc != 0 and row["compliant"] is False, result.tail()
        assert [d["code"] for d in row["drift"]] == ["timer.differs"], row["drift"]
        assert "sglang-audit.timer is-active: inactive" in row["drift"][0]["text"], row["drift"]
        assert host.run("systemctl is-active %s" % TIMER_UNIT).stdout.strip() == "inactive"
    finally:
        host.check_output("systemctl start %s" % TIMER_UNIT)
    next_timer_run(host, time.time(), "audited")
    for name in ("SGLangAuditTimerStale", "SGLangHostNonCompliant"):
        wait_until(lambda: prometheus.alerts(name) == [], 30, "%s resolved" % name)
    assert starts(host) == STATE["timer_starts"]


def test_another_release_installed_by_hand_is_reported_by_the_timer_and_fires_the_alert(host, prometheus):
    """A pip install into the venv that serves: the timer says so within an interval and its jitter, the real
    Prometheus fires the compliance alert, and nothing restarts (the server runs on, on what it loaded)."""
    # The venv's Python is the system's (sglang_python); root may not start the venv's with -c (the test bed's tripwire).
    python = host.check_output("python3 -c 'import sys; print(\"cp%d%d\" % sys.version_info[:2])'")
    wheel = next(PROJECT.glob(".cache/wheelhouse/sglang-0.5.12.post1-%s-*.whl" % python))
    subprocess.run(["docker", "cp", str(wheel), "%s:/tmp/%s" % (host.backend.host, wheel.name)], check=True,
                   timeout=60)
    # pip as a person runs it (python -m pip: the test bed's tripwire stops only what the role's checks would start).
    host.check_output("/opt/sglang/venv/bin/python -m pip install --quiet --no-deps --no-index /tmp/%s" % wheel.name)
    installed = time.time()
    beat = next_timer_run(host, installed, "audited")
    record("pip_install_to_timer_textfile_s", beat["sglang_audit_timer_last_run_timestamp_seconds"] - installed)
    s = textfile(host, "after-pip-install")
    assert s["sglang_remediation_compliant"] == 0 and s['sglang_remediation_failure{class="release"}'] == 1, s
    assert any('release="0.5.12.post1"' in k and 'mode="timer"' in k for k in s), s
    journal = host.check_output("journalctl -u sglang-audit.service --no-pager -o cat --since=-30s")
    assert "not compliant: sglang 0.5.12.post1 installed, 0.5.9 pinned" in journal, journal

    def firing():
        return [a for a in prometheus.alerts("SGLangHostNonCompliant") if a["state"] == "firing"]
    alerts = wait_until(firing, 60, "SGLangHostNonCompliant firing for %s" % prometheus.target)
    record("pip_install_to_noncompliant_firing_s", time.time() - installed)
    assert alerts[0]["annotations"]["runbook_url"].endswith("#sglanghostnoncompliant")
    # The timer reports; only a remediation changes: no restart, the release left as the hand put it.
    assert starts(host) == STATE["timer_starts"]
    assert "0.5.12.post1" in host.check_output("/opt/sglang/venv/bin/python -m pip show sglang")


def test_prometheus_stops_and_leaves_nothing_behind(prometheus):
    data = Path(prometheus.tmp.name)
    prometheus.stop()
    assert prometheus.proc.returncode is not None and not data.exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(prometheus.url + "/-/ready", timeout=5)
