"""Behaviour of plugins/module_utils/_speculative.py, _modeldirs.py and _draftconfig.py on real-shaped inputs."""

from __future__ import annotations

import ast
import json
import os
import shutil
import struct
import sys

import pytest

from conftest import REPO

ROOT = str(REPO)
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
FIXTURES = os.path.join(ROOT, "files", "models")
sys.path.insert(0, MODULE_UTILS)

import _speculative as ss  # noqa: E402
import _draftconfig as dc  # noqa: E402
import _modeldirs as md  # noqa: E402
from safetensors_fixture import DEEPSEEK_V3_EAGLE3_TENSORS, write_safetensors  # noqa: E402

TARGET = os.path.join(FIXTURES, "deepseek-v3")
DRAFT = os.path.join(FIXTURES, "deepseek-v3-eagle3")


@pytest.fixture
def draft_dir(tmp_path):
    """The fixture draft plus a sparse model.safetensors declaring fc.weight [7168, 21504]."""
    d = tmp_path / "draft"
    d.mkdir()
    shutil.copy(os.path.join(DRAFT, "config.json"), str(d / "config.json"))
    write_safetensors(str(d / "model.safetensors"), DEEPSEEK_V3_EAGLE3_TENSORS)
    return str(d)


# --------------------------------------------------------------------------- #
# Hosts run Debian python3 3.9+: the module_utils must parse there.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("name", ["_speculative", "_modeldirs", "_draftconfig"])
def test_module_utils_is_python39_syntax_and_imports_no_ansible(name):
    """Standard library only, and the collection's own module_utils (which obey the same rule)."""
    src = open(os.path.join(MODULE_UTILS, name + ".py")).read()
    tree = ast.parse(src, feature_version=(3, 9))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    own = {m for m in imported if m.startswith("ansible_collections.fleetops.sglang.plugins.module_utils.")}
    assert {m.split(".")[0] for m in imported - own} <= set(sys.stdlib_module_names) | {"__future__"}


# --------------------------------------------------------------------------- #
# validate_speculative
# --------------------------------------------------------------------------- #


def test_incident_triple_is_refused_with_what_sglang_would_do():
    errors = ss.validate_speculative(1, 1, 16)
    assert len(errors) == 1
    assert "SGLang would silently set --speculative-num-draft-tokens to 2" in errors[0]
    # The fix is spelled out: either value that makes the triple consistent.
    assert "sglang_speculative_num_draft_tokens to 2" in errors[0]
    assert "sglang_speculative_num_steps to 15" in errors[0]


def test_fixed_triple_is_accepted():
    assert ss.validate_speculative(15, 1, 16) == []


def test_none_given_is_accepted_sglang_auto_chooses():
    assert ss.validate_speculative(None, None, None) == []


@pytest.mark.parametrize(
    "triple, missing",
    [
        ((15, 1, None), ["sglang_speculative_num_draft_tokens"]),
        ((None, 1, 16), ["sglang_speculative_num_steps"]),
        ((15, None, None), ["sglang_speculative_eagle_topk", "sglang_speculative_num_draft_tokens"]),
    ],
)
def test_partial_triple_names_what_is_missing(triple, missing):
    errors = ss.validate_speculative(*triple)
    assert len(errors) == 1
    tail = errors[0].split(" or none: ")[1]
    for name in missing:
        assert name in tail
    present = {"sglang_speculative_" + k for k in ("num_steps", "eagle_topk", "num_draft_tokens")} - set(missing)
    for name in present:
        assert name not in tail


@pytest.mark.parametrize("bad", [0, -3, "16", 16.0, True])
def test_non_positive_or_non_int_values_are_refused(bad):
    errors = ss.validate_speculative(15, 1, bad)
    assert errors and "sglang_speculative_num_draft_tokens" in errors[0]
    assert "positive int" in errors[0]


