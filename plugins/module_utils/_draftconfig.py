# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The draft's config.json, edited as text: read the ids SGLang reads, write new ones in the file's style.

And the draft's view: the role never writes into model storage (read-only, or shared by hosts on
releases that need other ids). The server reads a directory of the role's own instead: the
draft's ``config.json`` with the ids its release needs, beside a link to each of the draft's other
entries (weights, tokenizer, ...), so the model storage is only ever read.

Pure text in, text out (the module writes the file): what SGLang reads from
``eagle_config``, the look-alike keys it silently ignores, and the file rendered
back with its own indent, trailing newline and ASCII escaping so the diff shows
only the ids. Stdlib only: modules import it on the host as
``ansible_collections.fleetops.sglang.plugins.module_utils._draftconfig``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._modeldirs import open_model_file
from ansible_collections.fleetops.sglang.plugins.module_utils._speculative import is_int

# The key SGLang reads (since 0.4.9); there is no CLI flag for EAGLE3 serving.
EAGLE_CONFIG_KEY = "eagle_config"
LAYER_IDS_KEY = "eagle_aux_hidden_state_layer_ids"


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
        and all(is_int(a) and a == w for a, w in zip(actual, wanted))
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


CONFIG_NAME = "config.json"


def view_config_text(source_text: str, source_config: Dict[str, Any], layer_ids: Sequence[int]) -> str:
    """The view's config.json: the draft's own, with the ids the release needs (its text as it is when
    it lists them already)."""
    if same_ids(get_layer_ids(source_config), layer_ids):
        return source_text
    return render_config(with_layer_ids(source_config, layer_ids), source_text)


def view_links(source_dir: str) -> Dict[str, str]:
    """Each entry of the draft's directory but its config.json, by name, with the path its link in the
    view points to (the entry itself, not where a link of the draft leads: a Hugging Face snapshot's
    links keep working)."""
    return {name: os.path.join(source_dir, name) for name in sorted(os.listdir(source_dir)) if name != CONFIG_NAME}


def view_link_changes(view_dir: str, links: Dict[str, str]) -> Tuple[List[str], List[str], List[str]]:
    """What the view lacks and holds too much: (links to make or point again, links to remove, entries
    that are not links, which the role never removes)."""
    try:
        present = sorted(os.listdir(view_dir))
    except FileNotFoundError:
        present = []
    add, remove, foreign = [], [], []
    for name in present:
        path = os.path.join(view_dir, name)
        if name == CONFIG_NAME:
            if os.path.islink(path) or not os.path.isfile(path):
                foreign.append(name)
        elif not os.path.islink(path):
            foreign.append(name)
        elif name not in links:
            remove.append(name)
    for name, target in links.items():
        path = os.path.join(view_dir, name)
        if name not in foreign and not (os.path.islink(path) and os.readlink(path) == target):
            add.append(name)
    return add, remove, foreign


def read_bytes(path: str) -> Optional[bytes]:
    """A file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def view_differences(source_dir: str, view_dir: str, layer_ids: Sequence[int]) -> List[str]:
    """Why the view is not the draft's current files with ``layer_ids`` (empty when it is): what the
    probe reports, and the module would change. Raises OSError or ValueError on an unreadable draft."""
    with open_model_file(os.path.join(source_dir, CONFIG_NAME)) as fh:
        source_text = fh.read().decode("utf-8")
    source_config = json.loads(source_text)
    if not isinstance(source_config, dict):
        raise ValueError("%s does not hold a JSON object" % os.path.join(source_dir, CONFIG_NAME))
    reasons = []
    want = view_config_text(source_text, source_config, layer_ids).encode("utf-8")
    have = read_bytes(os.path.join(view_dir, CONFIG_NAME))
    if have is None:
        reasons.append("%s does not exist" % os.path.join(view_dir, CONFIG_NAME))
    elif have != want:
        reasons.append("its config.json is not the draft's with the ids %s" % list(layer_ids))
    add, remove, foreign = view_link_changes(view_dir, view_links(source_dir))
    if add:
        reasons.append("links to make: %s" % ", ".join(add))
    if remove:
        reasons.append("links to remove: %s" % ", ".join(remove))
    if foreign:
        reasons.append("not links: %s" % ", ".join(foreign))
    return reasons


def apply_view_links(view_dir: str, links: Dict[str, str], add: Sequence[str], remove: Sequence[str]) -> None:
    """Make the view's links as ``links`` says (the directory made, root's, 0755, where missing)."""
    os.makedirs(view_dir, mode=0o755, exist_ok=True)
    for name in remove:
        os.unlink(os.path.join(view_dir, name))
    for name in add:
        path = os.path.join(view_dir, name)
        if os.path.islink(path):
            os.unlink(path)
        os.symlink(links[name], path)
