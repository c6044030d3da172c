"""Release upgrades: 0.5.9 -> 0.5.12.post1 -> 0.5.14, one restart each, then nothing.

Molecule's converge installed 0.5.9. The tests run in file order; each bumps
sglang_version and checks the file against the release's RECORD (or the patched
state), the draft's ids and what the running server reports.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import (  # noqa: E402
    SITE, assert_rerun_changes_nothing, deepseek_path, draft_ids, record_sha256, run_playbook, server_info,
    sha256, starts,
)

CUDA_GRAPH_REL = "sglang/srt/model_executor/cuda_graph_runner.py"
MODEL_RUNNER_REL = "sglang/srt/model_executor/model_runner.py"
# Pristine sglang/srt/models/deepseek_v2.py per release (sha256 of the file in each release's wheel),
# to catch a RECORD that lies.
PRISTINE = {
    "0.5.9": "4071b9a6a6ac71e1143204708df42f2ba5bd163a5d7a020579242df56e490a35",
    "0.5.12.post1": "3947d605e2ffeafb2d20baa2d87490d02a5671df0eb7bd0527ec60581580a49c",
    "0.5.14": "947fdc256101f538a668090f82e5eb5f888e2434f2bbbf69a99cdaa628cf902e",
}


def _path(host, rel: str) -> str:
    return host.check_output("ls -d %s/%s" % (SITE, rel)).strip()


def _assert_patched(host, version: str) -> None:
    path = deepseek_path(host)
    assert record_sha256(host) == PRISTINE[version]
    assert sha256(host, path) != PRISTINE[version]
    text = host.file(path).content_string
    assert "self.capture_embedding_for_eagle3 = False" in text
    assert "aux_hidden_states.append(hidden_states.clone())" in text
    assert host.run("/opt/sglang/venv/bin/python -m py_compile %s" % path).rc == 0
    # The pristine bytes were kept outside site-packages before the first write.
    backup = "/var/lib/sglang-remediation/backup/sglang-%s/sglang/srt/models/deepseek_v2.py" % version
    assert sha256(host, backup) == PRISTINE[version]


def _assert_pristine(host, rel: str) -> None:
    """As pip installed it, or absent (0.5.14 moved the CUDA-graph runner)."""
    found = host.run("ls -d %s/%s" % (SITE, rel))
    if found.rc != 0:
        assert record_sha256(host, rel) == "", rel
        return
    assert sha256(host, found.stdout.strip()) == record_sha256(host, rel), rel


def _assert_serving(host, version: str) -> None:
    info = server_info(host)
    assert info["version"] == version
    assert info["test_double"]["wiring_matches_training"], info["test_double"]
    assert info["test_double"]["decode_hidden_states"] == ["embed", "L2", "L30"]
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (15, 1, 16)


def _converge(host, version: str, expect_starts: int) -> None:
    run = run_playbook(extra_vars={"sglang_version": version})
    assert run.rc == 0 and run.failed() == 0, run.tail(120)
    assert starts(host) == expect_starts, run.tail(120)
    assert host.check_output("ls -d %s/sglang-*.dist-info" % SITE).count("dist-info") == 1


def test_059_is_patched_with_the_cuda_graph_companion(host):
    assert starts(host) == 1
    _assert_patched(host, "0.5.9")
    runner = host.file(_path(host, CUDA_GRAPH_REL)).content_string
    assert sha256(host, _path(host, CUDA_GRAPH_REL)) != record_sha256(host, CUDA_GRAPH_REL)
    assert "set_eagle3_layers_to_capture()" not in runner
    assert draft_ids(host) == [-1, 2, 30]
    _assert_serving(host, "0.5.9")


def test_upgrade_to_0512post1_repatches_without_companion_and_restarts_once(host):
    _converge(host, "0.5.12.post1", expect_starts=2)
    _assert_patched(host, "0.5.12.post1")
    _assert_pristine(host, CUDA_GRAPH_REL)
    _assert_pristine(host, MODEL_RUNNER_REL)
    assert draft_ids(host) == [-1, 2, 30]
    _assert_serving(host, "0.5.12.post1")


def test_upgrade_to_0514_needs_no_patch_and_shifts_the_ids(host):
    _converge(host, "0.5.14", expect_starts=3)
    path = deepseek_path(host)
    assert sha256(host, path) == record_sha256(host) == PRISTINE["0.5.14"]
    assert "capture_embedding_for_eagle3" not in host.file(path).content_string
    _assert_pristine(host, CUDA_GRAPH_REL)
    _assert_pristine(host, MODEL_RUNNER_REL)
    assert draft_ids(host) == [0, 3, 31]
    _assert_serving(host, "0.5.14")


@pytest.mark.parametrize("version", ["0.5.14"])
def test_rerun_changes_nothing_and_does_not_restart(host, version):
    assert_rerun_changes_nothing(host, {"sglang_version": version}, starts_so_far=3)
    _assert_serving(host, version)


def test_a_new_export_of_the_draft_is_rolled_out_once_and_the_draft_only_read(host):
    """A new export lands in the draft's own directory (a file added, a key of its config.json changed):
    the next run makes the view again (the new key, the ids the release needs, a link to the new file)
    and restarts the server once; the run after changes nothing."""
    draft = "/models/DeepSeek-V3-EAGLE3"
    host.check_output(
        "cd %s && printf '{}\\n' > special_tokens_map.json && python3 -c 'import json; p=\"config.json\";"
        " c=json.load(open(p)); c[\"rope_theta\"]=12345.0; json.dump(c, open(p, \"w\"), indent=2)'" % draft)
    exported = sha256(host, draft + "/config.json")
    run = run_playbook(extra_vars={"sglang_version": "0.5.14"})
    assert run.rc == 0, run.tail(120)
    assert starts(host) == 4
    assert sha256(host, draft + "/config.json") == exported  # read, never written
    link = host.file("/etc/sglang/sglang.draft/special_tokens_map.json")
    assert link.is_symlink and link.linked_to == draft + "/special_tokens_map.json"
    view = json.loads(host.file("/etc/sglang/sglang.draft/config.json").content_string)
    assert view["rope_theta"] == 12345.0 and draft_ids(host) == [0, 3, 31]
    _assert_serving(host, "0.5.14")
    assert_rerun_changes_nothing(host, {"sglang_version": "0.5.14"}, starts_so_far=4)