def test_topk2_capacity():
    # 1 + 2 + (3-1)*4 = 11 tokens fit in a 3-step, topk-2 tree.
    assert ss.draft_tree_capacity(3, 2) == 11
    assert ss.validate_speculative(3, 2, 11) == []
    errors = ss.validate_speculative(3, 2, 12)
    assert len(errors) == 1 and "capacity 11" in errors[0]
    # One step of topk 2 holds the root and two children only.
    assert "capacity 3" in ss.validate_speculative(1, 2, 4)[0]


def test_topk_above_one_is_not_rewritten_so_fewer_tokens_are_fine():
    assert ss.validate_speculative(5, 4, 8) == []


# --------------------------------------------------------------------------- #
# validate_layer_ids
# --------------------------------------------------------------------------- #


def test_incident_fix_ids_accepted_against_deepseek_v3():
    n = md.read_num_hidden_layers(TARGET)
    assert n == 61
    assert ss.validate_layer_ids([-1, 2, 30], n, 3) == []
    assert ss.validate_layer_ids([0, 3, 31], n, 3) == []


def test_not_ascending_is_refused_with_sorted_suggestion():
    errors = ss.validate_layer_ids([2, -1, 30], 61)
    joined = " | ".join(errors)
    assert "sglang_eagle3_layer_ids" in joined
    assert "-1 (the embedding output) is only accepted as the first id" in joined
    assert "ascending" in joined and "[-1, 2, 30]" in joined


def test_duplicate_minus_one_is_refused():
    errors = ss.validate_layer_ids([-1, -1, 2], 61)
    joined = " | ".join(errors)
    assert "sglang_eagle3_layer_ids[1] is -1" in joined
    assert "duplicate ids [-1]" in joined


def test_string_id_is_refused_not_converted():
    errors = ss.validate_layer_ids(["2"])
    assert errors == [
        "sglang_eagle3_layer_ids[0] is '2' (str); every id must be an int (a layer "
        "index, or -1 first for the embedding output), e.g. [2]"
    ]


def test_bool_id_is_refused():
    errors = ss.validate_layer_ids([True])
    assert len(errors) == 1 and "True (bool)" in errors[0]


def test_float_id_is_refused():
    assert "2.0 (float)" in ss.validate_layer_ids([-1, 2.0, 30])[0]


def test_id_beyond_target_depth_is_refused():
    errors = ss.validate_layer_ids([-1, 2, 61], 61)
    assert len(errors) == 1
    assert "[61]" in errors[0] and "61 hidden layers" in errors[0] and "0..60" in errors[0]


def test_other_negative_ids_are_refused():
    errors = ss.validate_layer_ids([-2, 2, 30])
    assert "the only negative id accepted is -1" in errors[0]


@pytest.mark.parametrize("bad", [[], "2,30", None, 3])
def test_non_list_or_empty_is_refused(bad):
    errors = ss.validate_layer_ids(bad, var="my_var")
    assert len(errors) == 1 and errors[0].startswith("my_var must")


def test_count_mismatch_against_safetensors(draft_dir):
    count = md.expected_id_count_from_draft(draft_dir)
    assert count == 3
    errors = ss.validate_layer_ids([-1, 30], 61, count)
    assert len(errors) == 1
    assert "has 2 ids [-1, 30]" in errors[0] and "give exactly 3 ids" in errors[0]


# --------------------------------------------------------------------------- #
# Model directories
# --------------------------------------------------------------------------- #


def test_read_num_hidden_layers_variants(tmp_path):
    assert md.read_num_hidden_layers(str(tmp_path)) is None  # no config.json
    assert md.read_num_hidden_layers("deepseek-ai/DeepSeek-V3") is None  # hub id
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 48}}))
    assert md.read_num_hidden_layers(str(tmp_path)) == 48
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        md.read_num_hidden_layers(str(tmp_path))


