"""One fleet report for a rollout run as several jobs (a canary job, the slices of AWX's sliced job):
the callback's "next stage" status and run ids, and its merge_reports (the report_merge filter,
playbooks/report_merge.yml). The runs themselves: molecule/slicing."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO
from ansible_collections.fleetops.sglang.plugins.filter.sglang import report_merge
from unit.plugins.callback.test_sglang_report import Inventory, Stats, fact, play, report, result

sys.path.insert(0, str(REPO / "molecule" / "shared"))
from scenario_helpers import awx_slices  # noqa: E402


class StageInventory(Inventory):
    """An inventory whose group sglang_next_stage the canary stage's probe pass filled."""

    def __init__(self, hosts, next_stage):
        super().__init__(hosts)
        self.groups = {"sglang_next_stage": SimpleNamespace(
            get_hosts=lambda: [SimpleNamespace(get_name=lambda n=n: n) for n in next_stage])}


def run_report(tmp_path, name, hosts, done, extra_vars, failed=(), next_stage=(), batches=None):
    """A finished run's fleet.json document: ``done`` changed, ``failed`` failed, the rest as left."""
    cb = report.CallbackModule()
    cb.get_option = {"report_dir": str(tmp_path / name), "print_rows_max": 50, "keep": "0"}.get
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/x/remediate.yml"))
    inv = StageInventory(hosts, next_stage)
    probe = play(inv, sglang_fleet_report="pass")
    probe._variable_manager.extra_vars = extra_vars
    cb.v2_playbook_on_play_start(probe)
    for batch in batches or [[h] for h in list(done) + list(failed)]:
        inv.batch = batch
        rollout = play(inv)
        rollout._variable_manager.extra_vars = extra_vars
        cb.v2_playbook_on_play_start(rollout)
        for h in batch:
            if h in failed:
                cb.v2_runner_on_failed(result(h, {"msg": "%s: sglang failed its gate" % h}, "Fail the host"))
            else:
                cb.v2_runner_on_ok(result(h, fact(h)))
    cb.v2_playbook_on_stats(Stats({h: 5 for h in done}))
    path = tmp_path / name / "latest" / "fleet.json"
    return str(path), json.loads(path.read_text())


HOSTS = ["gpu-%02d" % i for i in range(1, 13)]


# AWX's slicing rule, as the slicing scenario applies it.
slices = awx_slices


@pytest.fixture
def rollout(tmp_path):
    ids = {"sglang_rollout_id": "r1"}
    canary = run_report(tmp_path, "canary", HOSTS, ["gpu-01"], dict(ids, sglang_rollout_stage="canaries"),
                        next_stage=HOSTS[1:])
    parts = [run_report(tmp_path, "slice%d" % n, part, [h for h in part if h != "gpu-01"],
                        dict(ids, sglang_rollout_stage="after_canaries"))
             for n, part in enumerate(slices(HOSTS, 4), 1)]
    return canary, parts


def test_the_canary_job_reports_the_rest_as_next_stage_not_as_needing_attention(rollout):
    (_, canary), _ = rollout
    rows = {r["host"]: r for r in canary["hosts"]}
    assert rows["gpu-01"]["status"] == "changed"
    assert {rows[h]["status"] for h in HOSTS[1:]} == {"next stage"}
    assert canary["run"]["result"] == "complete" and canary["run"]["stage"] == "canaries"
    assert canary["run"]["rollout_id"] == "r1"


def test_awx_job_ids_name_the_rollout_when_no_rollout_id_is_given(tmp_path):
    _, doc = run_report(tmp_path, "awx", HOSTS[:2], HOSTS[:2], {"awx_workflow_job_id": 41, "awx_job_id": 43})
    assert doc["run"]["rollout_id"] == "41" and doc["run"]["job_id"] == "43" and doc["run"]["stage"] == "all"


def test_the_slices_and_the_canary_merge_into_one_report(rollout):
    canary, parts = rollout
    merged = report_merge([canary] + parts, expect_hosts=HOSTS)
    assert merged["errors"] == []
    doc = merged["report"]
    assert sorted(r["host"] for r in doc["hosts"]) == HOSTS
    assert {r["status"] for r in doc["hosts"]} == {"changed"} and doc["run"]["result"] == "complete"
    # The canary's row is the canary job's (its slice found it done).
    assert next(r for r in doc["hosts"] if r["host"] == "gpu-01")["part"] == 1
    assert [p["stage"] for p in doc["run"]["parts"]] == ["canaries"] + ["after_canaries"] * 4
    assert "part 3:" in merged["markdown"] and "**changed** 12 of 12" in merged["markdown"]
    # Each job counts its own batches: the table names the part (the canary job is part 1).
    assert "| gpu-01 | 1.1 | changed |" in merged["markdown"] and "| gpu-06 | 3.2 | changed |" in merged["markdown"]
    # The text of each fleet.json, as the playbook reads the files, merges the same.
    texts = [[p, json.dumps(d)] for p, d in [canary] + parts]
    again = report_merge(texts, expect_hosts=HOSTS)["report"]
    assert [r["status"] for r in again["hosts"]] == [r["status"] for r in doc["hosts"]]


