"""The test double's judgement without torch, on the forward-capture check's own variants.

tests/unit/plugins/module_utils/test_forward.py keeps one list of wirings: every broken one (BROKEN: the
embedding patch mutated, the CUDA-graph companion missing, the native 0.5.14+ capture
mutated or fed ids one off) fails its executed check, every correct one (CORRECT: the
role's patch on each loop family, the pristine native capture) passes it. The test double
judges the same files here with no torch at all (this interpreter has none): it reads the
capture code's structure (files/sglang_test_double, ``read_capture``), and must come to the
same verdict for every variant of both lists: a mismatch (the low accept length, or a server
that dies at warm-up) for each broken one, the trained states for each correct one.

Real release files (the wheel cache of tests/conftest.py); no GPU, no torch, no network
beyond the first download of a wheel.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from double_harness import DEEPSEEK_V3_LAYERS, http, load_double, make_models, spec_flags
from unit.plugins.module_utils.test_forward import BROKEN, CORRECT, Variant, site


td = load_double("sglang_test_double_static")
TRAINED = td.parse_trained_layers("embed,2,30")
SERVED = td.resolve_speculative_params("EAGLE3", 15, 1, 16, "DeepseekV3ForCausalLM")


def test_this_interpreter_has_no_torch() -> None:
    """The point of the static judgement: these tests prove it where torch cannot be imported."""
    assert importlib.util.find_spec("torch") is None


def installed(variant: Variant, make_venv: Any, patches: Any, root: Path) -> Path:
    """The variant's files written over a copy of the release, and a draft config with its ids."""
    venv = make_venv(variant.version)
    for rel, text in variant.texts(venv, patches).items():
        (site(venv) / rel).write_text(text)
    draft = root / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(
        {"eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": list(variant.draft_ids)}}))
    return venv


def judge(variant: Variant, make_venv: Any, patches: Any, root: Path) -> Any:
    venv = installed(variant, make_venv, patches, root)
    # No harness named: the double reads the files, whatever this python has.
    return td.judge_wiring(str(site(venv)), variant.version, "EAGLE3", str(root / "draft"), DEEPSEEK_V3_LAYERS,
                           False, 1, TRAINED)


@pytest.mark.parametrize("variant", BROKEN, ids=lambda v: v.id)
def test_every_broken_variant_is_a_mismatch(variant: Variant, make_venv: Any, patches: Any, tmp_path: Path) -> None:
    wiring = judge(variant, make_venv, patches, tmp_path)
    assert not wiring.matches_training, (wiring.decode, wiring.notes)
    if wiring.fatal is None:  # it serves, and accepts what a draft fed other states accepts
        assert td.expected_accept_length(wiring.matches_training, SERVED) == pytest.approx(1.6, abs=0.05)


@pytest.mark.parametrize("variant", CORRECT, ids=lambda v: v.id)
def test_every_correct_variant_matches(variant: Variant, make_venv: Any, patches: Any, tmp_path: Path) -> None:
    wiring = judge(variant, make_venv, patches, tmp_path)
    assert wiring.fatal is None and wiring.in_order, wiring.notes
    assert wiring.prefill == wiring.decode == ("embed", "L2", "L30"), wiring.notes
    assert wiring.matches_training
    style = "native" if variant.route == "native" else "loop"
    assert "forward capture style %r" % style in wiring.notes[0]


def _named(name: str, version: str) -> Variant:
    return next(v for v in BROKEN if v.name == name and v.version == version)


@pytest.mark.parametrize("name, version, decode", [
    ("embedding appended after the layer loop", "0.5.9", ("L2", "L30", "hidden_states_after_the_layer_loop")),
    ("clone popped for the uncloned embedding", "0.5.11", ("embed_overwritten_in_place", "L2", "L30")),
    ("loop capture shifted", "0.5.9", ("embed", "L1", "L29")),
    ("ids one low", "0.5.17", ("embed", "L1", "L29")),
    ("loop index shifted", "0.5.23", ("L1", "L29")),
    ("residual not cloned", "0.5.14", ("embed_overwritten_in_place", "L2_overwritten_in_place",
                                      "L30_overwritten_in_place")),
])
def test_what_the_double_says_the_draft_gets(name: str, version: str, decode: Any, make_venv: Any, patches: Any,
                                             tmp_path: Path) -> None:
    """The verdict names the states, as the executed check does: not only "mismatch"."""
    wiring = judge(_named(name, version), make_venv, patches, tmp_path)
    assert wiring.decode == decode, wiring.notes


@pytest.mark.parametrize("name, version, fatal", [
    ("unpatched", "0.5.9", "TypeError"),
    ("flag not initialised", "0.5.13", "AttributeError"),
    ("body-A ids", "0.5.17", "AuxHiddenStatePacker: captured 2 of 3"),
    ("captured before the input norm", "0.5.23", "TypeError: the capture at layer 0 appends None"),
    ("capture dropped in the decoder layer", "0.5.14", "RuntimeError: draft fc expects 3 hidden states, got 0"),
])
def test_what_kills_the_server_at_warm_up(name: str, version: str, fatal: str, make_venv: Any, patches: Any,
                                          tmp_path: Path) -> None:
    wiring = judge(_named(name, version), make_venv, patches, tmp_path)
    assert wiring.fatal and wiring.fatal.startswith(fatal), wiring.fatal


def test_the_double_serves_a_broken_native_capture_at_about_1_6(make_venv: Any, patches: Any, tmp_path: Path,
                                                                 run_double: Any) -> None:
    """End to end: 0.5.14 as installed but for the ids shifted once more, the double's server accepts ~1.6."""
    variant = _named("ids shifted in set_eagle3_layers_to_capture", "0.5.14")
    venv = installed(variant, make_venv, patches, tmp_path)
    (tmp_path / "models").mkdir()
    target, _ = make_models(tmp_path / "models", None)
    double = run_double(spec_flags(target, tmp_path / "draft", 15, 1, 16), site(venv))
    double.wait_healthy()
    status, out = http(double.port, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 256}})
    assert status == 200 and out["meta_info"]["spec_accept_length"] == pytest.approx(1.6, abs=0.05)
    info = http(double.port, "/get_server_info")[1]["test_double"]
    assert info["wiring_matches_training"] is False and info["decode_hidden_states"] == ["L0", "L3", "L31"]
