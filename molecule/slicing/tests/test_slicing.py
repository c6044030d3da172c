"""AWX's job slicing, run on the test bed as AWX runs it: jobs that share nothing.

6 converged hosts (serving 0.5.9 with 15/1/16): 4 slices hold 2, 2, 1 and 1 of them (uneven, as
AWX slices most inventories), so a failing host of slice 2 has a host of its own slice to stop, and
every slice, the canary's too, has a host to restart. The tests run in file order and build on each other:

1. the canary job: remediate.yml over the whole inventory with sglang_rollout_stage=canaries
   (the flags become 7/1/8): the canary alone restarts, the 5 others read "next stage";
2. the sliced job: 4 ansible-playbook processes started together, each over the inventory AWX
   gives its slice (AWX orders the hosts by name and gives slice n of N the hosts
   [n-1::N]: awx/main/models/inventory.py, get_sliced_hosts), with
   sglang_rollout_stage=after_canaries; then playbooks/report_merge.yml over the 5 reports;
3. one unsliced run of the same fleet (back to 15/1/16) gives the same statuses;
4. the sliced job again, with one host of slice 2 failing its health gate: slice 2 stops,
   the other slices finish, and the merged report says which slice failed;
5. reports of two rollouts are not merged.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from operator_runs import Operator, server_info, sh  # noqa: E402
from scenario_helpers import PROJECT, STARTS_LOG, awx_slices  # noqa: E402

PREFIX = os.environ.get("SGLANG_TESTBED_PREFIX", "sglang")
DISTRO = os.environ.get("MOLECULE_DISTRO", "bookworm")
WORK = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "slicing"
DEMO_VARS = PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml"
DEMO = yaml.safe_load(DEMO_VARS.read_text())
REMEDIATE = PROJECT / "remediate.yml"
MERGE = PROJECT / "playbooks" / "report_merge.yml"
HOSTS = ["%s-slicing-%02d-%s" % (PREFIX, n, DISTRO) for n in range(1, 7)]
SLICES = 4
# The flags of the sliced rollouts (the converged hosts serve 15/1/16): every host needs one restart.
FLAGS_A = {"sglang_speculative_num_steps": 7, "sglang_speculative_num_draft_tokens": 8}
FAILING = HOSTS[1]  # the first host of slice 2

OPERATOR = Operator(WORK, [], callbacks="ansible.posix.profile_tasks,fleetops.sglang.sglang_report")
# What outlives the scenario's ephemeral directory: the merged reports and the wall times.
ARTIFACTS = PROJECT / ".cache" / "molecule-logs" / "slicing-artifacts"
_state: Dict[str, Any] = {}


def inventory(name: str, hosts: List[str], host_vars: Dict[str, Dict[str, Any]] = None) -> Path:
    """An inventory of ``hosts`` alone, as AWX hands a slice its part of the inventory: the group
    sglang holds only them (so sglang_max_unavailable and max-fail are the slice's)."""
    inv = WORK / "inventories" / name
    shutil.rmtree(inv, ignore_errors=True)
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "group_vars" / "sglang.yml").write_text(DEMO_VARS.read_text())
    (inv / "hosts.yml").write_text(yaml.safe_dump({"sglang": {
        "hosts": {h: None for h in hosts},
        "vars": {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3",
                 "ansible_become": False}}}))
    for host, values in (host_vars or {}).items():
        (inv / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(values))
    return inv


def start_lines() -> Dict[str, List[float]]:
    """Each host's healthy starts of the test double: their times (one line "<start> <healthy> <pid>" each)."""
    out = {}
    for h in HOSTS:
        text = sh(h, "cat %s 2>/dev/null || true" % STARTS_LOG)
        out[h] = [float(line.split()[0]) for line in text.splitlines() if line.strip()]
    return out


def new_starts(before: Dict[str, List[float]]) -> Dict[str, List[float]]:
    now = start_lines()
    return {h: now[h][len(before[h]):] for h in HOSTS}


def slice_jobs(tag: str, extra_vars: Dict[str, Any], host_vars: Dict[str, Dict[str, Any]] = None):
    """The sliced job: one ansible-playbook per slice, started together; (names, rcs, wall seconds)."""
    names, procs = [], []
    started = time.monotonic()
    for n, part in enumerate(awx_slices(HOSTS, SLICES), 1):
        name = "%s-slice%d" % (tag, n)
        inv = inventory(name, part, {h: v for h, v in (host_vars or {}).items() if h in part})
        names.append(name)
        procs.append(OPERATOR.start(name, REMEDIATE, extra_vars, args=["-i", str(inv)]))
    rcs = [p.wait(timeout=1500) for p in procs]
    return names, rcs, time.monotonic() - started


