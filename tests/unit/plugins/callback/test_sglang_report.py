"""The fleet report callback and its model (plugin_utils/_report.py): rows as hosts finish, aborted runs,
failures first."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO as ROOT


def _load():
    spec = importlib.util.spec_from_file_location("sglang_report", ROOT / "plugins" / "callback" / "sglang_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load()
# The report's model (rows, statuses, fleet.md, the merge), which the callback feeds.
model = importlib.import_module("ansible_collections.fleetops.sglang.plugins.plugin_utils._report")
filters = importlib.import_module("ansible_collections.fleetops.sglang.plugins.filter.sglang")


class Inventory:
    """Inventory with a batch restriction, like PlaybookExecutor's."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.batch = hosts

    def get_hosts(self, pattern, ignore_restrictions=False):
        names = self.hosts if ignore_restrictions else self.batch
        return [SimpleNamespace(get_name=lambda n=n: n) for n in names]


def play(inventory, role="sglang", **play_vars):
    return SimpleNamespace(
        get_roles=lambda: [SimpleNamespace(get_name=lambda: role)], vars=play_vars, hosts="sglang",
        _variable_manager=SimpleNamespace(_inventory=inventory))


def result(host, res, task="some task"):
    return SimpleNamespace(host=SimpleNamespace(get_name=lambda: host),
                           task=SimpleNamespace(get_name=lambda: task), result=res)


def fact(host, **over):
    base = {"host": host, "release": "0.5.9", "decision": "patch", "file_state_before": "pristine",
            "sha256_before": "a" * 64, "sha256_after": "b" * 64, "evidence": [2634, 2721],
            "draft_layer_ids": [-1, 2, 30], "compliant": True, "restart_needed": True, "restarted": True,
            "restart_reasons": ["unit changed"], "health": "ok", "accept_length": 3.556,
            "tokens_per_s": 126.1, "speculative_flags": {"num_steps": 15, "eagle_topk": 1, "num_draft_tokens": 16},
            "error": "", "mode": "remediate"}
    base.update(over)
    return {"ansible_facts": {"sglang_remediation": base}}


class Stats:
    def __init__(self, changed):
        self.changed = changed

    def summarize(self, host):
        return {"ok": 30, "changed": self.changed.get(host, 0), "failures": 0, "unreachable": 0,
                "skipped": 3, "rescued": 0, "ignored": 0}


@pytest.fixture
def callback(tmp_path, monkeypatch):
    cb = report.CallbackModule()
    options = {"report_dir": str(tmp_path), "print_rows_max": 50, "keep": "200"}
    monkeypatch.setattr(cb, "get_option", options.get)
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/x/remediate.yml"))
    return cb


def read(tmp_path):
    return json.loads((tmp_path / "latest" / "fleet.json").read_text()), (tmp_path / "latest" / "fleet.md").read_text()


def test_a_failed_batch_leaves_a_complete_report(callback, tmp_path):
    inv = Inventory(["h1", "h2", "h3", "h4"])
    inv.batch = ["h1"]
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h1", fact("h1")))
    # Written as the canary finished, before the run ends.
    doc, _ = read(tmp_path)
    assert [r["status"] for r in doc["hosts"]] == ["ok", "not reached", "not reached", "not reached"]
    inv.batch = ["h2", "h3"]
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h2", fact("h2")))
    callback.v2_runner_on_failed(result("h3", {"msg": "Status code was 503"}, "Wait for /health_generate"))
    callback.v2_runner_on_ok(result("h3", fact("h3", error="Wait: 503 (rolled back)", rolled_back=True, health="failed")))
    callback.v2_runner_on_failed(result("h3", {"msg": "h3: sglang failed its gate"}, "Fail the host"))
    callback.v2_playbook_on_stats(Stats({"h1": 5, "h2": 5, "h3": 6}))
    doc, md = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert doc["run"]["result"] == "aborted" and doc["run"]["batches"] == 2
    assert rows["h1"]["status"] == "changed" and rows["h1"]["batch"] == 1 and rows["h1"]["accept_length"] == 3.556
    assert rows["h3"]["status"] == "failed" and rows["h3"]["batch"] == 2 and rows["h3"]["rolled_back"] is True
    assert rows["h3"]["error"] == "Wait: 503 (rolled back)"
    assert rows["h4"]["status"] == "not reached" and rows["h4"]["batch"] is None
    assert doc["counts"]["decision"] == {"patch": 3, "(not reached)": 1}
    # Failures first, in the summary and in the table.
    assert md.index("## Needs attention") < md.index("## Hosts")
    table = md.split("## Hosts", 1)[1]
    assert table.index("| h3 |") < table.index("| h4 |") < table.index("| h1 |")
    # The timestamped copy holds the same report.
    copies = list((tmp_path / "runs").glob("*/fleet.json"))
    assert len(copies) == 1 and json.loads(copies[0].read_text()) == doc


