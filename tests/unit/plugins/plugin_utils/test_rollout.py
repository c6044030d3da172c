"""The rollout's plan (plugins/plugin_utils/_rollout.py, the rollout_plan filter):
capacity-bounded batches, canaries per group, and the refusals of sglang_serial."""
import pytest

from ansible_collections.fleetops.sglang.plugins.filter.sglang import rollout_plan
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rollout as r
from ansible_collections.fleetops.sglang.plugins.plugin_utils._rollout import Window, estimate

HOSTS = ["gpu-%02d" % i for i in range(1, 21)]


def test_default_is_a_tenth_of_the_whole_fleet_not_of_the_hosts_that_need_work():
    doc = r.plan(HOSTS[:6], 20)
    assert doc["max_unavailable"] == 2 and doc["budget"] == 2
    assert doc["serial"] == [1, 2] and doc["order"] == HOSTS[:6] and doc["errors"] == []


@pytest.mark.parametrize("value,fleet,limit", [(3, 20, 3), ("3", 20, 3), ("25%", 400, 100), ("1%", 20, 1),
                                               ("100%", 5, 5)])
def test_max_unavailable_count_or_percentage_rounded_down_at_least_one(value, fleet, limit):
    assert r.plan(HOSTS[:5], fleet, max_unavailable=value)["max_unavailable"] == limit


@pytest.mark.parametrize("value", [0, "0", "-1", "ten", "150%", True, [2], 2.5])
def test_bad_max_unavailable_is_refused_naming_it(value):
    errors = r.plan(HOSTS[:5], 20, max_unavailable=value)["errors"]
    assert len(errors) == 1 and "sglang_max_unavailable=%r" % (value,) in errors[0] and "accepted" in errors[0]


@pytest.mark.parametrize("value", [[], [0], ["x"], "abc", [1, None]])
def test_bad_serial_is_refused_naming_it(value):
    errors = r.plan(HOSTS[:5], 20, serial=value)["errors"]
    assert len(errors) == 1 and errors[0].startswith("sglang_serial=")


def test_serial_alone_is_the_expert_override():
    doc = r.plan(HOSTS[:8], 8, serial=["100%"])
    assert doc["serial"] == ["100%"] and doc["errors"] == []


def test_serial_beyond_max_unavailable_is_refused_with_the_numbers():
    errors = r.plan(HOSTS[:8], 20, max_unavailable=2, serial=[1, "50%"])["errors"]
    assert len(errors) == 1
    assert "sglang_serial=[1, '50%'] would take 4 hosts out of rotation at once" in errors[0]
    assert "sglang_max_unavailable=2 (2 of the 20 hosts" in errors[0] and "lower that batch" in errors[0]
    assert r.plan(HOSTS[:8], 20, max_unavailable=2, serial=[1, 2])["errors"] == []


def test_hosts_lost_in_the_probe_pass_use_up_the_budget():
    doc = r.plan(HOSTS[:6], 20, max_unavailable=3, unavailable=["gpu-19"])
    assert doc["budget"] == 2 and doc["serial"] == [1, 2] and doc["unavailable"] == ["gpu-19"]
    full = r.plan(HOSTS[:6], 20, max_unavailable=1, unavailable=["gpu-19"])
    assert len(full["errors"]) == 1 and "1 already out" in full["errors"][0] and "gpu-19" in full["errors"][0]
    serial = r.plan(HOSTS[:6], 20, max_unavailable=3, serial=[3], unavailable=["gpu-19", "gpu-20"])
    assert "with 2 already out (gpu-19, gpu-20)" in serial["errors"][0]


