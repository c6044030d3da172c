# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the target's and the draft's directories say: config.json and safetensors headers.

The target's ``num_hidden_layers`` bounds every capturable layer id and its
architecture must be one SGLang serves with ``deepseek_v2.py``; the draft's fc
weight tells how many hidden states it was trained on. Only headers are read,
never the weights. Stdlib only: modules import it on the host as
``ansible_collections.fleetops.sglang.plugins.module_utils._modeldirs``.
"""

from __future__ import annotations

import glob
import json
import os
import stat
import struct
from typing import Any, BinaryIO, Dict, List, Optional

from ansible_collections.fleetops.sglang.plugins.module_utils._speculative import is_int

# A real safetensors header is a few hundred KB at most; anything near this is a
# corrupt length field, and we must not allocate gigabytes to find that out.
MAX_SAFETENSORS_HEADER_BYTES = 100 * 1024 * 1024


def model_tree(directory: str) -> str:
    """The tree a model directory's files may lead into: the directory as it resolves now, or, for a Hugging
    Face snapshot (``models--<org>--<name>/snapshots/<revision>``), its repository (the snapshot's links
    lead to ``../../blobs``)."""
    real = os.path.realpath(directory)
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots" and os.path.basename(os.path.dirname(parent)).startswith("models--"):
        return os.path.dirname(parent)
    return real


def open_model_file(path: str, tree: Optional[str] = None) -> BinaryIO:
    """Open a file of model storage for reading, as root may: where it leads is judged on the file opened.

    Model storage may be written by others (a shared file system, another team's export), who may swap a
    link between any check and the use. So the file is opened first, and then judged by what the kernel
    says was opened (``/proc/self/fd``): a regular file (not a FIFO that would block, nor a device),
    inside ``tree`` (``model_tree`` of the file's directory by default), and readable by some user other
    than root (root reads nothing from there that only root may read). ValueError names the path and why.
    """
    tree = tree or model_tree(os.path.dirname(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        try:
            real = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            raise ValueError("refusing to read %s: where it leads cannot be read back (no /proc)" % path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("refusing to read %s: %s is not a regular file" % (path, real))
        if not (real == tree or real.startswith(tree.rstrip("/") + "/")):
            raise ValueError("refusing to read %s: it leads to %s, outside the model's tree %s (a link that leaves "
                             "it, or one swapped while it was read); links inside the model's directory, or a "
                             "Hugging Face repository's blobs, are followed" % (path, real, tree))
        if st.st_uid == 0 and not st.st_mode & stat.S_IROTH and not (st.st_gid != 0 and st.st_mode & stat.S_IRGRP):
            raise ValueError("refusing to read %s: %s is readable by root only (mode %04o); the server's user could "
                             "not read it either" % (path, real, stat.S_IMODE(st.st_mode)))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_json_object(path: str) -> Optional[Dict[str, Any]]:
    """Parse a JSON object file (a config.json); None if absent, ValueError if it is not an object."""
    if not os.path.lexists(path):
        return None
    try:
        with open_model_file(path) as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
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
        if isinstance(source, dict) and is_int(source.get("num_hidden_layers")):
            return source["num_hidden_layers"]
    return None


# The model classes sglang/srt/models/deepseek_v2.py registers (its EntryClass), the
# same in every release from 0.5.4.post2 to 0.5.23 (tests/unit/plugins/module_utils/test_modeldirs.py reads
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


# What makes a config an EAGLE-3 draft's: an architecture SGLang's EAGLE-3 draft models register
# (LlamaForCausalLMEagle3 in llama_eagle3.py from 0.5.4.post2, Eagle3DeepseekV2ForCausalLM in
# kimi_k25_eagle3.py from 0.5.12), or the eagle_config SGLang reads the layer ids from.
EAGLE3_ARCHITECTURE_MARK = "Eagle3"


def _inside(path: str, parent: str) -> bool:
    return os.path.commonpath([path, parent]) == parent


def draft_model_errors(draft_dir: str, target_dir: Optional[str], var: str = "sglang_draft_model_path",
                       target_var: str = "sglang_model_path") -> List[str]:
    """Why the draft directory is not an EAGLE-3 draft of its own, read-only.

    The role writes the layer ids into the draft's config.json: pointed at the target's
    own directory (or into it) it would edit the target's config, and the server would
    start with the target as its own draft. The directories are compared resolved
    (symlinks followed), and the config must say it is an EAGLE-3 draft.
    """
    accepted = ("the EAGLE-3 draft's own directory: not %s nor inside or around it, and a config.json with an "
                "architecture named *%s* or an eagle_config" % (target_var, EAGLE3_ARCHITECTURE_MARK))
    errors: List[str] = []
    if target_dir:
        draft_real, target_real = os.path.realpath(draft_dir), os.path.realpath(target_dir)
        if draft_real == target_real:
            errors.append("%s=%s is the target's own directory (%s=%s); the role would write the draft's layer ids"
                          " into the target's config.json; accepted: %s"
                          % (var, draft_dir, target_var, target_dir, accepted))
        elif _inside(draft_real, target_real) or _inside(target_real, draft_real):
            errors.append("%s=%s and %s=%s are one inside the other (%s, %s); accepted: %s"
                          % (var, draft_dir, target_var, target_dir, draft_real, target_real, accepted))
    if errors:
        return errors
    path = os.path.join(draft_dir, "config.json")
    try:
        config = load_json_object(path)
    except (OSError, ValueError):
        return []  # the draft module says what is wrong with the file itself
    if config is None:
        return []
    archs = config.get("architectures")
    archs = archs if isinstance(archs, list) else []
    if not any(EAGLE3_ARCHITECTURE_MARK in str(a) for a in archs) and not isinstance(config.get("eagle_config"), dict):
        errors.append("%s=%s: %s has architectures %s and no eagle_config: it is not an EAGLE-3 draft%s; accepted: %s"
                      % (var, draft_dir, path, json.dumps(config.get("architectures")),
                         " (it looks like a target: %s)" % config.get("model_type")
                         if config.get("model_type") in DEEPSEEK_MODEL_TYPES else "", accepted))
    return errors


def read_safetensors_header(path: str) -> Dict[str, Any]:
    """Return the JSON header of a safetensors file without reading tensor data.

    Format: 8-byte little-endian u64 header length N, then N bytes of JSON
    (``{name: {dtype, shape, data_offsets}, "__metadata__": {...}}``). Draft
    weights are GBs on shared storage; the header is all we need.
    """
    with open_model_file(path) as handle:
        size = os.fstat(handle.fileno()).st_size
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
            if isinstance(shape, list) and all(is_int(d) for d in shape):
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
    if not is_int(hidden_in) or hidden_in < 1:
        return None
    shape = find_fc_weight_shape(draft_dir)
    if shape is None or len(shape) != 2:
        return None
    fan_in = shape[1]
    if fan_in % hidden_in != 0:
        return None
    return fan_in // hidden_in