def test_a_failed_slice_keeps_its_hosts_statuses_and_a_missing_slice_reads_not_reached(tmp_path):
    ids = {"sglang_rollout_id": "r2", "sglang_rollout_stage": "after_canaries"}
    sl = slices(HOSTS, 4)
    parts = [run_report(tmp_path, "s1", sl[0], sl[0], ids),
             run_report(tmp_path, "s2", sl[1], [], ids, failed=[sl[1][0]]),
             run_report(tmp_path, "s3", sl[2], sl[2], ids)]  # slice 4 cancelled before it started
    merged = report_merge(parts, expect_hosts=HOSTS)
    rows = {r["host"]: r for r in merged["report"]["hosts"]}
    assert rows[sl[1][0]]["status"] == "failed"
    assert {rows[h]["status"] for h in sl[1][1:]} == {"not reached"}
    assert {rows[h]["status"] for h in sl[3]} == {"not reached"}
    assert "in no job's report" in rows[sl[3][0]]["error"]
    assert merged["report"]["run"]["result"] == "aborted"
    assert "part 2:" in merged["markdown"] and "(needs attention: %s" % sl[1][0] in merged["markdown"]


def test_an_interrupted_slice_reads_aborted_not_running(tmp_path):
    path, doc = run_report(tmp_path, "s1", HOSTS[:3], HOSTS[:3], {"sglang_rollout_id": "r"})
    doc["run"]["result"] = "running"  # its controller was killed: the file as it last wrote it
    doc["hosts"][2]["status"] = "running"
    rows = report_merge([[path, doc]])["report"]["hosts"]
    assert rows[2]["status"] == "aborted" and "ended before this host finished" in rows[2]["error"]


def test_reports_of_different_rollouts_are_refused_naming_the_files(rollout, tmp_path):
    canary, parts = rollout
    other = run_report(tmp_path, "other", ["gpu-99"], ["gpu-99"], {"sglang_rollout_id": "r9"})
    errors = report_merge(parts + [other])["errors"]
    assert len(errors) == 1 and "rollout_id=r9: %s" % other[0] in errors[0] and "sglang_rollout_id" in errors[0]


def test_reports_that_name_no_rollout_are_refused(tmp_path):
    a = run_report(tmp_path, "a", ["h1"], ["h1"], {})
    b = run_report(tmp_path, "b", ["h2"], ["h2"], {})
    errors = report_merge([a, b])["errors"]
    assert len(errors) == 1 and "no report names its rollout" in errors[0]


def test_a_host_in_two_slices_is_refused(rollout, tmp_path):
    _, parts = rollout
    copy_path = str(tmp_path / "copy.json")
    errors = report_merge(parts + [[copy_path, copy.deepcopy(parts[1][1])]])["errors"]
    assert errors and all("two jobs of the stage after_canaries" in e for e in errors)
    assert parts[1][0] in errors[0] and copy_path in errors[0]


@pytest.mark.parametrize("mutate,what", [
    (lambda d: d["run"].update(mode="audit"), "different modes"),
    (lambda d: d["run"].update(check_mode=True), "different check modes"),
])
def test_an_audit_or_check_run_is_not_merged_with_a_remediation(rollout, mutate, what):
    _, parts = rollout
    odd = copy.deepcopy(parts[0][1])
    mutate(odd)
    errors = report_merge(parts[1:] + [["odd.json", odd]])["errors"]
    assert len(errors) == 1 and what in errors[0]


@pytest.mark.parametrize("part,why", [
    (["x.json", "{not json"], "x.json is not JSON"),
    (["y.json", {"hosts": []}], "y.json is not a fleet report"),
])
def test_a_file_that_is_no_fleet_report_is_refused_by_name(part, why):
    errors = report_merge([part])["errors"]
    assert len(errors) == 1 and errors[0].startswith(why)


def test_nothing_to_merge_says_what_to_give():
    assert "sglang_report_merge_sources" in report_merge([])["errors"][0]


