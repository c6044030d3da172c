"""A server with API keys, from a converged host (0.5.9, no key) to a key refused after a restart.

The test double enforces keys as SGLang 0.5.8+ does (every route but /health* and /metrics
answers 401 without ``Authorization: Bearer <api key>``), and reads them from the role's
--config file as SGLang's ConfigArgumentMerger does. Every run goes through
``playbooks/remediate.yml`` or ``playbooks/audit.yml`` with the keys in an extra-vars file, as
a Vault file would give them. The tests run in file order and build on each other:

1. keys set: one restart, the gate and the live probe read with the key;
2. the rerun changes nothing; ``--check --diff`` of a new key says it would restart, and shows no key;
3. the rotation restarts once; the old key is refused by the server; a rotation whose gate fails is undone but for
   its keys (keys go forward only), and the next run converges;
4. a key changed on the host by hand: the audit says ``live: the server refused the key (401)``,
   exits non-zero and restarts nothing;
5. a server that refuses the key right after its restart fails the run, keeps the files (no
   rollback) and restarts nothing more on the next runs;
6. each key is looked for everywhere: files, every process's command line, ``systemctl show``,
   the journal, every run's output and report;
7. the keys removed: ``--check`` says the file would change, then one restart removes the file and
   ``--config``, and the rerun changes nothing.
"""
from __future__ import annotations

import json
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import PROJECT, UNIT, Run, _quote, run_playbook, sha256, starts, wait_until  # noqa: E402

DEMO_VARS = PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml"
DEMO = yaml.safe_load(DEMO_VARS.read_text())
REMEDIATE = PROJECT / "playbooks" / "remediate.yml"
AUDIT = PROJECT / "playbooks" / "audit.yml"
KEYS_FILE = "/etc/sglang/sglang.keys.yaml"
ENV_FILE = "/etc/sglang/sglang.env"
CHANGES = "/var/lib/sglang-remediation/changes"
TEXTFILE = "/var/lib/prometheus/node-exporter/sglang_remediation.prom"
HOST_PATHS = "/etc /var /run /tmp /root /opt /models /usr/local/lib/sglang-test-double"
# Fresh per run of the suite (quotes and backslashes are the parser-venv and unit tests' business).
KEYS = {name: "%s-%s" % (name, secrets.token_hex(10))
        for name in ("first", "first_admin", "rotated", "rotated_admin", "forward", "forward_admin", "by_hand")}
REPORTS = Path(tempfile.mkdtemp(prefix="auth-reports-"))
OUTPUTS: List[str] = []
_state: Dict[str, Any] = {}


def run(playbook: Path, api: str, admin: str, args: Tuple[str, ...] = (),
        environment: Optional[Dict[str, str]] = None) -> Tuple[Run, Dict[str, Any]]:
    """One run with the report callback on; (run, this host's row). The keys travel in the extra-vars file."""
    extra: Dict[str, Any] = {"sglang_api_key": api, "sglang_admin_api_key": admin}
    if environment:
        extra["sglang_environment"] = dict(DEMO["sglang_environment"], **environment)
    reports = REPORTS / str(len(OUTPUTS))
    result = run_playbook(playbook, extra_vars=extra, args=["-e", "@%s" % DEMO_VARS, *args], env={
        "ANSIBLE_CALLBACKS_ENABLED": "fleetops.sglang.sglang_report", "SGLANG_REPORT_DIR": str(reports)})
    OUTPUTS.append(result.output)
    report = reports / "latest" / "fleet.json"
    rows = json.loads(report.read_text())["hosts"] if report.exists() else []
    return result, (rows[0] if rows else {})


def status(host, path: str, key: Optional[str] = None) -> int:
    """The HTTP status the server answers on ``path``, with ``key`` as Bearer token or without one; 0: no answer."""
    script = ("import sys,urllib.request,urllib.error\n"
              "h={'Authorization':'Bearer '+sys.argv[2]} if len(sys.argv)>2 else {}\n"
              "r=urllib.request.Request('http://127.0.0.1:30000'+sys.argv[1],headers=h)\n"
              "try: print(urllib.request.urlopen(r,timeout=30).status)\n"
              "except urllib.error.HTTPError as e: print(e.code)\n"
              "except OSError: print(0)\n")
    argv = " ".join(_quote(a) for a in ([path] + ([key] if key is not None else [])))
    return int(host.check_output("python3 -c %s %s" % (_quote(script), argv)).strip())


