"""bench/rollout.py's ideal schedules (issue 43): the numbers its table compares the measured rollouts with."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import rollout  # noqa: E402

DELAYS = list(rollout.DEFAULT_DELAYS)


def test_the_default_loads_are_issue_43s() -> None:
    """Canary 12, then the others in a fixed order: the sums below are taken over them."""
    assert DELAYS == [12, 30, 6, 14, 26, 8, 22, 10, 28, 18, 20, 16]
    assert sum(DELAYS[1:]) == 198
    assert rollout.DEFAULT_WINDOW == 4


def test_lower_bound_of_the_defaults() -> None:
    """12 + max(30, 198 / 4) = 61.5 s."""
    assert rollout.lower_bound(DELAYS, 4) == pytest.approx(61.5)


def test_lower_bound_is_the_longest_host_when_the_window_is_wide() -> None:
    assert rollout.lower_bound(DELAYS, 12) == pytest.approx(12 + 30)
    assert rollout.lower_bound([5], 4) == 5


def test_ideal_window_of_the_defaults() -> None:
    """From 12 s: 30, 6, 14, 26 start; 8 at 18, 22 and 10 at 26, 28 at 36, 18 at 38, 20 at 42, 16 at 48:
    the last ones end at 64 s."""
    assert rollout.ideal_window(DELAYS, 4) == pytest.approx(64)


def test_ideal_batches_of_the_defaults() -> None:
    """12, then [30, 6, 14, 26] -> 30, [8, 22, 10, 28] -> 28, [18, 20, 16] -> 20: 90 s."""
    assert rollout.ideal_batches(DELAYS, 4) == pytest.approx(90)


def test_no_schedule_beats_the_bound() -> None:
    for window in range(1, 13):
        lb = rollout.lower_bound(DELAYS, window)
        assert rollout.ideal_window(DELAYS, window) >= lb - 1e-9
        assert rollout.ideal_batches(DELAYS, window) >= rollout.ideal_window(DELAYS, window) - 1e-9


def test_one_at_a_time_is_the_sum() -> None:
    assert rollout.ideal_window(DELAYS, 1) == rollout.ideal_batches(DELAYS, 1) == sum(DELAYS)


def test_flat_loads() -> None:
    """1 s each on 12 hosts, window 4: the canary, then 3 rounds."""
    flat = [1.0] * 12
    assert rollout.ideal_window(flat, 4) == rollout.ideal_batches(flat, 4) == 4


def test_host_delays_repeat_the_list_in_order() -> None:
    assert rollout.host_delays(3, [2, 3, 1]) == [2, 3, 1]
    assert rollout.host_delays(5, [2, 3]) == [2, 3, 2, 3, 2]
    assert rollout.host_delays(2, DELAYS) == [12, 30]


def test_analysis_of_made_up_makespans() -> None:
    """The excess is what the delays add to each mode's makespan, divided by the bound."""
    makespans = {"window-delays": 100.0, "window-1s": 38.5, "batches-delays": 130.0, "batches-1s": 40.0}
    a = rollout.analysis(makespans, DELAYS, 4)
    assert a["lower_bound"] == pytest.approx(61.5)
    assert a["window"]["excess"] == pytest.approx(61.5)
    assert a["window"]["excess_over_lb"] == pytest.approx(1.0)
    assert a["batches"]["excess"] == pytest.approx(90)
    assert a["window"]["ideal"] == pytest.approx(64) and a["batches"]["ideal"] == pytest.approx(90)
    assert a["window"]["ideal_excess"] == pytest.approx(60) and a["batches"]["ideal_excess"] == pytest.approx(86)


def test_next_flags_flips_the_pair_the_hosts_run() -> None:
    """The converged hosts run FLAGS[1]; each rollout gives its hosts the other pair, and a host outside
    it keeps its own."""
    current = {"h1": 1, "h2": 1, "h3": 1, "h4": 1}
    assert rollout.next_flags(current, ["h1", "h2", "h3", "h4"]) == 0
    assert rollout.next_flags(current, ["h1", "h2"]) == 1
    assert current == {"h1": 1, "h2": 1, "h3": 0, "h4": 0}
    with pytest.raises(ValueError):
        rollout.next_flags(current, ["h1", "h2", "h3", "h4"])
    # The soak's order (half, half, all) after the four ways leaves the whole fleet on one pair.
    current = {h: 0 for h in current}
    assert rollout.next_flags(current, ["h1", "h2"]) == 1
    assert rollout.next_flags(current, ["h1", "h2"]) == 0
    assert rollout.next_flags(current, list(current)) == 1
    assert set(current.values()) == {1}