def test_the_report_is_private_its_files_0600_and_the_folders_it_makes_0700(tmp_path, monkeypatch):
    import stat
    base = tmp_path / "reports"           # made by the callback
    cb = report.CallbackModule()
    monkeypatch.setattr(cb, "get_option", {"report_dir": str(base), "print_rows_max": 50, "keep": "200"}.get)
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/x/remediate.yml"))
    inv = Inventory(["h1"])
    inv.batch = ["h1"]
    cb.v2_playbook_on_play_start(play(inv))
    cb.v2_runner_on_ok(result("h1", fact("h1")))
    (run,) = (base / "runs").iterdir()
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert {str(d.relative_to(tmp_path)): mode(d) for d in (base, base / "runs", run, base / "latest")} == {
        "reports": 0o700, "reports/runs": 0o700, str(run.relative_to(tmp_path)): 0o700, "reports/latest": 0o700}
    files = [d / n for d in (run, base / "latest") for n in ("fleet.json", "fleet.md")]
    assert [mode(f) for f in files] == [0o600] * 4
    # A report directory that exists keeps the mode its owner gave it; the files are still 0600.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o750)
    shared.chmod(0o750)
    cb2 = report.CallbackModule()
    monkeypatch.setattr(cb2, "get_option", {"report_dir": str(shared), "print_rows_max": 50, "keep": "200"}.get)
    cb2.v2_playbook_on_start(SimpleNamespace(_file_name="/x/audit.yml"))
    cb2.v2_playbook_on_play_start(play(inv))
    cb2.v2_runner_on_ok(result("h1", fact("h1")))
    assert mode(shared) == 0o750 and mode(shared / "latest" / "fleet.json") == 0o600


def test_hosts_of_an_interrupted_batch_are_aborted(callback, tmp_path):
    inv = Inventory(["h1", "h2"])
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_unreachable(result("h2", {"msg": "container gone"}))
    callback._at_exit()
    doc, _ = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert doc["run"]["result"] == "interrupted"
    assert rows["h1"]["status"] == "aborted" and rows["h2"]["status"] == "unreachable"


def test_helper_plays_add_no_hosts(callback, tmp_path):
    callback.v2_playbook_on_play_start(play(Inventory(["localhost"]), role="other"))
    callback.v2_runner_on_failed(result("localhost", {"msg": "x"}))
    assert not (tmp_path / "latest").exists()


UNIT_DRIFT = {"code": "unit.differs", "text": "unit file"}
# Worded without the usual "live:": the report knows a live finding by its code.
LIVE_DRIFT = {"code": "live.accept_length_low", "text": "accept length 1.6 below 2.5"}


def test_audit_rows_say_what_would_change(callback, tmp_path):
    inv = Inventory(["h1"])
    callback.v2_playbook_on_play_start(play(inv, sglang_audit=True))
    callback.v2_runner_on_ok(result("h1", fact("h1", mode="audit", compliant=False, restarted=False,
                                                 sha256_after="a" * 64, drift=[UNIT_DRIFT, LIVE_DRIFT])))
    callback.v2_playbook_on_stats(Stats({}))
    doc, md = read(tmp_path)
    assert doc["run"]["mode"] == "audit" and doc["run"]["result"] == "noncompliant"
    assert doc["hosts"][0]["status"] == "noncompliant" and doc["hosts"][0]["drift"] == [UNIT_DRIFT, LIVE_DRIFT]
    assert "- **h1** (noncompliant, batch 1): unit file; accept length 1.6 below 2.5" in md
    # The table's error column of a host that did not fail holds its live findings only.
    assert md.split("## Hosts", 1)[1].rstrip().splitlines()[-1].endswith("| accept length 1.6 below 2.5 |")
    assert doc["hosts"][0]["action"] == "would patch"


