# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure checks for SGLang EAGLE-3 speculative decoding settings.

SGLang fails *silently* on the two settings this role manages:

* it reads the draft's aux layer ids from ``config.json`` inside a bare
  ``try/except`` and falls back to its defaults on any mistake, and
* with ``--speculative-eagle-topk 1`` it rewrites ``--speculative-num-draft-tokens``
  to ``num_steps + 1`` and only logs a warning.

So every check SGLang skips is made here, before anything reaches a host, with a
message that names the variable, the bad value and what would be accepted.

Stdlib only and no Ansible import: modules on Debian hosts (python3 3.9 - 3.13)
import this as ``ansible_collections.fleetops.sglang.plugins.module_utils.sglang_speculative``
and pytest imports it
directly.
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
from typing import Any, Dict, List, Optional, Sequence

# The key SGLang reads (since 0.4.9); there is no CLI flag for EAGLE3 serving.
EAGLE_CONFIG_KEY = "eagle_config"
LAYER_IDS_KEY = "eagle_aux_hidden_state_layer_ids"

# A real safetensors header is a few hundred KB at most; anything near this is a
# corrupt length field, and we must not allocate gigabytes to find that out.
MAX_SAFETENSORS_HEADER_BYTES = 100 * 1024 * 1024


def _is_int(value: Any) -> bool:
    """True for a real int; bool is an int subclass but True is not a layer id."""
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    """Show a value with its type, so ``"2"`` and ``2`` read differently in errors.

    The type is the first builtin one in the MRO: Ansible hands filters its own
    subclasses (``_AnsibleTaggedStr``), which mean nothing to the user.
    """
    kind = next((t for t in type(value).__mro__ if t.__module__ == "builtins"), type(value))
    return "%r (%s)" % (value, kind.__name__)


# --------------------------------------------------------------------------- #
# Layer ids
# --------------------------------------------------------------------------- #


def validate_layer_ids(
    ids: Any,
    num_hidden_layers: Optional[int] = None,
    expected_count: Optional[int] = None,
    var: str = "sglang_eagle3_layer_ids",
) -> List[str]:
    """Return every reason SGLang would not capture exactly these hidden states.

    SGLang never tells us: a wrong id is either swallowed by its ``try/except``
    (defaults used instead) or captures a different layer than the draft was
    trained on, and the only symptom is a low accept length. ``-1`` means "the
    embedding output" (patched releases) and can only come first, because the
    embedding precedes every layer and SGLang concatenates in list order.
    """
    hint = "a list of distinct ascending ints, e.g. [-1, 2, 30]"
    if not isinstance(ids, (list, tuple)):
        return ["%s must be %s; got %s" % (var, hint, _describe(ids))]
    if not ids:
        return ["%s must not be empty; give %s" % (var, hint)]

    errors = []  # type: List[str]
    for pos, value in enumerate(ids):
        if not _is_int(value):
            errors.append(
                "%s[%d] is %s; every id must be an int (a layer index, or -1 first "
                "for the embedding output), e.g. %s"
                % (var, pos, _describe(value), _suggest_ints(ids))
            )
    if errors:
        # Ordering and range make no sense until every element is an int.
        return errors

    for pos, value in enumerate(ids):
        if value == -1 and pos != 0:
            errors.append(
                "%s[%d] is -1, but -1 (the embedding output) is only accepted as the "
                "first id; got %r" % (var, pos, list(ids))
            )
        elif value < -1:
            errors.append(
                "%s[%d] is %d; the only negative id accepted is -1 (the embedding "
                "output, first position)" % (var, pos, value)
            )

    dupes = sorted({v for v in ids if list(ids).count(v) > 1})
    if dupes:
        errors.append(
            "%s has duplicate ids %r in %r; each hidden state can be captured once"
            % (var, dupes, list(ids))
        )
    if list(ids) != sorted(ids):
        errors.append(
            "%s must be ascending (SGLang concatenates captures in layer order, not "
            "list order); got %r, accepted would be %r" % (var, list(ids), sorted(ids))
        )

    if num_hidden_layers is not None:
        too_big = [v for v in ids if v >= num_hidden_layers]
        if too_big:
            errors.append(
                "%s has %r, but the target model has %d hidden layers: ids must be "
                "0..%d (or -1 first)" % (var, too_big, num_hidden_layers, num_hidden_layers - 1)
            )

    if expected_count is not None and len(ids) != expected_count:
        errors.append(
            "%s has %d ids %r, but the draft model's fc layer takes %d hidden states "
            "(from its fc.weight shape); give exactly %d ids"
            % (var, len(ids), list(ids), expected_count, expected_count)
        )
    return errors