def merge(name: str, sources: List[str], dest: Path, **extra: Any):
    """playbooks/report_merge.yml over the whole inventory (the hosts the merged report must hold); what it
    wrote is kept under ARTIFACTS."""
    run = OPERATOR.run(name, MERGE, dict(extra, sglang_report_merge_sources=sources,
                                         sglang_report_merge_dest=str(dest)),
                       args=["-i", str(inventory("whole", HOSTS))])
    if dest.is_dir():
        shutil.rmtree(ARTIFACTS / dest.name, ignore_errors=True)
        shutil.copytree(dest, ARTIFACTS / dest.name)
    return run


def report_file(name: str) -> str:
    return str(WORK / "reports" / name / "latest" / "fleet.json")


def statuses(doc: Dict[str, Any]) -> Dict[str, str]:
    return {r["host"]: r["status"] for r in doc["hosts"]}


def test_awx_slices_share_no_host_and_cover_the_inventory():
    parts = awx_slices(HOSTS, SLICES)
    assert len(parts) == SLICES and sorted(h for p in parts for h in p) == sorted(HOSTS)
    assert parts[1] == [HOSTS[1], HOSTS[5]]
    # More slices than hosts: AWX runs as many slices as there are hosts.
    assert len(awx_slices(HOSTS[:3], SLICES)) == 3


def test_the_canary_job_changes_the_canary_alone():
    WORK.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    before = start_lines()
    _state["t0"] = time.monotonic()
    run = OPERATOR.run("r1-canary", REMEDIATE,
                       dict(FLAGS_A, sglang_rollout_stage="canaries", sglang_rollout_id="r1"),
                       args=["-i", str(inventory("whole", HOSTS))], env={"ANSIBLE_SHOW_CUSTOM_STATS": "1"})
    _state["canary_wall"] = time.monotonic() - _state["t0"]
    assert run.rc == 0, run.tail()
    starts = new_starts(before)
    assert len(starts[HOSTS[0]]) == 1 and all(not starts[h] for h in HOSTS[1:]), starts
    doc = OPERATOR.report("r1-canary")
    rows = statuses(doc)
    assert rows[HOSTS[0]] == "changed" and {rows[h] for h in HOSTS[1:]} == {"next stage"}, rows
    assert doc["run"]["result"] == "complete" and doc["run"]["rollout_id"] == "r1"
    assert "%d left for the next stage (sglang_rollout_stage=canaries)" % (len(HOSTS) - 1) in run.output
    # The rollout's id, handed to the workflow's next jobs (AWX passes set_stats on as extra vars).
    custom = run.output.split("CUSTOM STATS", 1)[-1]
    assert '"sglang_rollout_id": "r1"' in custom, run.tail()
    _state["canary_start"] = starts[HOSTS[0]][0]
    _state["before_slices"] = start_lines()


def test_four_slices_together_restart_each_host_once_after_the_canary():
    names, rcs, wall = slice_jobs("r1", dict(FLAGS_A, sglang_rollout_stage="after_canaries", sglang_rollout_id="r1"))
    _state["slices_wall"] = wall
    assert rcs == [0] * SLICES, [OPERATOR.log(n)[-3000:] for n, rc in zip(names, rcs) if rc]
    starts = new_starts(_state["before_slices"])
    # Exactly one restart per host that needed one; the canary was done.
    assert not starts[HOSTS[0]] and all(len(starts[h]) == 1 for h in HOSTS[1:]), starts
    assert _state["canary_start"] < min(s[0] for h, s in starts.items() if s)
    for name, part in zip(names, awx_slices(HOSTS, SLICES)):
        doc = OPERATOR.report(name)
        assert sorted(statuses(doc)) == sorted(part) and doc["run"]["stage"] == "after_canaries"
        # One canary for the whole fleet: no slice ran one of its own (batches of the slice's budget).
        assert "canaries none (sglang_rollout_stage=after_canaries)" in OPERATOR.log(name)
    for h in HOSTS:
        assert server_info(h)["speculative_num_steps"] == 7
    dest = WORK / "merged-r1"
    # As the workflow's merge job finds them: a glob over every report, the rollout's id from the canary job.
    run = merge("r1-merge", [str(WORK / "reports" / "*" / "latest" / "fleet.json")], dest, sglang_rollout_id="r1")
    assert run.rc == 0, run.tail()
    doc = json.loads((dest / "fleet.json").read_text())
    assert len(doc["hosts"]) == len(HOSTS) and set(statuses(doc).values()) == {"changed"}
    assert doc["run"]["result"] == "complete" and doc["run"]["rollout_id"] == "r1"
    assert [p["stage"] for p in doc["run"]["parts"]] == ["canaries"] + ["after_canaries"] * SLICES
    md = (dest / "fleet.md").read_text()
    assert md.count("- result: ") == 1 and "**changed** %d of %d" % (len(HOSTS), len(HOSTS)) in md
    # The canary's row is the canary job's (part 1, its batch 1).
    assert "| %s | 1.1 | changed |" % HOSTS[0] in md
    _state["merged_r1"] = doc