def test_safetensors_header_parse_reads_only_the_header(draft_dir, monkeypatch):
    path = os.path.join(draft_dir, "model.safetensors")
    assert os.path.getsize(path) > 700 * 1024 * 1024  # declared data: ~770 MB, sparse
    read_total = []
    real_open = open

    class Spy:
        def __init__(self, handle):
            self.handle = handle

        def read(self, n=-1):
            assert n >= 0, "never read to EOF"
            data = self.handle.read(n)
            read_total.append(len(data))
            return data

        def fileno(self):
            return self.handle.fileno()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    # Every model file is read through open_model_file (judged on the file opened).
    real_model_open = md.open_model_file
    monkeypatch.setattr(md, "open_model_file", lambda p, tree=None: Spy(real_model_open(p, tree)))
    header = md.read_safetensors_header(path)
    with real_open(path, "rb") as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
    assert sum(read_total) == 8 + header_len
    assert header["fc.weight"] == {"dtype": "BF16", "shape": [7168, 21504], "data_offsets": [256000, 256000 + 7168 * 21504 * 2]}


def test_model_prefixed_fc_weight_and_sharded_index(tmp_path):
    d = tmp_path / "draft"
    d.mkdir()
    shutil.copy(os.path.join(DRAFT, "config.json"), str(d / "config.json"))
    write_safetensors(str(d / "model-00001-of-00002.safetensors"), [("model.norm.weight", "BF16", [7168])])
    write_safetensors(str(d / "model-00002-of-00002.safetensors"), [("model.fc.weight", "BF16", [7168, 14336])])
    (d / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "metadata": {"total_size": 0},
                "weight_map": {
                    "model.norm.weight": "model-00001-of-00002.safetensors",
                    "model.fc.weight": "model-00002-of-00002.safetensors",
                },
            }
        )
    )
    assert md.find_fc_weight_shape(str(d)) == [7168, 14336]
    assert md.expected_id_count_from_draft(str(d)) == 2


def test_target_hidden_size_divides_fc_input(tmp_path):
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"hidden_size": 4096, "target_hidden_size": 7168}))
    write_safetensors(str(d / "model.safetensors"), [("fc.weight", "BF16", [4096, 21504])])
    assert md.expected_id_count_from_draft(str(d)) == 3


def test_unknown_count_is_none(tmp_path):
    d = tmp_path / "draft"
    d.mkdir()
    assert md.expected_id_count_from_draft(str(d)) is None  # no config
    shutil.copy(os.path.join(DRAFT, "config.json"), str(d / "config.json"))
    assert md.expected_id_count_from_draft(str(d)) is None  # no weights
    write_safetensors(str(d / "model.safetensors"), [("norm.weight", "BF16", [7168])])
    assert md.expected_id_count_from_draft(str(d)) is None  # no fc
    write_safetensors(str(d / "model.safetensors"), [("fc.weight", "BF16", [7168, 10000])])
    assert md.expected_id_count_from_draft(str(d)) is None  # not a multiple