def _suggest_ints(ids: Sequence[Any]) -> str:
    """Best-effort int version of the user's list, so the fix is copy-pasteable."""
    out = []
    for value in ids:
        if _is_int(value):
            out.append(value)
        elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            out.append(int(value.strip()))
        else:
            return "[-1, 2, 30]"
    return repr(out)


# --------------------------------------------------------------------------- #
# Speculative flags
# --------------------------------------------------------------------------- #


def draft_tree_capacity(num_steps: int, eagle_topk: int) -> int:
    """Most tokens an EAGLE draft tree can hold: the root, topk at step 1, then
    topk*topk candidates per further step. More draft tokens cannot be filled."""
    return 1 + eagle_topk + (num_steps - 1) * eagle_topk * eagle_topk


def validate_speculative(
    num_steps: Any,
    eagle_topk: Any,
    num_draft_tokens: Any,
    var_prefix: str = "sglang_speculative_",
) -> List[str]:
    """Return every reason SGLang would not run exactly this speculative triple.

    The incident: steps 1 / topk 1 / draft 16 was silently served as draft 2.
    All three must be given together (SGLang auto-picks any it is not given, so a
    partial triple runs with values nobody chose) or none at all.
    """
    given = {
        "num_steps": num_steps,
        "eagle_topk": eagle_topk,
        "num_draft_tokens": num_draft_tokens,
    }
    flags = {
        "num_steps": "--speculative-num-steps",
        "eagle_topk": "--speculative-eagle-topk",
        "num_draft_tokens": "--speculative-num-draft-tokens",
    }
    missing = [k for k, v in given.items() if v is None]
    if len(missing) == 3:
        return []
    if missing:
        return [
            "set all three of %s or none: %s %s missing (SGLang would choose %s itself)"
            % (
                ", ".join(var_prefix + k for k in given),
                ", ".join(var_prefix + k for k in missing),
                "is" if len(missing) == 1 else "are",
                "it" if len(missing) == 1 else "them",
            )
        ]

    errors = []  # type: List[str]
    for key, value in given.items():
        if not _is_int(value) or value < 1:
            errors.append(
                "%s (%s) is %s; it must be a positive int"
                % (var_prefix + key, flags[key], _describe(value))
            )
    if errors:
        return errors

    if eagle_topk == 1 and num_draft_tokens != num_steps + 1:
        errors.append(
            "%snum_steps=%d, %seagle_topk=1, %snum_draft_tokens=%d: with "
            "--speculative-eagle-topk 1 SGLang would silently set "
            "--speculative-num-draft-tokens to %d (num_steps + 1) and only log a "
            "warning. Set %snum_draft_tokens to %d, or %snum_steps to %d to keep %d "
            "draft tokens"
            % (
                var_prefix, num_steps, var_prefix, var_prefix, num_draft_tokens,
                num_steps + 1,
                var_prefix, num_steps + 1, var_prefix, num_draft_tokens - 1,
                num_draft_tokens,
            )
        )
    elif eagle_topk > 1:
        capacity = draft_tree_capacity(num_steps, eagle_topk)
        if num_draft_tokens > capacity:
            errors.append(
                "%snum_draft_tokens=%d exceeds the draft tree capacity %d for "
                "num_steps=%d, eagle_topk=%d (1 + topk + (num_steps-1)*topk^2); "
                "accepted: at most %d, or raise num_steps/eagle_topk"
                % (var_prefix, num_draft_tokens, capacity, num_steps, eagle_topk, capacity)
            )
    return errors


# --------------------------------------------------------------------------- #
# Reading model directories (headers only)
# --------------------------------------------------------------------------- #