def test_a_canary_per_value_first_then_the_rest_in_inventory_order():
    values = {h: ("0.5.9" if i % 3 else "0.5.14") for i, h in enumerate(HOSTS[:8])}
    doc = r.plan(HOSTS[:8], 20, max_unavailable=2, canary_values=values)
    assert doc["canaries"] == ["gpu-01", "gpu-02"]
    assert doc["order"][:2] == ["gpu-01", "gpu-02"] and sorted(doc["order"]) == HOSTS[:8]
    assert doc["order"][2:] == [h for h in HOSTS[:8] if h not in ("gpu-01", "gpu-02")]
    assert doc["serial"] == [2, 2]


def test_more_canaries_than_the_budget_run_in_several_batches():
    values = {h: h[-1] for h in HOSTS[:12]}  # ten distinct values
    doc = r.plan(HOSTS[:12], 20, max_unavailable=4, canary_values=values)
    assert len(doc["canaries"]) == 10 and doc["serial"] == [4, 4, 2, 4]
    only = r.plan(HOSTS[:3], 20, max_unavailable=4, canary_values={h: h for h in HOSTS[:3]})
    assert only["serial"] == [3] and only["order"] == HOSTS[:3]


def test_nothing_to_do_plans_no_batch():
    doc = r.plan([], 20)
    assert doc["order"] == [] and doc["errors"] == []


def test_filter_reads_the_canary_value_from_a_group_a_host_variable_or_the_release():
    needs = ["a", "b", "c", "d"]
    hostvars = {"a": {"rack": "r1", "sglang_version": "0.5.9"}, "b": {"rack": "r1", "sglang_version": "0.5.14"},
                "c": {"rack": "r2", "sglang_version": "0.5.14"}, "d": {}}
    groups = {"h100": ["c", "d"], "sglang": needs}
    assert rollout_plan(needs, needs, max_unavailable=4, canary_by="rack", hostvars=hostvars,
                        groups=groups)["canaries"] == ["a", "c", "d"]
    assert rollout_plan(needs, needs, max_unavailable=4, canary_by="h100", hostvars=hostvars,
                        groups=groups)["canaries"] == ["a", "c"]
    assert rollout_plan(needs, needs, max_unavailable=4, canary_by="release", hostvars=hostvars,
                        groups=groups)["canaries"] == ["a", "b", "d"]
    assert rollout_plan(needs, 4, canary_by="", hostvars=hostvars, groups=groups)["canaries"] == ["a"]


def test_the_rollout_play_rebuilds_the_same_plan_from_the_canaries_the_probe_pass_chose():
    needs = ["a", "b", "c", "d", "e"]
    hostvars = {h: {"sglang_version": "0.5.14" if h in ("c", "e") else "0.5.9"} for h in needs}
    probe = rollout_plan(needs, 10, max_unavailable=2, canary_by="release", hostvars=hostvars, groups={})
    assert probe["order"] == ["a", "c", "b", "d", "e"] and probe["serial"] == [2, 2]
    # Play level: no hostvars, the order and canaries handed over in groups.
    play = rollout_plan(probe["order"], 10, max_unavailable=2, canaries=probe["canaries"])
    assert (play["order"], play["serial"], play["canaries"]) == (probe["order"], probe["serial"], probe["canaries"])
    # No canaries handed over (playbooks/rollback.yml): the first host.
    assert rollout_plan(needs, 10, canaries=[])["canaries"] == ["a"]


def _add_hosts(handover):
    """The inventory groups that tasks/rollout_plan.yml's add_host loop makes of a plan's handover."""
    groups = {}
    for host, names in handover.items():
        for name in names:
            groups.setdefault(name, []).append(host)
    return groups