def test_check_mode_rows_say_would_change(callback, tmp_path):
    callback.check_mode = True
    inv = Inventory(["h1", "h2"])
    callback.v2_playbook_on_play_start(play(inv))
    # Check mode is a flag of the run, not a mode: a --check remediation's rows say remediate.
    callback.v2_runner_on_ok(result("h1", fact("h1", compliant=False, restarted=False,
                                                 restart_reasons=["unit would change"])))
    callback.v2_runner_on_ok(result("h2", fact("h2", restarted=False, restart_needed=False)))
    callback.v2_playbook_on_stats(Stats({"h1": 1}))
    doc, md = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert doc["run"]["result"] == "would change"
    assert rows["h1"]["status"] == "would change" and rows["h2"]["status"] == "ok"
    assert "would restart: unit would change" in md


@pytest.mark.parametrize("check_mode, audit, status", [(False, False, "adopted"),
                                                        (True, False, "would adopt"),
                                                        (False, True, "would adopt")])
def test_an_adopted_host_says_so_and_was_not_restarted(callback, tmp_path, check_mode, audit, status):
    callback.check_mode = check_mode
    callback.v2_playbook_on_play_start(play(Inventory(["h1", "h2"]), sglang_audit=audit))
    callback.v2_runner_on_ok(result("h1", fact("h1", adopted=True, restarted=False, restart_needed=False)))
    callback.v2_runner_on_ok(result("h2", fact("h2", restarted=False, restart_needed=False)))
    # The probe recorded the fingerprint (changed): still adopted, not "changed".
    callback.v2_playbook_on_stats(Stats({"h1": 1}))
    doc, _md = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert rows["h1"]["status"] == status and rows["h1"]["adopted"] is True and rows["h1"]["restarted"] is False
    assert rows["h2"]["status"] == "ok" and rows["h2"]["adopted"] is False
    assert doc["run"]["result"] not in ("failed", "aborted", "noncompliant")


@pytest.mark.parametrize("playbook, play_vars, extra_vars, mode", [
    ("audit.yml", {"sglang_audit": True}, {}, "audit"),
    ("rollback.yml", {"sglang_fleet_report": True, "_sglang_rollback_run": True}, {}, "rollback"),
    # The file name says nothing: the variables do (one vocabulary, module_utils/_runmode.py).
    ("audit.yml", {}, {}, "remediate"),
    ("rollback.yml", {"sglang_fleet_report": True}, {}, "remediate"),
    ("nightly-check.yml", {}, {"sglang_audit": "true"}, "audit"),
    ("site.yml", {"sglang_audit": False}, {"sglang_audit": True}, "audit"),
])
def test_the_run_mode_is_what_the_plays_variables_say(tmp_path, monkeypatch, playbook, play_vars, extra_vars, mode):
    cb = report.CallbackModule()
    monkeypatch.setattr(cb, "get_option", {"report_dir": str(tmp_path), "print_rows_max": 50, "keep": "200"}.get)
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/x/" + playbook))
    fleet = play(Inventory(["h1"]), **play_vars)
    fleet._variable_manager.extra_vars = extra_vars
    cb.v2_playbook_on_play_start(fleet)
    cb.v2_runner_on_ok(result("h1", fact("h1", mode=mode)))
    cb.v2_playbook_on_stats(Stats({}))
    doc, md = read(tmp_path)
    assert doc["run"]["mode"] == mode and doc["run"]["playbook"] == playbook and "- mode: %s;" % mode in md


def test_a_rolled_back_host_says_what_was_restored_not_patched():
    row = dict(model.new_row("gpu-1"), decision="patch", sha256_before="a" * 64, sha256_after="b" * 64,
               rolled_back=True, rollback=["/etc/systemd/system/sglang.service restored to sha256 " + "c" * 64])
    action = model.action_of(row, check_mode=False)
    assert action == "rolled back: /etc/systemd/system/sglang.service restored to sha256 " + "c" * 64
    assert model.action_of(dict(row, rollback=[]), False) == "rolled back: nothing this run had changed"
    assert model.action_of(dict(row, rolled_back=False), False) == "patched"


