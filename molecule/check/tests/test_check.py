"""Check mode tells the truth: it touches nothing, and on a converged host it reports nothing.

The tests run in file order and build on each other: fresh host, then converged.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import run_playbook, snapshot, snapshot_diff, starts  # noqa: E402


def test_bad_host_side_input_is_refused_before_a_fresh_host_is_installed(host):
    """Ids beyond the target's depth are only known from the host's model config."""
    before = snapshot(host)
    run = run_playbook(extra_vars={"sglang_eagle3_layer_ids": [-1, 2, 61]})
    assert run.rc != 0, run.tail()
    assert "61 hidden layers" in run.output, run.tail()
    assert snapshot_diff(before, snapshot(host)) == []


def test_check_diff_on_a_fresh_host_reports_the_work_and_changes_nothing(host):
    before = snapshot(host)
    assert "sglang" not in before["accounts"]  # really fresh: prepare only placed models and the double
    run = run_playbook(args=["--check", "--diff"])
    assert run.rc == 0, run.tail()
    assert run.changed() > 0, run.tail()  # a fresh host has work to do, and check mode says so
    assert "would be installed first" in run.output, run.tail()
    # Which release would be built, and where.
    assert "would: release 0.5.9-" in run.output and "is to be built in /opt/sglang/releases/0.5.9-" in run.output
    assert "--speculative-num-steps 15" in run.output  # the unit's diff is shown
    assert snapshot_diff(before, snapshot(host)) == []


def test_converge_then_check_reports_no_change(host):
    run = run_playbook()
    assert run.rc == 0 and run.failed() == 0, run.tail()
    assert starts(host) == 1
    before = snapshot(host)
    run = run_playbook(args=["--check", "--diff"])
    assert run.rc == 0, run.tail()
    assert run.changed() == 0, run.tail(120)
    assert snapshot_diff(before, snapshot(host)) == []


def test_check_with_a_pending_flag_change_reports_it_and_does_not_restart(host):
    before = snapshot(host)
    run = run_playbook(extra_vars={"sglang_speculative_num_steps": 7, "sglang_speculative_num_draft_tokens": 8},
                       args=["--check", "--diff"])
    assert run.rc == 0, run.tail()
    assert run.changed() > 0, run.tail()
    assert "would restart" in run.output, run.tail()
    assert "--speculative-num-steps 7" in run.output
    assert snapshot_diff(before, snapshot(host)) == []
    assert starts(host) == 1


def test_check_with_a_pending_upgrade_names_the_release_it_would_build_and_switch_to(host):
    before = snapshot(host)
    run = run_playbook(extra_vars={"sglang_version": "0.5.12.post1"}, args=["--check", "--diff"])
    assert run.rc == 0, run.tail()
    assert "is to be built in /opt/sglang/releases/0.5.12.post1-" in run.output, run.tail(80)
    assert "would restart" in run.output, run.tail()
    assert snapshot_diff(before, snapshot(host)) == []
    assert starts(host) == 1