@pytest.mark.parametrize("kw", [
    dict(max_unavailable=2, canary_by="release"),
    dict(max_unavailable=3, canary_by="release", unavailable=["z"]),
    dict(serial=[1, "50%"]),
    dict(max_unavailable=2, canary_by="release", stage="canaries"),
    dict(max_unavailable=2, stage="after_canaries"),
])
def test_the_plan_handed_over_in_groups_is_the_plan_the_probe_pass_made(kw):
    needs = ["a", "b", "c", "d", "e"]
    hostvars = {h: {"sglang_version": "0.5.14" if h in ("c", "e") else "0.5.9"} for h in needs}
    probe = rollout_plan(needs, 10, hostvars=hostvars, groups={}, **kw)
    assert probe["errors"] == []
    groups = dict(_add_hosts(probe["handover"]), sglang=needs + ["z"], all=needs + ["z"])
    play = rollout_plan(groups, 10, handed_over=True, **{k: v for k, v in kw.items()
                                                         if k in ("max_unavailable", "serial", "stage")})
    for key in ("order", "serial", "canaries", "unavailable", "max_unavailable", "budget"):
        assert play[key] == probe[key], key
    # Only the probe pass's lists travel, each in its one group (the names are _rollout's).
    assert set(groups) - {"sglang", "all"} <= set(dict(r.HANDOVER).values())
    assert groups.get(r.NEXT_STAGE_GROUP, []) == probe["next_stage"]


def test_a_refused_plan_hands_nothing_over():
    refused = rollout_plan(["a", "b"], 2, max_unavailable="lots")
    assert refused["errors"] and refused["handover"] == {}


def test_the_handover_groups_are_named_in_one_place():
    import pathlib
    repo = pathlib.Path(r.__file__).resolve().parents[2]
    assert (repo / "roles" / "sglang" / "tasks" / "rollout_plan.yml").exists(), repo
    names = [group for _key, group in r.HANDOVER]
    for path in [*repo.glob("playbooks/*.yml"), *repo.glob("roles/sglang/tasks/*.yml"),
                 *repo.glob("plugins/**/*.py")]:
        if path.name == "_rollout.py":
            continue
        text = path.read_text()
        assert not [n for n in names if n in text], path


@pytest.mark.parametrize("seconds,action,bad", [
    (0, None, []), ("300", "rollback", []), (300, "stop", []),
    ("5m", None, ["sglang_soak_seconds='5m'"]), (-1, None, ["sglang_soak_seconds=-1"]),
    (60, "pause", ["sglang_on_soak_failure='pause'"])])
def test_soak_settings_are_refused_naming_the_variable(seconds, action, bad):
    errors = r.plan(HOSTS[:3], 10, soak_seconds=seconds, on_soak_failure=action)["errors"]
    assert [e.split(" is not")[0] for e in errors] == bad


@pytest.mark.parametrize("res,verdict", [
    ({"ready": True, "failures": []}, "passed"),
    ({"ready": True, "failures": [{"code": "live.accept_length_low", "text": "accepts 1.6 tokens, below 2.5"}]},
     "failed: accepts 1.6 tokens, below 2.5"),
    ({"ready": False, "msg": "http://127.0.0.1:30000/health_generate not healthy after 30 polls"},
     "failed: http://127.0.0.1:30000/health_generate not healthy after 30 polls"),
    ({"failed": True, "msg": "live request 1 of 3 failed: timed out"}, "failed: live request 1 of 3 failed: timed out"),
    ({"unreachable": True, "msg": "ssh: connection refused"}, "failed: unreachable: ssh: connection refused"),
])
def test_a_soak_read_is_passed_only_when_healthy_and_without_failures(res, verdict):
    assert r.soak_verdict(res) == verdict


# --- sglang_rollout_stage: a rollout over several jobs (a canary job, then AWX's sliced job) ---------------


def test_the_canary_stage_plans_the_canaries_only_and_hands_the_rest_on():
    values = {h: ("a" if i < 10 else "b") for i, h in enumerate(HOSTS)}
    doc = r.plan(HOSTS, 20, canary_values=values, stage="canaries")
    assert doc["order"] == doc["canaries"] == ["gpu-01", "gpu-11"] and doc["serial"] == [2]
    assert doc["next_stage"] == [h for h in HOSTS if h not in ("gpu-01", "gpu-11")] and doc["errors"] == []


