"""What the role accepts as a target, and which ids a release can capture, from real release files."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
import zipfile

import pytest

from conftest import COLLECTIONS_PATH, HUNKS, REPO, SHAPES  # noqa: F401
import sglang_wheels

from ansible_collections.fleetops.sglang.plugins.module_utils import _modeldirs as md  # noqa: E402

# One release of every forward family and both ends of the supported range.
RELEASES = ("0.5.4.post2", "0.5.9", "0.5.13", "0.5.14", "0.5.17", "0.5.23")
TARGET = REPO / "files" / "models" / "deepseek-v3" / "config.json"


def entry_classes(version: str):
    """Names in ``EntryClass = [...]`` at the end of the release's deepseek_v2.py."""
    with zipfile.ZipFile(sglang_wheels.fetch_wheel(version)) as zf:
        source = zf.read("sglang/srt/models/deepseek_v2.py").decode("utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EntryClass" for t in node.targets):
            return tuple(elt.id for elt in node.value.elts)
    raise AssertionError("no EntryClass in %s" % version)


@pytest.mark.parametrize("version", RELEASES)
def test_accepted_architectures_are_what_deepseek_v2_registers(version):
    assert entry_classes(version) == md.DEEPSEEK_ARCHITECTURES


def write_target(tmp_path, **changes):
    config = json.loads(TARGET.read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        config.pop(key)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_deepseek_v3_target_passes(tmp_path):
    assert md.target_model_errors(write_target(tmp_path)) == []


@pytest.mark.parametrize("changes,expect", [
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, '["LlamaForCausalLM"]'),
    ({"architectures": ["Qwen3MoeForCausalLM"]}, '["Qwen3MoeForCausalLM"]'),
    ({"architectures": None}, "architectures null"),
    ({"architectures": "DeepseekV3ForCausalLM"}, 'architectures "DeepseekV3ForCausalLM"'),
    ({"model_type": "llama"}, 'model_type "llama"'),
    ({"num_hidden_layers": "61"}, "no integer num_hidden_layers"),
])
def test_other_targets_are_refused_naming_the_variable(tmp_path, changes, expect):
    (msg,) = md.target_model_errors(write_target(tmp_path, **changes))
    assert msg.startswith("sglang_model_path=%s: " % tmp_path) and expect in msg, msg
    assert "accepted: a DeepSeek target" in msg


def test_missing_or_broken_target_config(tmp_path):
    (msg,) = md.target_model_errors(str(tmp_path))
    assert "does not exist on the host" in msg
    (tmp_path / "config.json").write_text("{nope")
    (msg,) = md.target_model_errors(str(tmp_path))
    assert "is not valid JSON" in msg


@pytest.mark.parametrize("forward", [None, "L", "C", "P", "R"])
def test_the_last_layers_output_is_never_capturable(forward):
    assert SHAPES.capturable_range(forward, 61) == (-1, 59)
    assert SHAPES.capture_errors([-1, 2, 59], 61, forward, "x") == []
    (msg,) = SHAPES.capture_errors([-1, 2, 60], 61, forward, "0.5.9")
    assert "sglang_eagle3_layer_ids has [60]" in msg and "61 hidden layers" in msg and "then 0..59" in msg


def test_unknown_forward_family_is_an_error():
    with pytest.raises(ValueError):
        SHAPES.capturable_range("X", 61)


@pytest.mark.parametrize("version", RELEASES)
def test_every_release_loops_over_layers_below_num_hidden_layers(make_venv, version):
    """The range rests on the capture living in ``for i in range(start_layer, end_layer)``."""
    venv = make_venv(version)
    source = next(venv.glob("lib/python3*/site-packages/sglang/srt/models/deepseek_v2.py")).read_text()
    forward = SHAPES.detect_forward(source)
    assert forward in SHAPES.CAPTURE_FORWARDS
    segment = source[slice(*HUNKS.function_spans(source)[SHAPES.MODEL_FORWARD])]
    assert "in self.layers_to_capture" in segment
    assert "for i in range(normal_start_layer, normal_end_layer)" in segment \
        or "for i in range(self.start_layer, self.end_layer)" in segment, version