def test_corrupt_header_length_is_refused_without_allocating(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    with pytest.raises(ValueError, match="corrupt file"):
        md.read_safetensors_header(str(p))
    p.write_bytes(struct.pack("<Q", 4096) + b"{}")
    with pytest.raises(ValueError, match="truncated"):
        md.read_safetensors_header(str(p))
    p.write_bytes(b"abc")
    with pytest.raises(ValueError, match="shorter than 8 bytes"):
        md.read_safetensors_header(str(p))


# --------------------------------------------------------------------------- #
# render_server_args
# --------------------------------------------------------------------------- #


def _fixed(**overrides):
    kwargs = dict(
        model_path="/models/DeepSeek-V3",
        draft_model_path="/models/deepseek-v3-eagle3",
        num_steps=15,
        eagle_topk=1,
        num_draft_tokens=16,
        tp_size=8,
        host="0.0.0.0",
        port=30000,
    )
    kwargs.update(overrides)
    return ss.render_server_args(**kwargs)


def test_render_fixed_flags_in_order():
    assert _fixed(mem_fraction_static=0.85, enable_metrics=True, extra_args=["--trust-remote-code"]) == [
        "--model-path", "/models/DeepSeek-V3",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "/models/deepseek-v3-eagle3",
        "--speculative-num-steps", "15",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "16",
        "--tp-size", "8",
        "--host", "0.0.0.0",
        "--port", "30000",
        "--mem-fraction-static", "0.85",
        "--enable-metrics",
        "--trust-remote-code",
    ]


def test_render_optional_flags():
    args = _fixed(pp_size=2, disable_cuda_graph=True)
    assert args[args.index("--pp-size") + 1] == "2"
    assert "--disable-cuda-graph" in args
    assert "--pp-size" not in _fixed()
    assert "--mem-fraction-static" not in _fixed()
    assert _fixed() == _fixed()  # deterministic


def test_render_refuses_incident_triple():
    with pytest.raises(ValueError, match="would silently set --speculative-num-draft-tokens to 2"):
        _fixed(num_steps=1)


def test_render_leaves_managed_flag_judgement_to_the_release_aware_check():
    """Whether --tp re-sets --tp-size depends on the installed parser (_extra_args
    judges it on the host before any write); rendering must not be the first place a
    bad variable is noticed, so it keeps extra args verbatim and refuses only non-strings."""
    assert _fixed(extra_args=["--tp", "4"])[-2:] == ["--tp", "4"]
    with pytest.raises(ValueError, match="sglang_extra_args items must be strings"):
        _fixed(extra_args=[4])


def test_render_baseline_without_speculation():
    args = ss.render_server_args("/models/DeepSeek-V3", speculative_algorithm=None, tp_size=8)
    assert not any(a.startswith("--speculative") for a in args)


# --------------------------------------------------------------------------- #
# config.json text helpers
# --------------------------------------------------------------------------- #


def test_with_layer_ids_keeps_keys_order_and_indent():
    text = open(os.path.join(DRAFT, "config.json")).read()
    config = json.loads(text)
    assert dc.get_layer_ids(config) is None  # the typo'd key: SGLang uses defaults
    assert dc.ignored_layer_keys(config) == ["eagle_aux_hidden_state_layers_ids"]
    new_text = dc.render_config(dc.with_layer_ids(config, [-1, 2, 30]), text)
    new = json.loads(new_text)
    assert list(new) == list(config)
    assert dc.get_layer_ids(new) == [-1, 2, 30]
    assert new["eagle_config"]["use_aux_hidden_state"] is True
    assert new_text.startswith('{\n  "architectures": [\n    "LlamaForCausalLMEagle3"')
    assert new_text.endswith("}\n")


def test_render_config_keeps_other_indent_styles():
    assert dc.detect_indent('{\n    "a": 1\n}\n') == 4
    assert dc.detect_indent('{\n\t"a": 1\n}') == "\t"
    assert dc.detect_indent('{"a": 1}') is None
    assert dc.render_config({"a": 1}, '{"a": 0}') == '{"a": 1}'


def test_same_ids_is_type_strict():
    assert dc.same_ids([-1, 2, 30], [-1, 2, 30])
    assert not dc.same_ids([True, 2], [1, 2])
    assert not dc.same_ids(["2"], [2])
    assert not dc.same_ids(None, [2])


def test_the_input_contract_refuses_malformed_int_strings_with_the_variable_named():
    """'--5' passed lstrip('-').isdigit() and crashed int(); it must be refused by name (the role's one
    input contract, fleetops.sglang.variable_errors, which preflight and the probe's action apply)."""
    from ansible_collections.fleetops.sglang.plugins.filter import sglang as filters
    from unit.plugins.module_utils.test_inputs import defaults

    def refused(**changes):
        return filters.variable_errors(dict(defaults(), **changes))

    assert refused(sglang_speculative_num_steps=" 15 ", sglang_speculative_num_draft_tokens="16") == []
    errors = refused(sglang_speculative_num_steps="--5")
    assert errors and "sglang_speculative_num_steps" in errors[0] and "'--5'" in errors[0]
    assert "sglang_eagle3_layer_ids[0] is '--5' (str)" in refused(sglang_eagle3_layer_ids=["--5", 2])[0]