def test_after_the_canaries_a_job_has_no_canary_of_its_own():
    # The rollout play re-plans from the groups the probe pass filled: no canary there either.
    for canaries in (None, ["gpu-03"]):
        doc = r.plan(HOSTS[:6], 20, stage="after_canaries", canaries=canaries)
        assert doc["canaries"] == [] and doc["order"] == HOSTS[:6] and doc["serial"] == [2]
        assert doc["next_stage"] == []


def test_all_is_both_stages_as_before():
    assert r.plan(HOSTS[:6], 20, stage="all") == dict(r.plan(HOSTS[:6], 20), stage="all")
    assert r.plan(HOSTS[:6], 20)["stage"] == "all"


@pytest.mark.parametrize("value", ["canary", "ALL", "", 1, ["canaries"]])
def test_a_bad_stage_is_refused_naming_it(value):
    errors = rollout_plan(HOSTS[:3], HOSTS, stage=value)["errors"]
    if value == "":
        assert errors == []  # unset, as an empty extra var reads
    else:
        assert len(errors) == 1 and errors[0].startswith("sglang_rollout_stage=%r" % (value,))
        assert "after_canaries" in errors[0]


# --- the sliding window (plugins/strategy/window.py hands out Window's slots) ---------------------

def test_the_window_is_the_default_and_serial_chooses_batches():
    window = rollout_plan(HOSTS[:10], HOSTS[:10], max_unavailable=3)
    assert window["mode"] == "window"
    assert window["window"]["size"] == 3 and window["window"]["serial"] == [1, 9]
    assert rollout_plan(HOSTS[:10], HOSTS[:10], serial=[1, 3])["mode"] == "batches"


def test_the_forks_bound_the_window():
    doc = rollout_plan(HOSTS[:40], HOSTS[:40], max_unavailable=20, forks=8)["window"]
    assert (doc["size"], doc["budget"], doc["forks"]) == (8, 20, 8)
    assert rollout_plan(HOSTS[:40], HOSTS[:40], max_unavailable=4, forks=8)["window"]["size"] == 4


def test_canaries_beyond_the_window_are_their_own_batches_then_everyone_else():
    hostvars = {h: {"rack": h} for h in HOSTS[:12]}
    doc = rollout_plan(HOSTS[:12], HOSTS[:12], max_unavailable=2, canary_by="rack", hostvars=hostvars)
    # Twelve canaries (one per rack) in batches of the window, nobody else.
    assert doc["window"]["serial"] == [2] * 6
    doc = rollout_plan(HOSTS[:12], HOSTS[:12], max_unavailable=2, stage="after_canaries")
    assert doc["window"]["serial"] == [12] and doc["window"]["canaries"] == []


@pytest.mark.parametrize("pct, hosts, allowed", [(None, 10, 0), (0, 10, 0), (10, 10, 1), (25, 10, 2), (100, 3, 3)])
def test_the_failure_limit_as_ansible_reads_max_fail_percentage(pct, hosts, allowed):
    doc = rollout_plan(HOSTS[:hosts], HOSTS[:hosts], max_fail_percentage=pct)
    assert doc["window"]["max_failures"] == allowed


@pytest.mark.parametrize("kw, name", [({"max_fail_percentage": "lots"}, "sglang_max_fail_percentage"),
                                      ({"max_fail_percentage": 101}, "sglang_max_fail_percentage"),
                                      ({"lookahead": "10%"}, "sglang_rollout_lookahead"),
                                      ({"lookahead": -1}, "sglang_rollout_lookahead")])
def test_bad_window_settings_are_refused_naming_the_variable(kw, name):
    errors = rollout_plan(HOSTS[:4], HOSTS[:4], **kw)["errors"]
    assert len(errors) == 1 and errors[0].startswith(name), errors