def test_one_unsliced_run_of_the_same_fleet_gives_the_same_statuses():
    before = start_lines()
    started = time.monotonic()
    run = OPERATOR.run("unsliced", REMEDIATE, {"sglang_max_unavailable": 4},
                       args=["-i", str(inventory("whole", HOSTS))])
    wall = time.monotonic() - started
    assert run.rc == 0, run.tail()
    assert all(len(s) == 1 for s in new_starts(before).values())
    doc = OPERATOR.report("unsliced")
    merged = _state["merged_r1"]
    assert statuses(doc) == statuses(merged)
    assert {r["host"]: r["decision"] for r in doc["hosts"]} == {r["host"]: r["decision"] for r in merged["hosts"]}
    times = {"canary job": round(_state["canary_wall"], 1), "4 slices together": round(_state["slices_wall"], 1),
             "canary job + slices": round(_state["canary_wall"] + _state["slices_wall"], 1),
             "unsliced (max_unavailable 4)": round(wall, 1)}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "times.json").write_text(json.dumps(times, indent=2) + "\n")
    print("wall seconds:", times)


def test_a_failing_host_stops_its_slice_only_and_the_merge_says_which():
    failing = {FAILING: {"sglang_health_timeout": 15, "sglang_environment": dict(
        DEMO["sglang_environment"], SGLANG_TEST_DOUBLE_FAIL_HEALTH="1")}}
    before = start_lines()
    # No lookahead: the failing host (first of its slice) is the only one that starts before it fails.
    names, rcs, _ = slice_jobs("r3", dict(FLAGS_A, sglang_rollout_stage="after_canaries", sglang_rollout_id="r3",
                                          sglang_rollout_lookahead=0), failing)
    parts = awx_slices(HOSTS, SLICES)
    assert rcs == [0, 2, 0, 0], [OPERATOR.log(n)[-3000:] for n in names]
    starts = new_starts(before)
    stopped = [h for h in parts[1] if h != FAILING]
    assert stopped and all(not starts[h] for h in stopped), (stopped, starts)
    assert all(len(starts[h]) == 1 for p in (parts[0], parts[2], parts[3]) for h in p), starts
    # The failed host is back on what it served (15 steps), and serving.
    assert server_info(FAILING)["speculative_num_steps"] == 15
    dest = WORK / "merged-r3"
    run = merge("r3-merge", [report_file(n) for n in names], dest)
    assert run.rc == 2 and "the rollout's result is aborted" in run.output, run.tail()
    assert all(h in run.output for h in parts[1]), run.tail()
    doc = json.loads((dest / "fleet.json").read_text())
    rows = statuses(doc)
    assert rows[FAILING] == "failed" and {rows[h] for h in stopped} == {"not reached"}
    assert {rows[h] for p in (parts[0], parts[2], parts[3]) for h in p} == {"changed"}
    slice2 = doc["run"]["parts"][1]
    assert slice2["result"] == "aborted" and sorted(slice2["attention"]) == sorted(parts[1])
    assert "(needs attention: " in (dest / "fleet.md").read_text()


def test_reports_of_two_rollouts_are_not_merged():
    run = merge("mixed-merge", [report_file("r1-slice1"), report_file("r3-slice3")], WORK / "merged-mixed")
    assert run.rc == 2 and "the reports are of different rollouts" in run.output, run.tail()
    assert not (WORK / "merged-mixed" / "fleet.json").exists()