def test_an_unreachable_host_is_its_own_status_and_needs_attention(callback, tmp_path):
    inv = Inventory(["h1", "h2", "h3"])
    inv.batch = ["h1", "h2"]
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h1", fact("h1")))
    callback.v2_runner_on_unreachable(result(
        "h2", {"unreachable": True, "msg": "Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1"
                                           " port 32801: Connection refused"}, "Probe whether the host already runs"))
    callback.v2_playbook_on_stats(Stats({"h1": 5}))
    doc, md = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert rows["h2"]["status"] == "unreachable" and "Connection refused" in rows["h2"]["error"]
    assert rows["h2"]["failed_task"] == "Probe whether the host already runs"
    assert rows["h3"]["status"] == "not reached" and doc["run"]["result"] == "aborted"
    assert doc["counts"]["status"] == {"unreachable": 1, "not reached": 1, "changed": 1}
    attention = md.split("## Needs attention", 1)[1].split("## Hosts", 1)[0]
    assert "- **h2** (unreachable, batch 1): unreachable: Failed to connect to the host via ssh" in attention


def test_a_stopped_container_reads_unreachable_not_a_module_failure(callback, tmp_path):
    """The docker connection fails the task; the row says the container is not running."""
    inv = Inventory(["h1", "h2"])
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h1", fact("h1")))
    callback.v2_runner_on_failed(result("h2", {
        "changed": False, "rc": 1, "module_stdout": "",
        "module_stderr": "Error response from daemon: Container f32c4fb6b5d5 is not running\n",
        "msg": "Module result deserialization failed: No start of json char found"}, "Restart sglang"))
    callback.v2_playbook_on_stats(Stats({"h1": 5}))
    doc, md = read(tmp_path)
    row = {r["host"]: r for r in doc["hosts"]}["h2"]
    assert row["status"] == "unreachable" and doc["run"]["result"] == "failed"
    assert row["error"] == ("unreachable: the container is not running (docker: Error response from daemon:"
                            " Container f32c4fb6b5d5 is not running)")
    assert "deserialization" not in md and "**h2** (unreachable" in md


def test_a_module_failure_with_a_running_container_stays_failed():
    assert model.unreachable_reason({"module_stderr": "Traceback ...", "msg": "MODULE FAILURE"}) is None


def test_the_report_and_the_lease_name_the_same_run_without_a_channel(callback, tmp_path, monkeypatch):
    """Both derive the id from the ansible-playbook process (the callback's own, the workers' parent)."""
    from ansible_collections.fleetops.sglang.plugins.action import sglang_lease as lease_action

    monkeypatch.delenv("SGLANG_RUN_ID", raising=False)
    monkeypatch.setattr(lease_action.os, "getppid", os.getpid)  # as in a worker forked from this process
    holder = lease_action.controller_holder()
    assert holder["run_id"] == callback.run_id and holder["pid"] == os.getpid()
    stamp, pid = callback.run_id.rsplit("-", 1)
    assert os.path.basename(callback.run_dir) == "%s-%s-%s" % (stamp, os.path.splitext(callback.playbook)[0], pid)
    callback.v2_playbook_on_play_start(play(Inventory(["h1"])))
    callback.v2_runner_on_ok(result("h1", fact("h1")))
    callback.v2_playbook_on_stats(Stats({"h1": 1}))
    assert read(tmp_path)[0]["run"]["id"] == holder["run_id"]


@pytest.mark.parametrize("keep, left", [("3", ["20261201T000300Z-audit-4", "20261201T000200Z-audit-3"]),
                                        ("2d", ["20261201T000300Z-audit-4", "20261201T000200Z-audit-3",
                                                "20261201T000100Z-audit-2", "20261201T000000Z-audit-1"]),
                                        ("0", None)])