def test_the_lookahead_defaults_to_the_window():
    assert rollout_plan(HOSTS[:10], HOSTS[:10], max_unavailable=3)["window"]["lookahead"] == 3
    assert rollout_plan(HOSTS[:10], HOSTS[:10], max_unavailable=3, lookahead=0)["window"]["lookahead"] == 0


def test_window_slots_free_when_a_host_is_back_and_stay_taken_when_kept_out():
    w = Window(2, max_failures=1, lookahead=1)
    assert w.may_admit()
    w.admit("a"), w.admit("b")
    assert w.may_admit() is True  # 2 slots free + 1 ahead: a third may prepare
    w.admit("c")
    assert not w.may_admit()
    assert w.take("a") and w.take("b")
    assert not w.may_take("c") and w.free() == 0
    w.back("a")
    assert w.may_take("c") and w.take("c")
    w.keep_out("b")
    assert w.in_use() == 2 and not w.may_take("d")
    w.back("c")
    assert w.in_use() == 1 and w.peak == 2


def test_window_stops_over_the_failure_limit_on_a_canary_or_when_full_of_hosts_kept_out():
    w = Window(3, max_failures=1, canaries=["k"])
    w.fail("a")
    assert w.stopped is None
    w.fail("a")
    assert w.stopped is None  # one host counted once
    w.fail("b")
    assert "2 hosts failed (a, b)" in w.stopped
    # Stopped: new work is told so (no slot), a put-back still gets one.
    assert w.may_take("c") and not w.take("c")
    assert w.take("d", putback=True)
    w2 = Window(3, max_failures=10, canaries=["k"])
    w2.fail("k")
    assert w2.stopped == "the canary k failed"
    w3 = Window(2)
    w3.take("a"), w3.take("b")
    w3.keep_out("a")
    assert w3.stopped is None
    w3.keep_out("b")
    assert "fill the window of 2" in w3.stopped


def test_a_replicas_nodes_share_one_slot_one_admission_and_one_failure():
    units = {"a0": "a", "a1": "a", "b0": "b", "b1": "b"}
    w = Window(1, max_failures=0, lookahead=0, units=units)
    assert w.may_admit("a0")
    w.admit("a0")
    # The other node of a is part of the admitted unit; b is not, with one slot and no lookahead.
    assert w.may_admit("a1") and not w.may_admit("b0")
    w.admit("a1")
    assert w.take("a0") and w.may_take("a1") and w.take("a1")
    assert w.in_use() == 1 and not w.may_take("b0") and not w.may_take("s")
    w.back("a0")
    # The slot frees when the last node is back.
    assert w.in_use() == 1 and not w.may_take("b0")
    w.back("a1")
    assert w.in_use() == 0 and w.may_take("b0") and w.peak == 1
    # Both nodes of b failing count one failure: the limit of 0 stops at the first.
    w.fail("b0")
    assert w.stopped == "1 hosts failed (b), more than sglang_max_fail_percentage allows (0)"
    w2 = Window(2, max_failures=5, canaries=["a0", "a1"], units=units)
    w2.fail("a1")
    assert w2.stopped == "the canary a failed"
    w3 = Window(2, kept_out=["b1"], units=units)
    assert w3.in_use() == 1 and w3.may_admit("b0") and w3.may_take("b0")


def test_the_estimate_runs_the_canaries_then_rounds_of_the_window():
    assert estimate([], 10, 2) is None
    doc = estimate([100, 300, 200], 10, 3, canaries=1)
    # 1 canary round, then 9 hosts 3 at a time: 4 rounds of the median 200 s.
    assert doc == {"seconds": 800.0, "median_s": 200.0, "samples": 3, "rounds": 4}
    assert estimate([60, 120], 4, 4, canaries=0)["seconds"] == 90.0