def test_soak_cost_of_made_up_makespans() -> None:
    """The soak's added wall time: with the soak minus without, at N/2 hosts and at N, and their ratio."""
    makespans = {"window-1s": 40.0, "window-1s-half": 25.0, "window-1s-half-soak": 33.0, "window-1s-soak": 49.0}
    s = rollout.soak_cost(makespans, 6, 12, 3)
    assert s["added_half"] == pytest.approx(8) and s["added_all"] == pytest.approx(9)
    assert s["ratio"] == pytest.approx(1.125) and s["meets_target"]
    assert s["target"] == rollout.SOAK_TARGET == 1.2
    assert (s["hosts_half"], s["hosts_all"], s["seconds"]) == (6, 12, 3)
    s = rollout.soak_cost(dict(makespans, **{"window-1s-soak": 52.0}), 6, 12, 3)
    assert s["ratio"] == pytest.approx(1.5) and not s["meets_target"]


def test_soak_cost_without_an_added_time_at_half_has_no_ratio() -> None:
    makespans = {"window-1s": 40.0, "window-1s-half": 25.0, "window-1s-half-soak": 24.0, "window-1s-soak": 49.0}
    s = rollout.soak_cost(makespans, 6, 12, 3)
    assert s["ratio"] is None and not s["meets_target"]


def test_the_table_prints_the_soak() -> None:
    """The soak's rows and ratio come after the ways' tables, and only when the soak was measured."""
    makespans = {"window-delays": 100.0, "window-1s": 40.0, "batches-delays": 130.0, "batches-1s": 41.0,
                 "window-1s-half": 25.0, "window-1s-half-soak": 33.0, "window-1s-soak": 49.0}
    data = {"date": "d", "commit": "c", "cores": 2, "hosts": 12, "window": 4, "forks": 20, "batches_strategy": "s",
            "delays": DELAYS, "warmups": [1.0], "analysis": rollout.analysis(makespans, DELAYS, 4),
            "runs": {name: {"makespan": makespans[name]} for name, _, _ in rollout.WAYS},
            "soak": rollout.soak_cost(makespans, 6, 12, 3), "starts": [7, 10], "problems": []}
    text = rollout.table(data)
    assert "| 6 | 25.0s | 33.0s | 8.0s |" in text and "| 12 | 40.0s | 49.0s | 9.0s |" in text
    assert "added(12) / added(6) = 1.12 (target <= 1.2: met)" in text
    assert "every soak passed" in text
    assert "soak of" not in rollout.table(dict(data, soak=None))


def test_starts_are_read_from_every_task_entry() -> None:
    """ansible.posix.json splits an ad-hoc task into one entry per host when the strategy is spelt in full
    (scripts/bench exports one): the counts of every entry are read."""
    doc = {"plays": [{"tasks": [{"hosts": {"h1": {"stdout": "8 /var/lib/sglang/starts.log"}}},
                                {"hosts": {"h2": {"stdout": "6 /var/lib/sglang/starts.log"}}}]}]}
    assert rollout.starts_from_json(doc) == {"h1": 8, "h2": 6}
    doc["plays"][0]["tasks"][1]["hosts"]["h2"] = {"msg": "unreachable"}
    with pytest.raises(RuntimeError):
        rollout.starts_from_json(doc)


def test_phases_say_where_the_makespan_goes():
    run = {"started": "2026-12-06T00:00:00+00:00", "updated": "2026-12-06T00:01:40+00:00", "hosts": {
        "c": {"left_rotation_at": "2026-12-06T00:00:20+00:00", "back_in_rotation_at": "2026-12-06T00:00:35+00:00",
              "out_of_rotation_s": 15.0},
        "a": {"left_rotation_at": "2026-12-06T00:00:40+00:00", "back_in_rotation_at": "2026-12-06T00:01:10+00:00",
              "out_of_rotation_s": 30.0},
        "b": {"left_rotation_at": "2026-12-06T00:00:45+00:00", "back_in_rotation_at": "2026-12-06T00:01:30+00:00",
              "out_of_rotation_s": 45.0}}}
    got = rollout.phases(run, {"c": 12, "a": 25, "b": 40}, "c")
    assert got == {"before_canary": 20.0, "canary_out": 15.0, "canary_to_rest": 5.0, "rest": 50.0, "after": 10.0,
                   "out_over_load": 4.3}
