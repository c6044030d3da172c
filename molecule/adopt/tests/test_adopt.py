"""Adopting a running fleet: no restart for a server that already runs what the role would start.

The host is the converged image (0.5.9, its server started at boot by the enabled unit). Its
record of the last healthy start is taken away, as on a host converged by hand or by another
tool. The tests run in file order and build on each other:

1. ``--check`` and audit say it would be adopted; remediate adopts it: no restart, the report
   says ``adopted``, the fingerprint is recorded; the rerun finds it compliant;
2. the server restarted by hand with one more flag (a runtime drop-in, then gone from disk),
   record taken away again: remediate restarts it exactly once, on the unit's own command;
3. the host known to be out (group sglang_maintenance, or sglang_skip_hosts): remediate with a
   change pending and audit leave it alone, and the report says ``skipped (maintenance)``;
4. the test bed's mark taken away (plugins/module_utils/_testbed.py), as on a real host the test
   bed reached: the audit's live reading refuses the test double that serves there
   (``live.test_double``), testbed-prepare.yml refuses the host before it writes anything, and the
   installed double refuses to start.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import PROJECT, UNIT, Run, _quote, run_playbook, starts, wait_until  # noqa: E402

DEMO_VARS = PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml"
REMEDIATE = PROJECT / "playbooks" / "remediate.yml"
AUDIT = PROJECT / "playbooks" / "audit.yml"
PREPARE = PROJECT / "playbooks" / "testbed-prepare.yml"
MARK = "/etc/sglang-testbed"
RECORD = "/var/lib/sglang-remediation/running.json"
DROP_IN = "/run/systemd/system/sglang.service.d/by-hand.conf"
REPORTS = Path(tempfile.mkdtemp(prefix="adopt-reports-"))
_runs = []
NAME = "%s-adopt-%s" % (os.environ.get("SGLANG_TESTBED_PREFIX", "sglang"), os.environ.get("MOLECULE_DISTRO", "bookworm"))


def run(playbook: Path, *args: str) -> Tuple[Run, Dict[str, Any]]:
    reports = REPORTS / str(len(_runs))
    result = run_playbook(playbook, args=["-e", "@%s" % DEMO_VARS, *args], env={
        "ANSIBLE_CALLBACKS_ENABLED": "fleetops.sglang.sglang_report", "SGLANG_REPORT_DIR": str(reports)})
    _runs.append(result)
    doc = json.loads((reports / "latest" / "fleet.json").read_text())
    return result, doc["hosts"][0]


def main_pid(host) -> str:
    return host.check_output("systemctl show -p MainPID --value sglang").strip()


def healthy(host) -> bool:
    return host.run("python3 -c %s" % _quote(
        "import urllib.request;urllib.request.urlopen('http://127.0.0.1:30000/health_generate', timeout=5)")).rc == 0


def test_a_converged_server_without_a_record_is_adopted_without_a_restart(host):
    wait_until(lambda: healthy(host), 60, "the server started at boot")
    host.check_output("rm %s" % RECORD)
    pid, before = main_pid(host), starts(host)
    for playbook, args, status in ((REMEDIATE, ("--check",), "would adopt"), (AUDIT, (), "would adopt")):
        result, row = run(playbook, *args)
        assert result.rc == 0 and row["status"] == status and row["adopted"] is True, (row, result.tail(80))
        assert not host.file(RECORD).exists
    result, row = run(REMEDIATE)
    assert result.rc == 0, result.tail(80)
    assert row["status"] == "adopted" and row["restarted"] is False and row["adopted"] is True, row
    assert main_pid(host) == pid and starts(host) == before
    assert host.file(RECORD).exists and host.file(RECORD).mode == 0o600
    result, row = run(REMEDIATE)
    assert result.rc == 0 and result.changed() == 0 and row["status"] == "ok" and row["adopted"] is False, row
    assert main_pid(host) == pid and starts(host) == before


def test_a_server_started_by_hand_with_another_flag_is_restarted_once(host):
    exec_start = re.search(r"^ExecStart=.*?[^\\]$", host.file(UNIT).content_string, re.M | re.S).group(0)
    by_hand = exec_start + " \\\n    --log-level debug"
    host.check_output("mkdir -p %s && printf '%%s\\n' %s %s > %s && systemctl daemon-reload && "
                      "systemctl restart sglang && rm %s && systemctl daemon-reload && rm %s" % (
                          str(Path(DROP_IN).parent), _quote("[Service]\nExecStart="), _quote(by_hand), DROP_IN,
                          DROP_IN, RECORD))
    wait_until(lambda: healthy(host), 60, "the server started by hand")
    assert "--log-level debug" in host.check_output("cat /proc/%s/cmdline | tr '\\0' ' '" % main_pid(host))
    before = starts(host)
    result, row = run(REMEDIATE)
    assert result.rc == 0, result.tail(80)
    assert "not adopted: its command line differs from the unit's" in result.output, result.tail(80)
    assert row["status"] == "changed" and row["restarted"] is True and row["adopted"] is False, row
    assert starts(host) == before + 1
    assert "--log-level debug" not in host.check_output("cat /proc/%s/cmdline | tr '\\0' ' '" % main_pid(host))
    result, row = run(REMEDIATE)
    assert result.rc == 0 and result.changed() == 0 and starts(host) == before + 1, result.tail(80)


def test_a_host_known_to_be_out_is_left_alone_and_reported_skipped(host, tmp_path):
    maintenance = tmp_path / "maintenance.yml"
    maintenance.write_text("all:\n  children:\n    sglang_maintenance:\n      hosts:\n        %s: {}\n" % NAME)
    unit, pid, before = host.file(UNIT).content_string, main_pid(host), starts(host)
    change = ("-e", "sglang_speculative_num_steps=7", "-e", "sglang_speculative_num_draft_tokens=8")
    for playbook, args in ((REMEDIATE, ("-i", str(maintenance)) + change), (REMEDIATE, ("-e", "sglang_skip_hosts=%s" % NAME) + change),
                           (AUDIT, ("-i", str(maintenance)))):
        result, row = run(playbook, *args)
        assert result.rc == 0, result.tail(80)
        assert row["status"] == "skipped (maintenance)", row
    assert host.file(UNIT).content_string == unit and main_pid(host) == pid and starts(host) == before


def test_a_2x_in_place_venv_is_adopted_as_a_release_with_no_reinstall_and_no_restart(host):
    """Collection 2.x installed SGLang in place, in sglang_venv itself. The host is made so while its
    server runs (the release directory moved back to /opt/sglang/venv, unsealed, no releases): the
    probe names it, and the run moves it under /opt/sglang/releases as it is, links it, audits it and
    seals it, with no pip and no restart; the run after changes nothing."""
    wait_until(lambda: healthy(host), 60, "the server")
    host.check_output("set -e; cur=$(readlink -f /opt/sglang/venv); rm /opt/sglang/venv; mv \"$cur\" /opt/sglang/venv;"
                      " rm /opt/sglang/venv/.fleetops-release.json; rmdir /opt/sglang/releases")
    inode = host.check_output("stat -c %i /opt/sglang/venv/bin")
    pid, before = main_pid(host), starts(host)
    result, row = run(AUDIT)
    assert result.rc != 0 and [d["code"] for d in row["drift"]] == ["release.not_staged"], (row, result.tail(40))
    result, row = run(REMEDIATE)
    assert result.rc == 0 and row["status"] == "changed" and row["restarted"] is False, (row, result.tail(80))
    assert "Install the pinned SGLang into the new release's virtualenv] ***\nskipping" in result.output
    assert "sealed as " in result.output and "not reinstalled" in result.output, result.tail(80)
    assert host.file("/opt/sglang/venv").is_symlink
    assert host.file("/opt/sglang/venv").linked_to == "/opt/sglang/releases/0.5.9-adopted"
    # The same files, not copies: the running server's paths resolve to what it started on.
    assert host.check_output("stat -c %i /opt/sglang/venv/bin/") == inode
    marker = json.loads(host.file("/opt/sglang/releases/0.5.9-adopted/.fleetops-release.json").content_string)
    assert marker["adopted"] is True and marker["id"].startswith("0.5.9-"), marker
    assert main_pid(host) == pid and starts(host) == before
    result, row = run(REMEDIATE)
    assert result.rc == 0 and result.changed() == 0 and row["status"] == "ok", (row, result.tail(80))
    assert main_pid(host) == pid and starts(host) == before


def test_without_the_test_beds_mark_the_audit_prepare_and_the_double_refuse(host):
    wait_until(lambda: healthy(host), 60, "the server")
    # The test bed mounts its mark read-only into every container it creates; taken away, the
    # container is as a real host: the image holds no mark (an empty mount point at most).
    assert "disposable test container" in host.file(MARK).content_string
    host.check_output("umount %s" % MARK)
    mark = host.file(MARK)
    assert not mark.exists or (mark.is_file and mark.size == 0), "the mark is still there after its umount"
    pid, before = main_pid(host), starts(host)
    result, row = run(AUDIT)
    assert result.rc != 0, result.tail(80)
    codes = [f["code"] for f in row["drift"]]
    assert "live.test_double" in codes, row
    assert "test-bed container" in json.dumps(row["drift"]), row
    result = run_playbook(PREPARE)
    assert result.rc != 0 and result.changed() == 0, result.tail(60)
    # Refused by its first task after the boot wait: no task that writes ran.
    assert "not a test-bed container" in result.output and "Create the model directories" not in result.output
    double = host.run("cd / && /opt/sglang/venv/bin/python /usr/local/lib/sglang-test-double/sglang_test_double.py "
                      "--model-path /models/DeepSeek-V3 --port 30099")
    assert double.rc == 1 and "refusing to start: this host is not a test-bed container" in double.stdout, double
    # The audit changed nothing: the double that was running still runs, not restarted.
    assert main_pid(host) == pid and starts(host) == before