def test_a_key_set_on_a_converged_host_restarts_it_once_behind_the_keyed_gate(host):
    assert host.file(KEYS_FILE).exists is False
    before = starts(host)
    result, row = run(REMEDIATE, KEYS["first"], KEYS["first_admin"], ("--diff",))
    assert result.rc == 0, result.tail(120)
    assert starts(host) == before + 1
    # The keys' file, the logging configuration that keeps them out of the journal, the environment that
    # names it and the unit's --config: one restart for all four.
    assert ("restart: api_keys changed since the last healthy start; environment changed since the last healthy "
            "start; logging changed since the last healthy start; unit changed") in result.output, result.tail(120)
    logging_file = host.file("/etc/sglang/sglang.logging.json")
    assert (logging_file.mode, logging_file.user, logging_file.group) == (0o640, "root", "sglang")
    assert json.loads(logging_file.content_string)["loggers"]["sglang.srt.entrypoints.engine"] == {"level": "WARNING"}
    keys = host.file(KEYS_FILE)
    assert (keys.mode, keys.user, keys.group) == (0o640, "root", "sglang")
    assert json.dumps(KEYS["first"]) in keys.content_string and json.dumps(KEYS["first_admin"]) in keys.content_string
    etc = host.file("/etc/sglang")
    assert (etc.mode, etc.user, etc.group) == (0o710, "root", "sglang")
    assert "--config /etc/sglang/sglang.keys.yaml" in host.file(UNIT).content_string
    # The server holds the key: open health, 401 elsewhere without it or with the admin key.
    assert status(host, "/health_generate") == 200
    assert status(host, "/server_info") == 401
    assert status(host, "/server_info", KEYS["first_admin"]) == 401
    assert status(host, "/server_info", KEYS["first"]) == 200
    # The gate read the server info and sent its generations with the key.
    assert row["status"] == "changed" and row["health"] == "ok", row
    assert row["live_accept_length"] >= 2.5, row


def test_the_rerun_changes_nothing_and_its_probe_reads_with_the_key(host):
    before = starts(host)
    result, row = run(REMEDIATE, KEYS["first"], KEYS["first_admin"])
    assert result.rc == 0 and result.changed() == 0, result.tail(120)
    assert starts(host) == before
    assert row["status"] == "ok" and row["live_source"] == "probe", row
    assert row["live_accept_length"] >= 2.5, row


def test_a_rotation_is_shown_by_check_mode_then_restarts_once(host):
    before, keys_sha = starts(host), sha256(host, KEYS_FILE)
    result, row = run(REMEDIATE, KEYS["rotated"], KEYS["rotated_admin"], ("--check", "--diff"))
    assert result.rc == 0, result.tail(120)
    assert "would restart" in result.output and "API key file would change" in result.output, result.tail(120)
    assert starts(host) == before and sha256(host, KEYS_FILE) == keys_sha

    result, row = run(REMEDIATE, KEYS["rotated"], KEYS["rotated_admin"], ("-v",))
    assert result.rc == 0, result.tail(120)
    assert starts(host) == before + 1
    assert "restart: api_keys changed since the last healthy start\"" in result.output, result.tail(120)
    assert status(host, "/server_info", KEYS["first"]) == 401
    assert status(host, "/server_info", KEYS["rotated"]) == 200
    assert row["status"] == "changed" and row["live_accept_length"] >= 2.5, row


def test_a_rotation_whose_gate_fails_is_undone_but_for_its_keys(host):
    """Keys go forward only: the undo puts back the unit and restarts on it, with the keys this run wrote, so that
    a key rotated away (perhaps because it leaked) does not come back with a failed run."""
    before, unit_sha = starts(host), sha256(host, UNIT)
    # Another flag changes with the keys; no accept length reaches 15 on the double, so the live gate fails.
    result, row = run(REMEDIATE, KEYS["forward"], KEYS["forward_admin"],
                      ("-e", json.dumps({"sglang_mem_fraction_static": 0.77, "sglang_accept_length_min": 15})))
    assert result.rc != 0 and row["status"] == "failed" and row.get("rolled_back"), result.tail(120)
    assert any(line.startswith(KEYS_FILE) and "keys go forward only" in line for line in row["left"]), row
    assert starts(host) == before + 2  # the change, then the undo's restart on the unit put back
    assert sha256(host, UNIT) == unit_sha
    keys = host.file(KEYS_FILE)
    assert json.dumps(KEYS["forward"]) in keys.content_string and json.dumps(KEYS["rotated"]) not in keys.content_string
    assert (keys.mode, keys.user, keys.group) == (0o640, "root", "sglang")
    assert status(host, "/server_info", KEYS["rotated"]) == 401
    assert status(host, "/server_info", KEYS["forward"]) == 200
    # Only a run brings another key: the rotation back, one restart.
    result, row = run(REMEDIATE, KEYS["rotated"], KEYS["rotated_admin"])
    assert result.rc == 0 and starts(host) == before + 3, result.tail(120)
    assert status(host, "/server_info", KEYS["rotated"]) == 200


def test_a_key_changed_by_hand_makes_the_audit_fail_on_401_and_restart_nothing(host):
    text = host.file(KEYS_FILE).content_string.replace(json.dumps(KEYS["rotated"]), json.dumps(KEYS["by_hand"]))
    host.check_output("printf %%s %s > %s && systemctl restart sglang" % (_quote(text), KEYS_FILE))
    wait_until(lambda: status(host, "/health_generate") == 200, 60, "the server restarted by hand")
    before, keys_sha = starts(host), sha256(host, KEYS_FILE)
    result, row = run(AUDIT, KEYS["rotated"], KEYS["rotated_admin"])
    assert result.rc != 0, result.tail(120)
    assert "live: the server refused the key (401)" in result.output, result.tail(120)
    assert row["status"] == "noncompliant", row
    # The row's findings are read by their codes, which set the textfile's classes; the text may change.
    assert "live.auth_refused" in [d["code"] for d in row["drift"]], row
    assert "api_keys.differs" in [d["code"] for d in row["drift"]], row
    assert starts(host) == before and sha256(host, KEYS_FILE) == keys_sha
    prom = host.file(TEXTFILE).content_string
    assert 'sglang_remediation_failure{class="live_auth"} 1' in prom
    assert 'sglang_remediation_failure{class="live_unavailable"} 0' in prom