def test_old_run_folders_are_pruned_latest_and_strangers_never(callback, tmp_path, monkeypatch, keep, left):
    runs = tmp_path / "runs"
    old = ["20261201T00%02d00Z-audit-%d" % (i, i + 1) for i in range(4)] + ["20250101T000000Z-audit-9"]
    for name in old + ["notes", "20261201-not-a-run"]:
        (runs / name).mkdir(parents=True)
    now = report.datetime.datetime(2026, 12, 2, tzinfo=report.datetime.timezone.utc)
    monkeypatch.setattr(report.datetime, "datetime", type("D", (report.datetime.datetime,), {
        "now": classmethod(lambda cls, tz=None: now)}))
    options = {"report_dir": str(tmp_path), "print_rows_max": 50, "keep": keep}
    monkeypatch.setattr(callback, "get_option", options.get)
    callback.v2_playbook_on_play_start(play(Inventory(["h1"])))
    callback.v2_runner_on_ok(result("h1", fact("h1")))
    callback.v2_playbook_on_stats(Stats({}))
    names = sorted(p.name for p in runs.iterdir())
    mine = Path(callback.run_dir).name
    assert mine in names and (tmp_path / "latest" / "fleet.json").exists()
    assert "notes" in names and "20261201-not-a-run" in names
    kept = sorted(n for n in names if report.RUN_DIR.match(n) and n != mine)
    assert kept == sorted(old if left is None else left)


def test_a_bad_keep_prunes_nothing_and_says_so():
    assert report.parse_keep("200") == (200, None) and report.parse_keep("30d")[1].days == 30
    assert report.parse_keep("0") == (0, None) and report.parse_keep("0d") == (0, None)
    with pytest.raises(ValueError, match="neither a count"):
        report.parse_keep("a week")


