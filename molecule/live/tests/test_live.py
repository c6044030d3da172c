"""Live speculative health: audits read the running server, the textfile tells Prometheus.

The tests run in file order and build on each other (converged and idempotent host,
healthy audit, degraded at run time, --check, runtime override). The textfile is read
out of the container with testinfra and checked by the controller's promtool (Debian's,
extracted by testbed/testbed.py).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import PROJECT, Run, run_playbook, sha256, starts, _quote  # noqa: E402

sys.path.insert(0, str(PROJECT / "testbed"))
import testbed  # noqa: E402

AUDIT = PROJECT / "playbooks" / "audit.yml"
REMEDIATE = PROJECT / "playbooks" / "remediate.yml"
VARS = ["-e", "@" + str(PROJECT / "inventory" / "demo" / "group_vars" / "sglang.yml"),
        "-e", "@" + str(PROJECT / "molecule" / "live" / "vars" / "live.yml")]
TEXTFILE = "/var/lib/prometheus/node-exporter/sglang_remediation.prom"
METRICS_STATE = "/var/lib/sglang-remediation/metrics-state.json"
ETC_FILES = ("/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env")
DROP_IN = "/run/systemd/system/sglang.service.d/override.conf"
# What this scenario leaves for a reader (the pasted textfile and audit row).
ARTIFACTS = PROJECT / ".cache" / "molecule-logs" / "live-artifacts"
STATE: Dict[str, Any] = {}


def run(playbook: Path, name: str, args=()) -> Tuple[Run, Dict[str, Any]]:
    """One run with the fleet report enabled; (run, this host's report row)."""
    report_dir = ARTIFACTS / ("reports-" + name)
    result = run_playbook(playbook, args=[*VARS, *args], env={
        "ANSIBLE_CALLBACKS_ENABLED": "fleetops.sglang.sglang_report", "SGLANG_REPORT_DIR": str(report_dir)})
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


def test_audit_of_a_healthy_host_reads_it_live(host):
    result, row = run(AUDIT, "audit-healthy")
    assert result.rc == 0 and result.changed() == 0, result.tail()
    assert row["compliant"] is True and row["status"] == "ok", row
    assert row["live_source"] == "probe" and 3.2 <= row["live_accept_length"] <= 3.7, row
    assert row["live_settings"]["speculative_num_steps"] == 15
    s = textfile(host, "after-audit-healthy")
    assert s["sglang_remediation_compliant"] == 1 and s["sglang_remediation_restarts_total"] == 1
    assert 'mode="audit"' in "".join(k for k in s if k.startswith("sglang_remediation_info"))
    STATE["last_success"] = s["sglang_remediation_last_success_timestamp_seconds"]


def test_a_host_degraded_at_run_time_is_live_noncompliant_while_its_files_are_compliant(host):
    before = {path: sha256(host, path) for path in ETC_FILES}
    state = double_state(host)
    assert state["degraded"] is False
    generate(host, state["degrade_after"] - state["requests"])
    result, row = run(AUDIT, "audit-degraded")
    assert result.rc != 0, result.tail()
    assert "is not compliant: live: accept length 1." in result.output, result.tail()
    assert row["status"] == "noncompliant" and row["compliant"] is False, row
    # Every file is right: the only findings are live ones, and the run ended at the probe.
    assert row["drift"] and all(d["code"] == "live.accept_length_low" for d in row["drift"]), row["drift"]
    assert "Remediate the EAGLE-3 embedding capture in the installed SGLang" not in result.output
    assert row["live_source"] == "probe" and row["live_accept_length"] < 2.0, row
    s = textfile(host, "after-audit-degraded")
    assert s["sglang_remediation_compliant"] == 0
    assert s['sglang_remediation_failure{class="live_accept_length"}'] == 1
    assert s['sglang_remediation_failure{class="source"}'] == 0
    assert s['sglang_remediation_live_accept_length{source="probe"}'] < 2.0
    # Kept from the healthy audit; the run itself is newer.
    assert s["sglang_remediation_last_success_timestamp_seconds"] == STATE["last_success"]
    assert s["sglang_remediation_last_run_timestamp_seconds"] > STATE["last_success"]
    assert {path: sha256(host, path) for path in ETC_FILES} == before
    assert starts(host) == 1
    (ARTIFACTS / "audit-degraded-row.json").write_text(json.dumps(row, indent=2) + "\n")


def test_check_mode_writes_no_textfile(host):
    host.check_output("rm -f %s" % TEXTFILE)
    state_before = host.file(METRICS_STATE).mtime
    result, _ = run(REMEDIATE, "check", args=["--check"])
    assert result.rc == 0, result.tail()
    assert not host.file(TEXTFILE).exists
    assert host.file(METRICS_STATE).mtime == state_before
    assert host.file(TEXTFILE).exists is False and starts(host) == 1


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
    host.check_output("for i in $(seq 60); do python3 -c \"import urllib.request;urllib.request.urlopen("
                      "'http://127.0.0.1:30000/health_generate', timeout=5)\" 2>/dev/null && exit 0; sleep 0.5;"
                      " done; exit 1")
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