def test_a_key_refused_right_after_the_restart_fails_the_run_without_a_rollback(host):
    """The double holds a key the role does not manage (its environment override): healthy, but 401."""
    held = {"SGLANG_TEST_DOUBLE_API_KEY": KEYS["by_hand"]}
    before = starts(host)
    result, row = run(REMEDIATE, KEYS["rotated"], KEYS["rotated_admin"], environment=held)
    assert result.rc != 0, result.tail(120)
    assert "the server refused the key (401)" in result.output, result.tail(120)
    assert "the files of this run are kept, not put back" in result.output, result.tail(120)
    # One restart, on this run's files (the key file is the role's again), none to undo it.
    assert starts(host) == before + 1
    assert json.dumps(KEYS["rotated"]) in host.file(KEYS_FILE).content_string
    assert "SGLANG_TEST_DOUBLE_API_KEY" in host.file(ENV_FILE).content_string
    assert row["status"] == "failed" and row["restarted"] is True and not row.get("rolled_back"), row
    # Healthy on these files: no run restarts it again for the key it refuses.
    for playbook in (REMEDIATE, AUDIT):
        result, row = run(playbook, KEYS["rotated"], KEYS["rotated_admin"], environment=held)
        assert "live: the server refused the key (401)" in result.output, result.tail(120)
        assert starts(host) == before + 1
    assert result.rc != 0


def _holders(host, key: str) -> List[str]:
    res = host.run("grep -rlsF -e %s %s | xargs -r stat -c '%%a %%U %%G %%n'" % (_quote(key), HOST_PATHS))
    return sorted(res.stdout.splitlines())


def test_each_key_is_only_in_its_0640_file_and_the_root_only_change_sets(host):
    """The current keys: the 0640 file, plus the change sets' 0600 copies a failed run puts back;
    a rotated-away key: only those copies (kept for the last runs' rollback)."""
    for name, key in KEYS.items():
        holders = _holders(host, key)
        allowed = ["640 root sglang %s" % KEYS_FILE] if name.startswith("rotated") else []
        if name == "by_hand":
            allowed.append("600 root root %s" % ENV_FILE)  # the double's override lives in the environment
        for line in holders:
            assert line in allowed or (line.startswith("600 root root %s/" % CHANGES)), (name, line)
        if name.startswith("rotated"):
            assert "640 root sglang %s" % KEYS_FILE in holders, (name, holders)
    needles = list(KEYS.values())
    cmdlines = host.check_output("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
    assert "/etc/sglang/sglang.keys.yaml" in cmdlines  # the server's argv names the file
    shown = host.check_output("systemctl show sglang --no-pager")
    journal = host.check_output("journalctl --no-pager -o cat")
    written = [p for p in REPORTS.rglob("*") if p.is_file()]
    assert written and OUTPUTS
    # Nor a plain sha256 of a file that holds them (a short key could be guessed offline from it), whole or
    # as the 12 characters a change line shows.
    for path in (KEYS_FILE, ENV_FILE):
        digest = sha256(host, path)[:12]
        assert not [o for o in OUTPUTS if digest in o], path
        assert not [p for p in written if digest in p.read_text(errors="replace")], path
    for key in needles:
        assert key not in cmdlines and key not in shown and key not in journal, key
        for output in OUTPUTS:
            assert key not in output
        for path in written:
            assert key not in path.read_text(errors="replace"), path
    shutil.rmtree(REPORTS, ignore_errors=True)


def test_removing_the_keys_removes_the_file_and_the_flag_and_restarts_once(host):
    """Runs last: the keys go, and the server serves without one (the file's removal is a change)."""
    before = starts(host)
    result, _row = run(REMEDIATE, "", "", ("--check",))
    assert result.rc == 0 and "API key file would change" in result.output, result.tail(120)
    assert host.file(KEYS_FILE).exists and starts(host) == before
    result, row = run(REMEDIATE, "", "")
    assert result.rc == 0 and row["status"] == "changed" and row["restarted"] is True, result.tail(120)
    assert starts(host) == before + 1
    assert not host.file(KEYS_FILE).exists and "--config" not in host.file(UNIT).content_string
    assert not host.file("/etc/sglang/sglang.logging.json").exists
    assert "SGLANG_LOGGING_CONFIG_PATH" not in host.file(ENV_FILE).content_string
    assert status(host, "/server_info") == 200
    result, _row = run(REMEDIATE, "", "")
    assert result.rc == 0 and result.changed() == 0 and starts(host) == before + 1, result.tail(120)
    shutil.rmtree(REPORTS, ignore_errors=True)