def group_inventory(tmp_path, hosts, maintenance):
    """A real InventoryManager: the hosts in the group sglang, some also in sglang_maintenance, so the
    play's pattern is resolved by Ansible's own rule (plugins/plugin_utils/_hostpattern.py)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    path = tmp_path / ("inventory-%d.json" % len(list(tmp_path.glob("inventory-*.json"))))
    path.write_text(json.dumps({"sglang": {"hosts": {h: {} for h in hosts}},
                                "sglang_maintenance": {"hosts": {h: {} for h in maintenance}}}))
    return InventoryManager(loader=DataLoader(), sources=[str(path)])


def test_known_out_hosts_are_skipped_and_need_no_attention(callback, tmp_path):
    inv = group_inventory(tmp_path, ["h1", "h2", "h3", "h4"], maintenance=["h2"])
    probe = play(inv, sglang_fleet_report="pass")
    probe.hosts = filters.fleet_pattern("sglang", "h3")
    probe._variable_manager.extra_vars = {"sglang_skip_hosts": "h3"}  # -e sglang_skip_hosts=h3
    callback.v2_playbook_on_play_start(probe)
    callback.v2_runner_on_ok(result("h1", fact("h1", restarted=False, restart_needed=False)))
    callback.v2_runner_on_unreachable(result("h4", {"msg": "ssh: connect to host h4 port 22: Connection refused"}))
    callback.v2_playbook_on_stats(Stats({}))
    doc, md = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert rows["h2"]["status"] == rows["h3"]["status"] == "skipped (maintenance)"
    # Not listed: an unreachable host still needs attention.
    assert rows["h4"]["status"] == "unreachable" and doc["run"]["result"] == "failed"
    attention = md.split("## Needs attention", 1)[1].split("## Hosts", 1)[0]
    assert "h4" in attention and "h2" not in attention and "h3" not in attention
    # A user's own exclusion is not a maintenance skip.
    cb = report.CallbackModule()
    cb.get_option = {"report_dir": str(tmp_path / "own"), "print_rows_max": 50, "keep": "0"}.get
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/x/remediate.yml"))
    own = play(group_inventory(tmp_path, ["h1", "h2"], maintenance=[]), sglang_fleet_report="pass")
    own.hosts = filters.fleet_pattern("sglang:!h2")
    own._variable_manager.extra_vars = {}
    cb.v2_playbook_on_play_start(own)
    assert "h2" not in cb.rows


def test_the_fleet_pattern_leaves_the_known_out_hosts_out():
    pattern = filters.fleet_pattern
    assert pattern("sglang") == "sglang,!sglang_maintenance"
    assert pattern("sglang", ["gpu-17", "gpu-2.example.internal"]) == \
        "sglang,!sglang_maintenance,!gpu-17,!gpu-2.example.internal"
    assert pattern("canary", "gpu-1, gpu-2") == "canary,!sglang_maintenance,!gpu-1,!gpu-2"
    # Every form of the target keeps its terms (tests/test_host_patterns.py runs them against Ansible).
    assert pattern("a,b") == "a,b,!sglang_maintenance"
    assert pattern("a:&b:!c") == "a,&b,!c,!sglang_maintenance"
    assert pattern(["a", "b:c"]) == "a,b,c,!sglang_maintenance"
    for bad in (3, ["gpu 1"], [None], {"gpu-1": True}):
        with pytest.raises(Exception, match="sglang_skip_hosts="):
            pattern("sglang", bad)


def soak(hosts, passed=None, action="promoted", seconds=60):
    verdicts = dict(hosts)
    return {"ansible_facts": {"sglang_soak": {
        "seconds": str(seconds), "passed": all(v == "passed" for v in verdicts.values()) if passed is None else passed,
        "action": action, "hosts": verdicts}}}


def test_each_steps_soak_verdict_is_in_the_report_and_a_failed_one_fails_its_host(callback, tmp_path):
    inv = Inventory(["h1", "h2", "h3", "h4"])
    inv.batch = ["h1"]
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h1", fact("h1")))
    callback.v2_runner_on_ok(result("h1", soak({"h1": "passed"})))
    inv.batch = ["h2", "h3"]
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h2", fact("h2")))
    callback.v2_runner_on_ok(result("h3", fact("h3")))
    bad = "failed: live: accept length 1.6 (probe, 3 requests) below sglang_accept_length_min 2.5"
    callback.v2_runner_on_ok(result("h2", soak({"h1": "passed", "h2": bad, "h3": "passed"},
                                               action="rolled back this batch, stopped")))
    # The last play fails the host that failed its soak; the epilogue counts no batch.
    inv.batch = ["h2"]
    callback.v2_playbook_on_play_start(play(inv, role="none", sglang_fleet_report="pass"))
    callback.v2_runner_on_failed(result("h2", {"msg": "h2: the soak of 60 s after this host's step failed"},
                                        "Fail the host whose soak failed"))
    callback.v2_playbook_on_stats(Stats({"h1": 5, "h2": 5, "h3": 5}))
    doc, md = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert doc["run"]["batches"] == 2 and doc["run"]["result"] == "aborted"
    assert [(s["batch"], s["passed"], s["action"], s["seconds"]) for s in doc["run"]["soaks"]] == [
        (1, True, "promoted", 60), (2, False, "rolled back this batch, stopped", 60)]
    assert rows["h1"]["soak"] == "after batch 2: passed" and rows["h1"]["status"] == "changed"
    assert rows["h3"]["soak"] == "after batch 2: passed" and rows["h3"]["status"] == "changed"
    assert rows["h2"]["status"] == "failed" and rows["h2"]["soak"] == "after batch 2: " + bad
    assert rows["h2"]["error"] == "soak after batch 2: " + bad and rows["h2"]["failed_task"] == "soak"
    assert rows["h4"]["status"] == "not reached" and rows["h4"]["soak"] == ""
    assert "- soak after batch 1 (60 s, 1 hosts re-read): passed, promoted" in md
    assert "- soak after batch 2 (60 s, 3 hosts re-read): FAILED, rolled back this batch, stopped (failed: h2)" in md


def test_the_windows_soak_after_each_gate_is_one_line_and_its_failed_read_is_told_by_its_verdict(callback, tmp_path):
    inv = Inventory(["h1", "h2", "h3"])
    callback.v2_playbook_on_play_start(play(inv))
    bad = "failed: not healthy"
    read_task = SimpleNamespace(get_name=lambda: "Read the host again", vars={"_sglang_window": "sleep"})
    for host in ("h1", "h2", "h3"):
        callback.v2_runner_on_ok(result(host, fact(host)))
    for host in ("h1", "h3"):
        doc = soak({host: "passed"}, action="passed", seconds=3)
        doc["ansible_facts"]["sglang_soak"]["after"] = "gate"
        callback.v2_runner_on_ok(result(host, doc))
    # h2's read fails (rescued): the row waits for the verdict, which names the soak.
    callback.v2_runner_on_failed(SimpleNamespace(host=SimpleNamespace(get_name=lambda: "h2"), task=read_task,
                                                 result={"msg": "the gate's own summary", "failed": True}))
    assert callback.rows["h2"]["error"] == ""
    doc = soak({"h2": bad}, action="stopped", seconds=3)
    doc["ansible_facts"]["sglang_soak"]["after"] = "gate"
    callback.v2_runner_on_ok(result("h2", doc))
    callback.v2_runner_on_failed(result("h2", {"msg": "h2: the soak of 3 s after this host's gate failed"},
                                        "Fail the host whose soak failed"))
    callback.v2_playbook_on_stats(Stats({"h1": 5, "h2": 5, "h3": 5}))
    doc, md = read(tmp_path)
    rows = {r["host"]: r for r in doc["hosts"]}
    assert rows["h2"]["status"] == "failed" and rows["h2"]["error"] == "soak after its gate: " + bad
    assert rows["h2"]["failed_task"] == "soak"
    assert rows["h1"]["soak"] == "after its gate: passed" and rows["h1"]["status"] == "changed"
    assert [line for line in md.splitlines() if line.startswith("- soak")] == [
        "- soak after each host's gate (3 s, 3 hosts re-read): FAILED, stopped (failed: h2)"]


@pytest.mark.parametrize("value, role, part", [
    ("pass", "none", "pass"), ("Batch", "none", "batch"), (True, "none", "batch"), ("yes", "none", "batch"),
    (False, "sglang", None), (None, "fleetops.sglang.sglang", "batch"), (None, "other", None)])
def test_one_play_variable_says_how_a_play_takes_part(value, role, part):
    variables = {} if value is None else {"sglang_fleet_report": value}
    assert report.fleet_part(play(Inventory(["h1"]), role=role, **variables)) == part


def _summary(md):
    return md.split("## By status\n\n", 1)[1].split("\n\n", 1)[0].splitlines()


def test_the_markdown_has_one_line_per_status_with_its_share_and_hosts():
    rows = ([{"host": "gpu-%02d" % i, "status": "ok"} for i in range(10)]
            + [{"host": "gpu-10", "status": "failed"}, {"host": "gpu-11", "status": "changed"}])
    lines = model.status_summary(rows, running=False)
    summary = _summary("\n".join(lines) + "\n")
    # The table's order (failures first), one line per status present and none for the others.
    assert [line.split("**")[1] for line in summary] == ["failed", "changed", "ok"]
    failed, changed, ok = summary
    assert failed.endswith("**failed** 1 of 12: gpu-10") and changed.endswith("**changed** 1 of 12: gpu-11")
    # At most SUMMARY_HOSTS names, then how many more; the bar is the status's share of the fleet.
    assert ok.endswith("**ok** 10 of 12: " + ", ".join("gpu-%02d" % i for i in range(8)) + " and 2 more")
    bar = ok.split("`")[1]
    assert len(bar) == model.SUMMARY_BAR and bar.count("#") == round(model.SUMMARY_BAR * 10 / 12)
    assert failed.split("`")[1].count("#") == round(model.SUMMARY_BAR / 12)
    # A status of one host in a large fleet still shows in its bar.
    large = model.status_summary([{"host": "h%d" % i, "status": "ok" if i else "failed"} for i in range(500)], False)
    assert large[2].split("`")[1] == "#" + "." * (model.SUMMARY_BAR - 1) and "1 of 500" in large[2]


def test_the_status_summary_is_in_the_written_report_and_calls_hosts_not_reached_yet_pending(callback, tmp_path):
    inv = Inventory(["h1", "h2", "h3"])
    inv.batch = ["h1"]
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h1", fact("h1")))
    _, md = read(tmp_path)
    assert [line.split("**")[1] for line in _summary(md)] == ["pending", "ok"]
    assert md.index("## By status") < md.index("## Hosts")
    callback.v2_playbook_on_stats(Stats({"h1": 5}))
    _, md = read(tmp_path)
    assert _summary(md)[0].endswith("**not reached** 2 of 3: h2, h3")


def test_every_column_the_row_builder_makes_reaches_the_report(callback, tmp_path):
    """The callback takes the role's row as it is: a column the row builder adds is not lost on the way."""
    rows_model = importlib.import_module("ansible_collections.fleetops.sglang.plugins.plugin_utils._rows")
    built = rows_model.remediation_row(
        "h1", "0.5.9", fix={"release": "0.5.9", "decision": "patch", "compliant": True},
        gate={"status": 200, "ready": True, "healthy_after": 12.5}, restarted=True,
        live_metrics={"accept_length": 3.5, "tokens_per_s": 90.0},
        out_at="2026-12-05T10:00:00", back_at="2026-12-05T10:01:30")
    inv = Inventory(["h1"])
    inv.batch = ["h1"]
    callback.v2_playbook_on_play_start(play(inv))
    callback.v2_runner_on_ok(result("h1", {"ansible_facts": {"sglang_remediation": built}}))
    callback.v2_playbook_on_stats(Stats({"h1": 5}))
    row = read(tmp_path)[0]["hosts"][0]
    assert row["out_of_rotation_s"] == 90.0 and row["restart_to_healthy_s"] == 12.5
    # Every column both know, but those the callback derives itself (status, the live columns).
    shared = (set(built) & set(model.new_row("x"))) - {"host", "status", "live", "error", "failed_task"}
    assert {k: row[k] for k in shared} == {k: built[k] for k in shared}


