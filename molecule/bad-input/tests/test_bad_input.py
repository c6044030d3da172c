"""Bad input against a converged host: every case fails, names its cause, and moves nothing.

Each case runs the converge playbook with its extra vars (as JSON, so types are
exact) and must end with rc != 0 and a failure message holding every expected
substring (the variable or file at fault). The host is snapshotted (file list with
modes, owners, sizes, mtimes; sha256 of every file the role or test bed writes;
the unit's state and start time) before and after. Cases that break the host to
get there put it back afterwards, and that is checked too.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import (  # noqa: E402
    DRAFT_CONFIG, SITE, DEEPSEEK_REL, run_playbook, snapshot, snapshot_diff, starts,
)

DRAFT_DIR = "/models/DeepSeek-V3-EAGLE3"
STASH = "/root/bad-input-stash"  # outside every watched path


@dataclass
class Case:
    name: str
    extra_vars: Dict[str, Any]
    expect: List[str]
    # Shell run on the host before the playbook, and the one that undoes it.
    breaks: Optional[str] = None
    restore: Optional[str] = None
    tags: List[str] = field(default_factory=list)


CASES = [
    Case("embedding_id_not_first", {"sglang_eagle3_layer_ids": [2, -1, 30]},
         ["sglang_eagle3_layer_ids[1] is -1", "only accepted as the first id"]),
    Case("duplicate_embedding_id", {"sglang_eagle3_layer_ids": [-1, -1, 2]},
         ["sglang_eagle3_layer_ids", "[-1, -1, 2]"]),
    Case("id_as_string", {"sglang_eagle3_layer_ids": ["2"]},
         ["sglang_eagle3_layer_ids[0] is '2' (str)"]),
    Case("id_as_bool", {"sglang_eagle3_layer_ids": [True, 2, 30]},
         ["sglang_eagle3_layer_ids[0] is True (bool)"]),
    Case("id_below_minus_one", {"sglang_eagle3_layer_ids": [-2, 2, 30]},
         ["sglang_eagle3_layer_ids[0] is -2"]),
    Case("ids_empty", {"sglang_eagle3_layer_ids": []},
         ["sglang_eagle3_layer_ids must not be empty"]),
    Case("id_beyond_target_depth", {"sglang_eagle3_layer_ids": [-1, 2, 61]},
         ["sglang_eagle3_layer_ids", "61", "61 hidden layers"]),
    Case("topk1_silently_cut_draft_tokens",
         {"sglang_speculative_num_steps": 1, "sglang_speculative_eagle_topk": 1,
          "sglang_speculative_num_draft_tokens": 16},
         ["sglang_speculative_num_draft_tokens=16", "silently set"]),
    Case("draft_tokens_beyond_tree_capacity",
         {"sglang_speculative_num_steps": 1, "sglang_speculative_eagle_topk": 4,
          "sglang_speculative_num_draft_tokens": 16},
         ["sglang_speculative_num_draft_tokens=16 exceeds the draft tree capacity 5"]),
    Case("release_without_deepseek_eagle3", {"sglang_version": "0.5.4.post1"},
         ["sglang_version=0.5.4.post1", "0.5.4.post2"]),
    Case("unknown_release_string", {"sglang_version": "0.5.9-hotfix"},
         ["sglang_version=0.5.9-hotfix", "not an SGLang release string"]),
    Case("release_as_number", {"sglang_version": 0.6},
         ["sglang_version=0.6", "quote it"]),
    Case("wheelhouse_without_pinned_version", {"sglang_version": "0.5.10"},
         ["sglang_wheelhouse=", "no wheel for sglang 0.5.10"]),
    Case("pipeline_parallelism", {"sglang_pp_size": 2},
         ["sglang_pp_size=2"]),
    Case("unknown_install_source", {"sglang_install_source": "ftp"},
         ["value of sglang_install_source must be one of: index, wheelhouse, got: ftp"]),
    Case("locally_edited_deepseek_v2", {},
         ["deepseek_v2.py", "refused", "matches neither RECORD"],
         breaks=("f=$(ls -d {site}/{rel}) && cp -p \"$f\" {stash}/deepseek_v2.py && "
                 "echo '# local hotfix' >> \"$f\"").format(site=SITE, rel=DEEPSEEK_REL, stash=STASH),
         restore="f=$(ls -d {site}/{rel}) && cp -p {stash}/deepseek_v2.py \"$f\"".format(
             site=SITE, rel=DEEPSEEK_REL, stash=STASH)),
    Case("draft_config_not_json", {},
         [DRAFT_CONFIG, "is not valid JSON"],
         breaks="cp -p {c} {s}/config.json && printf '{{not json\\n' > {c}".format(c=DRAFT_CONFIG, s=STASH),
         restore="cp -p {s}/config.json {c}".format(c=DRAFT_CONFIG, s=STASH)),
    Case("draft_directory_missing_on_host", {},
         [DRAFT_CONFIG, "does not exist"],
         breaks="mv {d} {s}/draft".format(d=DRAFT_DIR, s=STASH),
         restore="mv {s}/draft {d}".format(d=DRAFT_DIR, s=STASH)),
    Case("draft_path_variable_points_nowhere", {"sglang_draft_model_path": "/models/no-such-draft"},
         ["/models/no-such-draft/config.json does not exist"]),
]

_FATAL = re.compile(r"^(?:fatal|failed): \[[^\]]+\].*$", re.M)


def failure_text(output: str) -> str:
    """The failure lines Ansible printed, where the message must name the culprit."""
    return "\n".join(_FATAL.findall(output))


@pytest.fixture(scope="module")
def converged(host):
    """The state every case must leave behind, taken once from the converged host."""
    host.run_expect([0], "mkdir -p %s" % STASH)
    assert starts(host) == 1
    return snapshot(host)


def test_the_table_is_big_enough():
    assert len(CASES) >= 12
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_fails_naming_the_cause_and_leaves_the_host_alone(host, converged, case):
    assert snapshot_diff(converged, snapshot(host)) == [], "a previous case left the host changed"
    broken = None
    try:
        if case.breaks:
            host.run_expect([0], case.breaks)
            broken = snapshot(host)
        before = broken or converged
        run = run_playbook(extra_vars=case.extra_vars)
        fatal = failure_text(run.output)
        assert run.rc != 0, run.tail()
        assert fatal, run.tail()
        for text in case.expect:
            assert text in fatal, "%r not in the failure:\n%s" % (text, fatal)
        assert snapshot_diff(before, snapshot(host)) == []
    finally:
        if case.restore:
            host.run_expect([0], case.restore)
    assert snapshot_diff(converged, snapshot(host)) == []
    assert starts(host) == 1


def test_the_host_is_still_compliant_after_the_table(host):
    run = run_playbook()
    assert run.rc == 0 and run.changed() == 0, run.tail(120)
    assert starts(host) == 1
