# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The draft's config.json, edited as text: read the ids SGLang reads, write new ones in the file's style.

Pure text in, text out (the module writes the file): what SGLang reads from
``eagle_config``, the look-alike keys it silently ignores, and the file rendered
back with its own indent, trailing newline and ASCII escaping so the diff shows
only the ids. Stdlib only: modules import it on the host as
``ansible_collections.fleetops.sglang.plugins.module_utils._draftconfig``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence

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