def test_hosts_not_serving_hold_slots_and_one_that_needs_work_keeps_its_own():
    doc = rollout_plan(HOSTS[:3], HOSTS[:10], max_unavailable=2, not_serving=[HOSTS[1], HOSTS[5]])
    assert doc["errors"] == [] and doc["window"]["kept_out"] == [HOSTS[1], HOSTS[5]]
    w = Window(2, lookahead=0, kept_out=doc["window"]["kept_out"])
    assert w.free() == 0
    # The host that needs work and serves nothing starts at once and leaves on its own slot.
    assert w.may_admit(HOSTS[1]) and not w.may_admit(HOSTS[2]) and w.may_take(HOSTS[1])
    assert w.take(HOSTS[1]) and w.in_use() == 2
    w.back(HOSTS[1])
    assert w.free() == 1 and w.may_take(HOSTS[2])
    refused = rollout_plan(HOSTS[:3], HOSTS[:10], max_unavailable=2, not_serving=[HOSTS[5], HOSTS[6]])
    assert refused["errors"][0].startswith("the window of 2 (sglang_max_unavailable"), refused["errors"]
    assert "%s, %s" % (HOSTS[5], HOSTS[6]) in refused["errors"][0]


def test_a_skipped_take_keeps_a_slot_the_host_holds():
    # An undo passes the transaction's take skipped: the slot its run took stays until it is back.
    w = Window(1)
    w.admit("a")
    assert w.take("a")
    w.skip("a")
    assert w.holds("a") and w.free() == 0
    w.admit("b")
    w.skip("b")
    assert w.ahead == set()
    w.back("a")
    assert w.free() == 1


def test_the_rollback_plans_batches_without_serial():
    doc = rollout_plan(HOSTS[:5], HOSTS[:5], max_unavailable=2, canaries=[], mode="batches")
    assert doc["mode"] == "batches" and doc["serial"] == [1, 2]


# Two replicas of two nodes (a, b), one of three (c), and single-node hosts s1 s2 s3, in inventory order.
UNITS = {"a0": "a", "a1": "a", "b0": "b", "b1": "b", "s1": "s1", "c0": "c", "c1": "c", "c2": "c", "s2": "s2",
         "s3": "s3"}


def test_the_plan_counts_replicas_and_keeps_each_ones_nodes_together():
    # Only a1 and c2 of their replicas need work: the whole replica goes.
    doc = r.plan(["a1", "b0", "b1", "s1", "c2", "s2"], 7, max_unavailable=2, units=UNITS)
    assert doc["errors"] == []
    assert doc["order"] == ["a0", "a1", "b0", "b1", "s1", "c0", "c1", "c2", "s2"]
    # The canary is a replica; the budget (2 of 7 units) counts replicas.
    assert doc["canaries"] == ["a0", "a1"] and doc["budget"] == 2
    assert doc["window"]["serial"] == [2, 7] and doc["window"]["size"] == 2
    assert doc["window"]["units"] == {"a0": "a", "a1": "a", "b0": "b", "b1": "b", "c0": "c", "c1": "c", "c2": "c"}
    # In batches: the canary replica, then two units per batch, as hosts.
    batches = r.plan(["a1", "b0", "b1", "s1", "c2", "s2"], 7, max_unavailable=2, units=UNITS, mode="batches")
    assert batches["serial"] == [2, 3, 4]


def test_the_plan_over_replicas_picks_one_canary_replica_per_value_and_counts_failures_in_replicas():
    values = {"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2", "s1": "r1"}
    doc = r.plan(["a0", "a1", "b0", "b1", "s1"], 3, max_unavailable=3, units=UNITS, canary_values=values,
                 max_fail_percentage=50)
    assert doc["canaries"] == ["a0", "a1", "b0", "b1"] and doc["window"]["serial"] == [4, 1]
    # 50 % of 3 units: one may fail.
    assert doc["window"]["max_failures"] == 1