def test_given_its_rollout_id_the_merge_keeps_that_rollouts_reports_only(rollout, tmp_path):
    canary, parts = rollout
    other = run_report(tmp_path, "other", ["gpu-99"], ["gpu-99"], {"sglang_rollout_id": "r9"})
    merged = report_merge([canary, other] + parts, rollout_id="r1")
    assert merged["errors"] == [] and len(merged["report"]["hosts"]) == 12
    assert merged["report"]["run"]["left_out"] == 1
    errors = report_merge([other], rollout_id="r1")["errors"]
    assert len(errors) == 1 and "none of the 1 reports is of the rollout sglang_rollout_id=r1" in errors[0]


def test_globs_are_read_on_the_controller_and_a_pattern_that_matches_nothing_is_named(rollout, tmp_path):
    # The callback's run folders under one report directory, as a shared SGLANG_REPORT_DIR holds them.
    merged = report_merge([str(tmp_path / "*" / "runs" / "*" / "fleet.json")], expect_hosts=HOSTS, rollout_id="r1")
    assert merged["errors"] == [] and len(merged["report"]["hosts"]) == 12
    assert len(merged["report"]["run"]["parts"]) == 5
    # Two patterns that match one file read it once.
    canary, _ = rollout
    assert len(report_merge([canary[0], canary[0]])["report"]["run"]["parts"]) == 1
    missing = str(tmp_path / "nowhere" / "*.json")
    errors = report_merge([canary[0], missing])["errors"]
    assert errors == ["no file matches %s: give the fleet.json of each job of the rollout (a path or a glob)"
                      % missing]


def test_an_awx_jobs_run_folder_names_the_job_so_equal_pids_do_not_collide(tmp_path):
    paths = [run_report(tmp_path, "shared", HOSTS[:1], HOSTS[:1], {"awx_job_id": job})[0] for job in (43, 44)]
    folders = sorted(p.name for p in (tmp_path / "shared" / "runs").iterdir())
    # Same process (same pid and start) for both: only the job id tells them apart.
    assert len(folders) == 2 and [f.split("-")[-2].split("@")[-1] for f in folders] == ["job43", "job44"]
    assert all(report.RUN_DIR.match(f) for f in folders) and paths


def test_under_ansible_runner_the_report_goes_into_the_jobs_artifacts(tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_REPORT_DIR", raising=False)
    monkeypatch.setenv("AWX_ISOLATED_DATA_DIR", str(tmp_path / "artifacts" / "job1"))
    cb = report.CallbackModule()
    cb.get_option = {"report_dir": "reports", "print_rows_max": 50, "keep": "0"}.get
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/x/remediate.yml"))
    assert cb.base_dir == str(tmp_path / "artifacts" / "job1" / "sglang")
    # SGLANG_REPORT_DIR (a directory the jobs share) wins.
    monkeypatch.setenv("SGLANG_REPORT_DIR", str(tmp_path / "shared"))
    cb = report.CallbackModule()
    cb.get_option = {"report_dir": str(tmp_path / "shared"), "print_rows_max": 50, "keep": "0"}.get
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/x/remediate.yml"))
    assert cb.base_dir == str(tmp_path / "shared")


def merge_playbook(tmp_path, extra_vars, hosts=HOSTS):
    """playbooks/report_merge.yml on the controller, over an inventory whose group sglang is ``hosts``."""
    repo = REPO
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"sglang": {"hosts": {h: None for h in hosts}}}))
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               SGLANG_REPORT_DIR=str(tmp_path / "merge-run"))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                           "-e", "ansible_python_interpreter=" + sys.executable, "-e", "@" + str(tmp_path / "vars.json"),
                           str(repo / "playbooks" / "report_merge.yml")],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)


def test_the_playbook_takes_one_glob_as_awx_example_gives_it(rollout, tmp_path):
    # examples/awx/controller.yml gives sglang_report_merge_sources as one string, a glob over the run folders.
    proc = merge_playbook(tmp_path, {"sglang_report_merge_sources": str(tmp_path / "*" / "runs" / "*" / "fleet.json"),
                                     "sglang_rollout_id": "r1"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    merged = tmp_path / "merge-run" / "merged" / "r1"
    doc = json.loads((merged / "fleet.json").read_text())
    assert len(doc["hosts"]) == 12 and doc["run"]["result"] == "complete"
    # Private, as the jobs' own reports are.
    assert [oct(p.stat().st_mode & 0o777) for p in (merged, merged / "fleet.json", merged / "fleet.md")] == [
        "0o700", "0o600", "0o600"]
    assert (tmp_path / "merge-run" / "merged" / "r1" / "fleet.md").read_text().startswith("# SGLang fleet report")


def test_the_playbook_with_nothing_to_merge_says_what_to_give(tmp_path):
    proc = merge_playbook(tmp_path, {})
    assert proc.returncode == 2 and "sglang_report_merge_sources=[]: no report to merge" in proc.stdout, proc.stdout