def load_json_object(path: str) -> Optional[Dict[str, Any]]:
    """Parse a JSON object file (a config.json); None if absent, ValueError if it is not an object."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("%s is not valid JSON: %s" % (path, exc))
    if not isinstance(data, dict):
        raise ValueError("%s must hold a JSON object, got %s" % (path, type(data).__name__))
    return data


def read_num_hidden_layers(model_dir: str) -> Optional[int]:
    """Decoder layer count of the target, which bounds every capturable layer id.

    None when the directory or key is absent (``model_path`` may be a hub id, not
    a local dir). Multimodal configs nest it under ``text_config``.
    """
    config = load_json_object(os.path.join(model_dir, "config.json"))
    if config is None:
        return None
    for source in (config, config.get("text_config")):
        if isinstance(source, dict) and _is_int(source.get("num_hidden_layers")):
            return source["num_hidden_layers"]
    return None


# The model classes sglang/srt/models/deepseek_v2.py registers (its EntryClass), the
# same in every release from 0.5.4.post2 to 0.5.23 (tests/test_target_model.py reads
# them from the real files). SGLang picks the class from ``architectures``; anything
# else is served by another file, where the patch and the layer ids mean nothing.
DEEPSEEK_ARCHITECTURES = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM")
# model_type of the configs those classes are published with (DeepSeek-V2/V2.5,
# V3/R1, V3.2, and Kimi K2, a DeepseekV3ForCausalLM checkpoint).
DEEPSEEK_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")


def target_model_errors(model_dir: str, var: str = "sglang_model_path") -> List[str]:
    """Why the target is not a model SGLang serves with deepseek_v2.py, read-only.

    Without this a Llama target is "remediated" with rc 0: the patch is applied to a
    file the server never loads, and the draft's layer ids then index another model.
    """
    path = os.path.join(model_dir, "config.json")
    accepted = "a DeepSeek target: architectures %s, model_type %s" % (
        " or ".join(DEEPSEEK_ARCHITECTURES), ", ".join(DEEPSEEK_MODEL_TYPES))
    try:
        config = load_json_object(path)
    except (OSError, ValueError) as exc:
        return ["%s=%s: %s; accepted: %s" % (var, model_dir, exc, accepted)]
    if config is None:
        return ["%s=%s: %s does not exist on the host, so the target cannot be checked; accepted: %s"
                % (var, model_dir, path, accepted)]
    archs = config.get("architectures")
    model_type = config.get("model_type")
    errors = []
    if not (isinstance(archs, list) and archs and all(a in DEEPSEEK_ARCHITECTURES for a in archs)):
        errors.append("%s=%s: %s has architectures %s, which SGLang does not serve with "
                      "sglang/srt/models/deepseek_v2.py, so the embedding-capture patch and the draft's layer ids "
                      "would mean something else there; accepted: %s"
                      % (var, model_dir, path, json.dumps(archs), accepted))
    elif model_type not in DEEPSEEK_MODEL_TYPES:
        errors.append("%s=%s: %s has model_type %s, not one of a DeepSeek checkpoint; accepted: %s"
                      % (var, model_dir, path, json.dumps(model_type), accepted))
    elif read_num_hidden_layers(model_dir) is None:
        errors.append("%s=%s: %s has no integer num_hidden_layers, which bounds the layer ids; accepted: %s"
                      % (var, model_dir, path, accepted))
    return errors


def read_safetensors_header(path: str) -> Dict[str, Any]:
    """Return the JSON header of a safetensors file without reading tensor data.

    Format: 8-byte little-endian u64 header length N, then N bytes of JSON
    (``{name: {dtype, shape, data_offsets}, "__metadata__": {...}}``). Draft
    weights are GBs on shared storage; the header is all we need.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise ValueError("%s is not a safetensors file: shorter than 8 bytes" % path)
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_SAFETENSORS_HEADER_BYTES:
            raise ValueError(
                "%s declares a %d-byte safetensors header (limit %d): corrupt file?"
                % (path, length, MAX_SAFETENSORS_HEADER_BYTES)
            )
        if 8 + length > size:
            raise ValueError(
                "%s declares a %d-byte header but the file has %d bytes: truncated?"
                % (path, length, size)
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("%s has an unreadable safetensors header: %s" % (path, exc))
    if not isinstance(header, dict):
        raise ValueError("%s has a safetensors header that is not a JSON object" % path)
    return header


def _is_fc_weight(name: str) -> bool:
    """EAGLE-3 checkpoints name the fusion layer ``fc.weight`` (SpecForge) or
    ``model.fc.weight``; anything else ending in ``.fc.weight`` is the same layer."""
    return name == "fc.weight" or name.endswith(".fc.weight")


def _draft_weight_files(draft_dir: str) -> List[str]:
    """Files that may hold fc.weight: the index's shard first, else all shards."""
    index = load_json_object(os.path.join(draft_dir, "model.safetensors.index.json"))
    if index is not None and isinstance(index.get("weight_map"), dict):
        shards = sorted(
            {f for n, f in index["weight_map"].items() if _is_fc_weight(n) and isinstance(f, str)}
        )
        found = [os.path.join(draft_dir, f) for f in shards]
        if all(os.path.isfile(f) for f in found) and found:
            return found
    single = os.path.join(draft_dir, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    return sorted(glob.glob(os.path.join(draft_dir, "*.safetensors")))


def find_fc_weight_shape(draft_dir: str) -> Optional[List[int]]:
    """Shape of the draft's fc weight from safetensors headers, or None."""
    for path in _draft_weight_files(draft_dir):
        header = read_safetensors_header(path)
        for name, meta in header.items():
            if name == "__metadata__" or not _is_fc_weight(name):
                continue
            shape = meta.get("shape") if isinstance(meta, dict) else None
            if isinstance(shape, list) and all(_is_int(d) for d in shape):
                return shape
    return None


def expected_id_count_from_draft(draft_dir: str) -> Optional[int]:
    """How many hidden states the draft was trained to fuse, from its weights.

    The fc layer maps ``cat(k hidden states)`` to one: its weight is
    ``[hidden_size, target_hidden_size * k]`` (torch Linear stores [out, in]).
    A list of a different length makes SGLang fail at load or, worse, feed the
    wrong features. None when config.json, hidden_size or fc.weight is absent or
    the shape does not divide evenly; ValueError when a file is corrupt.
    """
    config = load_json_object(os.path.join(draft_dir, "config.json"))
    if config is None:
        return None
    hidden_in = config.get("target_hidden_size", config.get("hidden_size"))
    if not _is_int(hidden_in) or hidden_in < 1:
        return None
    shape = find_fc_weight_shape(draft_dir)
    if shape is None or len(shape) != 2:
        return None
    fan_in = shape[1]
    if fan_in % hidden_in != 0:
        return None
    return fan_in // hidden_in


# --------------------------------------------------------------------------- #
# Server flags
# --------------------------------------------------------------------------- #


def _check_extra_args(extra_args: Sequence[Any]) -> None:
    """Refuse extra args that are not strings (preflight refuses them first, by name).

    Whether an item re-sets a managed flag depends on the installed release (its
    aliases, and prefixes where its parser allows abbreviations): the host judges
    that, before any write, with sglang_serverargs, the one copy of that rule.
    """
    for arg in extra_args:
        if not isinstance(arg, str):
            raise ValueError("sglang_extra_args items must be strings; got %s" % _describe(arg))


def render_server_args(
    model_path: str,
    draft_model_path: Optional[str] = None,
    speculative_algorithm: Optional[str] = "EAGLE3",
    num_steps: Optional[int] = None,
    eagle_topk: Optional[int] = None,
    num_draft_tokens: Optional[int] = None,
    tp_size: int = 1,
    pp_size: int = 1,
    host: str = "127.0.0.1",
    port: int = 30000,
    mem_fraction_static: Optional[float] = None,
    disable_cuda_graph: bool = False,
    enable_metrics: bool = False,
    extra_args: Optional[Sequence[str]] = None,
) -> List[str]:
    """Launch flags for ``python -m sglang.launch_server``, one argv element each.

    Deterministic order so a rendered unit file only changes when a value does
    (no spurious restarts). Raises ValueError on a triple SGLang would rewrite, so
    a rejected combination can never be rendered. With ``speculative_algorithm``
    None the speculative flags are omitted (a baseline server for comparison).
    """
    for name, value in (("tp_size", tp_size), ("pp_size", pp_size), ("port", port)):
        if not _is_int(value) or value < 1:
            raise ValueError("%s must be a positive int; got %s" % (name, _describe(value)))
    if mem_fraction_static is not None and (
        isinstance(mem_fraction_static, bool)
        or not isinstance(mem_fraction_static, (int, float))
        or not 0 < mem_fraction_static < 1
    ):
        raise ValueError(
            "mem_fraction_static must be a number in (0, 1); got %s" % _describe(mem_fraction_static)
        )
    extra = list(extra_args or [])
    _check_extra_args(extra)

    args = ["--model-path", str(model_path)]
    if speculative_algorithm:
        if not draft_model_path:
            raise ValueError("speculative_algorithm %s needs draft_model_path" % speculative_algorithm)
        errors = validate_speculative(num_steps, eagle_topk, num_draft_tokens)
        if errors:
            raise ValueError("; ".join(errors))
        args += [
            "--speculative-algorithm", str(speculative_algorithm),
            "--speculative-draft-model-path", str(draft_model_path),
        ]
        if num_steps is not None:
            args += [
                "--speculative-num-steps", str(num_steps),
                "--speculative-eagle-topk", str(eagle_topk),
                "--speculative-num-draft-tokens", str(num_draft_tokens),
            ]
    args += ["--tp-size", str(tp_size)]
    if pp_size != 1:
        args += ["--pp-size", str(pp_size)]
    args += ["--host", str(host), "--port", str(port)]
    if mem_fraction_static is not None:
        args += ["--mem-fraction-static", repr(float(mem_fraction_static))]
    if disable_cuda_graph:
        args.append("--disable-cuda-graph")
    if enable_metrics:
        args.append("--enable-metrics")
    return args + extra


# --------------------------------------------------------------------------- #
# Draft config.json editing (pure text in, text out)
# --------------------------------------------------------------------------- #


def get_layer_ids(config: Dict[str, Any]) -> Any:
    """What SGLang reads: ``config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]``,
    or None where its try/except would fall back to the defaults."""
    eagle = config.get(EAGLE_CONFIG_KEY)
    if not isinstance(eagle, dict):
        return None
    return eagle.get(LAYER_IDS_KEY)


def ignored_layer_keys(config: Dict[str, Any]) -> List[str]:
    """Keys in ``eagle_config`` that look like layer ids but SGLang never reads:
    the typo that made the incident fall back to the defaults without a word."""
    eagle = config.get(EAGLE_CONFIG_KEY)
    if not isinstance(eagle, dict):
        return []
    return [k for k in eagle if k != LAYER_IDS_KEY and "layer" in str(k).lower()]


def same_ids(actual: Any, wanted: Sequence[int]) -> bool:
    """Exact equality with types: ``[True, 2]`` must not equal ``[1, 2]``."""
    return (
        isinstance(actual, list)
        and len(actual) == len(wanted)
        and all(_is_int(a) and a == w for a, w in zip(actual, wanted))
    )


def detect_indent(text: str) -> Any:
    """Indent of the first nested line (int spaces or a tab string); None when the
    file is on one line. Defaults to 2, what transformers' save_pretrained writes."""
    lines = text.splitlines()
    if len(lines) <= 1:
        return None
    for line in lines[1:]:
        stripped = line.lstrip(" \t")
        if not stripped:
            continue
        lead = line[: len(line) - len(stripped)]
        if not lead:
            continue
        if lead[0] == "\t":
            return "\t"
        return len(lead)
    return 2


def render_config(config: Dict[str, Any], original_text: str) -> str:
    """Serialise ``config`` in the original file's style (indent, trailing
    newline, ASCII escaping) so the diff shows only the ids that changed."""
    indent = detect_indent(original_text)
    ascii_only = all(ord(c) < 128 for c in original_text)
    text = json.dumps(config, indent=indent, ensure_ascii=ascii_only)
    if original_text.endswith("\n") or not original_text:
        text += "\n"
    return text


def with_layer_ids(config: Dict[str, Any], layer_ids: Sequence[int]) -> Dict[str, Any]:
    """Copy of ``config`` with the ids set; every other key and key order kept,
    ``eagle_config`` created (after the existing keys) when absent."""
    updated = dict(config)
    eagle = config.get(EAGLE_CONFIG_KEY)
    eagle = dict(eagle) if isinstance(eagle, dict) else {}
    eagle[LAYER_IDS_KEY] = list(layer_ids)
    updated[EAGLE_CONFIG_KEY] = eagle
    return updated