def test_a_serial_in_hosts_is_refused_with_replicas_and_lost_or_idle_nodes_count_their_replica():
    errors = r.plan(["a0", "a1", "s1"], 7, serial=[1, 2], units=UNITS)["errors"]
    assert errors and "would split a replica (a, b, c)" in errors[0] and "sglang_serial" in errors[0]
    doc = r.plan(["a0", "a1", "s1", "s2"], 7, max_unavailable=2, units=UNITS, unavailable=["b1"],
                 not_serving=["c0"])
    # b is lost (one unit of the budget of 2), c is out of rotation already.
    assert doc["budget"] == 1 and doc["unavailable"] == ["b0", "b1"]
    assert doc["window"]["kept_out"] == ["c0", "c1", "c2"]


def _replicas(hosts_vars):
    from ansible_collections.fleetops.sglang.plugins.filter.sglang import replicas
    return replicas(list(hosts_vars), hosts_vars, fleet=list(hosts_vars))


REPLICA_FLEET = {
    "a0": {"sglang_replica": "r-1.x", "sglang_nnodes": 2, "sglang_node_rank": 0},
    "a1": {"sglang_replica": "r-1.x", "sglang_nnodes": 2, "sglang_node_rank": 1},
    "b0": {"sglang_replica": "r_1_x", "sglang_nnodes": 2, "sglang_node_rank": 0},
    "b1": {"sglang_replica": "r_1_x", "sglang_nnodes": 2, "sglang_node_rank": 1},
    "solo": {},
}


def test_the_replicas_travel_to_the_rollout_play_and_the_plan_counts_them():
    found = _replicas(REPLICA_FLEET)
    assert found["errors"] == []
    assert found["nodes"]["a1"] == {"replica": "r-1.x", "rank": 1, "nnodes": 2, "leader": "a0",
                                    "nodes": ["a0", "a1"], "dist_init_addr": "a0:5000"}
    hosts = list(REPLICA_FLEET)
    probe = rollout_plan(hosts, hosts, max_unavailable=1, replicas=found)
    assert probe["errors"] == [] and probe["canaries"] == ["a0", "a1"]
    # The budget counts 3 replicas (1 of them a host): a window of 1 replica, two nodes out under it.
    assert probe["window"]["size"] == 1 and probe["window"]["units"]["b1"] == "r_1_x"
    groups = dict(_add_hosts(probe["handover"]), sglang=hosts, all=hosts)
    # Two names that differ only where a group name could not keep them apart get groups of their own.
    assert {g for g in groups if g.startswith(r.UNIT_GROUP_PREFIX)} == {
        r.unit_group("r-1.x"), r.unit_group("r_1_x")} and len({r.unit_group("r-1.x"), r.unit_group("r_1_x")}) == 2
    play = rollout_plan(groups, hosts, max_unavailable=1, handed_over=True)
    for key in ("order", "serial", "canaries", "budget"):
        assert play[key] == probe[key], key
    assert play["window"]["units"] == probe["window"]["units"]


def test_a_replicas_errors_and_a_soak_rollback_refuse_the_plan():
    bad = dict(REPLICA_FLEET, a1=dict(REPLICA_FLEET["a1"], sglang_node_rank=0))
    found = _replicas(bad)
    plan = rollout_plan(list(bad), list(bad), replicas=found)
    assert any("rank 0 is given to a0 and a1" in e for e in plan["errors"]) and plan["handover"] == {}
    plan = rollout_plan(list(REPLICA_FLEET), list(REPLICA_FLEET), replicas=_replicas(REPLICA_FLEET),
                        soak_seconds=60, on_soak_failure="rollback")
    assert plan["errors"] == [
        "sglang_on_soak_failure=rollback: a failed soak rolls back the host it read, and the replicas of this "
        "inventory (r-1.x, r_1_x) would need every node rolled back together, which the soak does not do yet; use "
        "sglang_on_soak_failure=stop (the default); rolling a replica back is not served yet (playbooks/rollback.yml "
        "refuses its nodes)"]