def test_the_window_is_reported_with_an_estimate_from_earlier_runs_times(callback, tmp_path, capsys):
    from ansible_collections.fleetops.sglang.plugins.plugin_utils._rollout import Window
    # Two earlier runs: each host's newest time out of rotation counts (h1: 40 s, not 100 s).
    for name, times in (("20261201T000000Z-remediate-1", {"h1": 100.0, "h2": 60.0}),
                        ("20261202T000000Z-remediate-2", {"h1": 40.0, "h3": None})):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "fleet.json").write_text(json.dumps(
            {"hosts": [{"host": h, "out_of_rotation_s": t} for h, t in times.items()]}))
    assert callback.previous_times() == {"h1": 40.0, "h2": 60.0}
    inv = Inventory(["h1", "h2", "h3", "h4"])
    inv.batch = ["h1"]
    callback.v2_playbook_on_play_start(play(inv))
    rule = Window(2, canaries=["h1"], kept_out=["h4"])
    state = SimpleNamespace(doc={"size": 2, "budget": 2, "forks": 20, "hosts": 4, "canaries": ["h1"],
                                 "kept_out": ["h4"]}, rule=rule, stop_file="/x/STOP")
    callback.window_started(state)
    # 1 canary round, then 3 hosts 2 at a time: 3 rounds of the median 50 s.
    assert callback.window_estimate == {"seconds": 150.0, "median_s": 50.0, "samples": 2, "rounds": 3}
    rule.take("h1")
    rule.fail("h1")
    # A host the stopped window let through to its admission check: untouched, not reached, and why.
    inv.batch = ["h2", "h3", "h4"]
    callback.v2_playbook_on_play_start(play(inv))
    admit = result("h2", {"msg": "h2: the rollout stopped before this host started (the canary h1 failed)"},
                   "Start once the window has room, unless the rollout stopped")
    admit.task.vars = {"_sglang_window": "admit"}
    callback.v2_runner_on_failed(admit)
    doc, md = read(tmp_path)
    window = doc["run"]["window"]
    assert window["stopped"] == "the canary h1 failed" and window["failed"] == ["h1"]
    assert window["peak_out_of_rotation"] == 2 and window["not_serving"] == ["h4"]
    assert window["estimate"]["seconds"] == 150.0
    row = {r["host"]: r for r in doc["hosts"]}["h2"]
    assert row["status"] == "not reached" and "stopped before this host started" in row["error"]
    assert ("- window: 2 slot(s) out of rotation (budget 2, forks 20), 1 held from the start by hosts not serving; "
            "peak out of rotation 2; stopped: the canary h1 failed") in md
