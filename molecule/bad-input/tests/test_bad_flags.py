"""Bad sglang_extra_args against a converged host, judged by the installed release's own flags.

The host runs SGLang 0.5.9 (installed --no-deps, so its server_args.py is there but
ServerArgs cannot be imported: the parse says "unavailable" and the flag table
alone must refuse). Each case must fail naming sglang_extra_args, the item and the
fix, and leave the host exactly as it was (same snapshot as tests/test_bad_input.py).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import run_playbook, snapshot, snapshot_diff, starts  # noqa: E402

CASES = {
    # The incident again, through an abbreviation: 15/1/16 would run as 2/1/3.
    "prefix_of_a_managed_flag": ({"sglang_extra_args": ["--speculative-num-st", "2"]},
                                 ["sglang_extra_args[0] is '--speculative-num-st' (an abbreviation of "
                                  "--speculative-num-steps)", "set sglang_speculative_num_steps instead"]),
    "alias_of_a_managed_flag": ({"sglang_extra_args": ["--tensor-parallel-size", "4"]},
                                ["sglang_extra_args[0] is '--tensor-parallel-size', an alias of --tp-size",
                                 "set sglang_tp_size instead"]),
    "unknown_flag": ({"sglang_extra_args": ["--log-level", "info", "--enable-metric-fancy"]},
                     ["sglang_extra_args[2] is '--enable-metric-fancy', a flag SGLang 0.5.9 does not accept"]),
    "two_batch_overlap": ({"sglang_extra_args": ["--enable-two-batch-overlap"]},
                          ["sglang_extra_args[0] is '--enable-two-batch-overlap', refused",
                           "model_forward_maybe_tbo"]),
    "ambiguous_prefix": ({"sglang_extra_args": ["--enable-dp"]},
                         ["sglang_extra_args[0] is '--enable-dp', an abbreviation that matches"]),
    # Without the probe (no fast path, no live reading) the same check runs in preflight_host.yml,
    # before the install.
    "prefix_without_the_probe": ({"sglang_fast_path": False, "sglang_live_check": False,
                                  "sglang_extra_args": ["--tp", "4"]},
                                     ["sglang_extra_args[0] is '--tp' (an abbreviation of --tp-size)"]),
}

_FATAL = re.compile(r"^(?:fatal|failed): \[[^\]]+\].*$", re.M)


@pytest.fixture(scope="module")
def converged(host):
    assert starts(host) == 1
    return snapshot(host)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_flags_fail_naming_the_item_and_leave_the_host_alone(host, converged, name):
    extra_vars, expect = CASES[name]
    run = run_playbook(extra_vars=extra_vars)
    fatal = "\n".join(_FATAL.findall(run.output))
    assert run.rc != 0 and fatal, run.tail()
    for text in expect:
        assert text in fatal, "%r not in the failure:\n%s" % (text, fatal)
    assert snapshot_diff(converged, snapshot(host)) == []
    assert starts(host) == 1