# ------------------------------------------------------------------ reading model storage as root


def _model(tmp_path, name="model"):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text('{"num_hidden_layers": 61}\n')
    return directory


def test_a_link_that_leaves_the_models_tree_is_refused_on_the_file_opened(tmp_path):
    model = _model(tmp_path)
    outside = tmp_path / "secret.json"
    outside.write_text('{"api-key": "not for the view"}\n')
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(outside)
    with pytest.raises(ValueError, match="leads to %s, outside the model's tree %s" % (outside, model)):
        md.load_json_object(str(model / "config.json"))
    # A link inside the tree is followed.
    (model / "config.json").unlink()
    (model / "real.json").write_text('{"num_hidden_layers": 3}\n')
    (model / "config.json").symlink_to("real.json")
    assert md.read_num_hidden_layers(str(model)) == 3


def test_a_hugging_face_snapshots_links_into_its_blobs_are_followed(tmp_path):
    repo = tmp_path / "hub" / "models--org--DeepSeek-V3-EAGLE3"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_text('{"num_hidden_layers": 1}\n')
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/abc123")
    assert md.model_tree(str(snapshot)) == str(repo)
    assert md.read_num_hidden_layers(str(snapshot)) == 1
    # Another repository's blobs are outside.
    other = tmp_path / "hub" / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    (other / "x").write_text("{}\n")
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to(other / "x")
    with pytest.raises(ValueError, match="outside the model's tree"):
        md.load_json_object(str(snapshot / "config.json"))


def test_a_fifo_or_a_device_is_refused_without_blocking(tmp_path):
    model = _model(tmp_path)
    (model / "config.json").unlink()
    os.mkfifo(str(model / "config.json"))
    with pytest.raises(ValueError, match="is not a regular file"):
        md.load_json_object(str(model / "config.json"))
    (model / "config.json").unlink()
    (model / "config.json").symlink_to("/dev/zero")
    with pytest.raises(ValueError, match="not a regular file|outside the model's tree"):
        md.load_json_object(str(model / "config.json"))


@pytest.mark.skipif(os.getuid() != 0, reason="only root's files are refused as root's")
def test_a_file_only_root_may_read_is_refused(tmp_path):
    model = _model(tmp_path)
    (model / "config.json").chmod(0o600)
    with pytest.raises(ValueError, match="readable by root only"):
        md.load_json_object(str(model / "config.json"))
    (model / "config.json").chmod(0o644)
    assert md.read_num_hidden_layers(str(model)) == 61


# Flip a link between two targets as fast as it can, each swap atomic (argv: link, target, target).
FLIP = """
import os, sys
link, targets = sys.argv[1], sys.argv[2:]
tmp = link + ".tmp"
while True:
    for target in targets:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(target, tmp)
        os.replace(tmp, link)
"""


def test_a_link_swapped_while_root_reads_never_yields_the_file_outside(tmp_path):
    """The swap between a check and a use: a writer flips the link between a file inside the tree and one
    outside as fast as it can; every read gives the inside file or a refusal, never the outside one."""
    model = _model(tmp_path)
    (model / "inside.json").write_text('{"num_hidden_layers": 5}\n')
    outside = tmp_path / "outside.json"
    outside.write_text('{"num_hidden_layers": 666}\n')
    link = model / "config.json"
    link.unlink()
    link.symlink_to("inside.json")
    # The writer is a process of its own (a thread would wait on the GIL while root reads).
    flipper = subprocess.Popen([sys.executable, "-c", FLIP, str(link), str(outside), "inside.json"])
    seen = {"inside": 0, "refused": 0}
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and (seen["refused"] < 50 or seen["inside"] < 50):
            try:
                value = md.read_num_hidden_layers(str(model))
            except ValueError:
                seen["refused"] += 1
                continue
            assert value == 5, "read the file outside the tree"
            seen["inside"] += 1
    finally:
        flipper.kill()
        flipper.wait()
    assert seen["refused"] > 0 and seen["inside"] > 0, seen
