# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release family as read from SGLang's code, and what to do about it.

This is the file a new SGLang release should normally touch: the shape detectors
(which body ``set_eagle3_layers_to_capture`` has, how ``DeepseekV2Model.forward``
captures), the capture range of each forward family and the decision table.

The family is read from the *shape* of the code, never from the version string
alone: a rebuilt or locally edited wheel with a familiar version must not be
patched blindly. Standard library only (hosts run python3 3.9 to 3.13).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils import _speculative
from ansible_collections.fleetops.sglang.plugins.module_utils._hunks import parse_tree, segment

DEFAULT_LAYER_IDS = [-1, 2, 30]
SET_EAGLE3 = "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"
MODEL_INIT = "DeepseekV2Model.__init__"
MODEL_FORWARD = "DeepseekV2Model.forward"


# --------------------------------------------------------------------------- ids


def validate_layer_ids(value: Any) -> List[int]:
    """Return the user's layer ids, or raise ValueError naming every reason they cannot work.

    The rules are _speculative.validate_layer_ids' (the role's preflight lists the
    same findings): unique, ascending, ints only (``True`` would silently mean layer 1),
    -1 (the embedding) only first.
    """
    errors = _speculative.validate_layer_ids(value, var="layer_ids")
    if errors:
        raise ValueError("; ".join(errors))
    return list(value)


def native_layer_ids(layer_ids: Sequence[int]) -> List[int]:
    """Translate "output of layer N" ids to the raw capture indices of 0.5.14+.

    There, capture index i is the residual stream entering layer i: index 0 is the
    embedding output and index N+1 is the output of layer N.
    """
    return [0 if val == -1 else val + 1 for val in layer_ids]


# --------------------------------------------------------------- capture range

# Where each forward family captures, read in DeepseekV2Model.forward of the releases
# (and executed on CPU by tests/unit/plugins/module_utils/test_forward.py). Every family captures the stream
# *entering* layer i, inside ``for i in range(start_layer, end_layer)``, so the
# output of the last decoder layer (index num_hidden_layers) is never captured:
#   L (0.5.4.post2 .. 0.5.13.post1): before layer i, ``if i in self.layers_to_capture``;
#       the patch captures the embedding for -1 and maps N to index N + 1.
#   C (0.5.14 .. 0.5.16): layer i gets ``captured_last_layer_outputs`` when i is listed.
#   P (0.5.17 .. 0.5.20): the same, into AuxHiddenStatePacker(len(layers_to_capture)),
#       which raises "captured k of n" at run time for an index never reached.
#   R (0.5.21 ..): the same loop after the residual refactor.
# On native families index 0 is the embedding output and N + 1 the output of layer N.
CAPTURE_FORWARDS = {
    "L": "capture before layer i, for i < num_hidden_layers",
    "C": "capture of the input of decoder layer i, for i < num_hidden_layers",
    "P": "capture of the input of decoder layer i, for i < num_hidden_layers (packer)",
    "R": "capture of the input of decoder layer i, for i < num_hidden_layers (packer)",
}


def capturable_range(forward: Optional[str], num_hidden_layers: int) -> Tuple[int, int]:
    """Lowest and highest user id ("-1 = embedding, N = output of layer N") a family captures.

    ``forward`` None means "not installed yet": the range every supported family
    shares, which is what a fresh host is checked against before the install.
    """
    if forward is not None and forward not in CAPTURE_FORWARDS:
        raise ValueError("unknown forward family %r" % (forward,))
    # Every family today: index i < num_hidden_layers, and user id N is index N + 1.
    return -1, num_hidden_layers - 2


def capture_errors(layer_ids: Sequence[Any], num_hidden_layers: Optional[int], forward: Optional[str] = None,
                   release: Optional[str] = None, var: str = "sglang_eagle3_layer_ids") -> List[str]:
    """Ids that the release (or, before the install, no supported release) can capture.

    An id SGLang never reaches is not an error it reports: on 0.5.4.post2 .. 0.5.16 the
    draft is silently fed fewer hidden states than it was trained on, from 0.5.17 the
    server fails at the first forward pass. Either way it must be refused before
    anything is written.
    """
    if num_hidden_layers is None:
        return []
    low, high = capturable_range(forward, num_hidden_layers)
    ints = [v for v in layer_ids if isinstance(v, int) and not isinstance(v, bool)]
    beyond = [v for v in ints if v > high or v < low]
    if not beyond:
        return []
    if forward:
        where, how = "sglang %s (forward family %s)" % (release or "?", forward), CAPTURE_FORWARDS[forward]
    else:
        where, how = "no supported SGLang release", CAPTURE_FORWARDS["L"]
    return ["%s has %r, but the target model has %d hidden layers and %s never captures the output of its "
            "last decoder layer %d or beyond (%s); accepted for this release: -1 (the embedding output) first, "
            "then 0..%d" % (var, beyond, num_hidden_layers, where, num_hidden_layers - 1, how, high)]


# ------------------------------------------------------------------------ shape


@dataclass
class Shape:
    """The release family as read from the code itself."""

    body: str  # A | B | absent | unknown
    forward: str  # L | C | P | R | unknown
    default_id_calls: List[str] = field(default_factory=list)  # "file:qualname" of no-arg calls
    ids_on_runner: bool = False  # ModelRunner.__init__ stores eagle_aux_hidden_state_layer_ids


def _squash(code: str) -> str:
    return re.sub(r"\s+", " ", code)


def detect_body(source: str) -> str:
    """Body A: unconditional ``+1``; B: ``+1`` only when the first id is 1."""
    seg = segment(source, SET_EAGLE3)
    if seg is None:
        return "absent"
    flat = _squash(seg)
    plus_one = "self.model.layers_to_capture = [val + 1 for val in layer_ids]" in flat
    if plus_one and "layer_ids[0] == 1" in flat and "self.model.layers_to_capture = list(layer_ids)" in flat:
        return "B"
    if plus_one and "layer_ids[0]" not in flat:
        return "A"
    return "unknown"


def detect_forward(source: str) -> str:
    """How DeepseekV2Model.forward captures aux hidden states (the families above)."""
    seg = segment(source, MODEL_FORWARD)
    if seg is None:
        return "unknown"
    flat = _squash(seg)
    if "if i in self.layers_to_capture:" in flat and "aux_hidden_states.append(hidden_states + residual)" in flat \
            and re.search(r"^ {8}aux_hidden_states = \[\]$", seg, re.M):
        return "L"
    if "captured_last_layer_outputs" in flat:
        if "AuxHiddenStatePacker(" in flat:
            return "R" if "residual_batch" in flat else "P"
        if "aux_hidden_states = []" in flat:
            return "C"
    return "unknown"


def default_id_calls(source: str, rel: str) -> List[str]:
    """Functions calling ``set_eagle3_layers_to_capture()`` with no arguments.

    Up to 0.5.10.post1 these calls bake the default ids into CUDA graphs.
    """
    return ["%s:%s" % (rel, qual) for qual in _default_id_call_sites(source)]


@functools.lru_cache(maxsize=8)
def _default_id_call_sites(source: str) -> Tuple[str, ...]:
    """Qualnames of the functions in ``source`` holding a no-argument call (cached)."""
    tree = parse_tree(source)
    found: List[str] = []

    def visit(node: ast.AST, qual: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = qual
            if isinstance(child, ast.ClassDef):
                name = child.name if not qual else qual + "." + child.name
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name if not qual else qual + "." + child.name
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                    and child.func.attr == "set_eagle3_layers_to_capture"
                    and not child.args and not child.keywords):
                found.append(qual)
            visit(child, name)

    visit(tree, "")
    return tuple(found)


def runner_stores_ids(model_runner_source: str) -> bool:
    """True when ModelRunner.__init__ keeps the draft's ids on ``self`` (0.5.8+)."""
    seg = segment(model_runner_source, "ModelRunner.__init__")
    return bool(seg and "self.eagle_aux_hidden_state_layer_ids =" in seg)


# --------------------------------------------------------------------- decision

FAMILY_TEMPLATES = {
    ("A", "L"): "body_a_loop",
    ("B", "L"): "body_b_loop",
}
NATIVE_FORWARDS = ("C", "P", "R")


@dataclass
class Decision:
    decision: str  # patch | native | refuse
    family: str
    companion: Optional[str]  # companion template name, or None
    draft_layer_ids: Optional[List[int]]
    reason: str = ""


def decide(shape: Shape, layer_ids: Sequence[int], pipeline_parallel_size: int) -> Decision:
    """Choose patch / native / refuse from the code's shape, never the version."""
    family = "body_%s_%s" % (shape.body, shape.forward)
    if shape.body == "absent":
        return Decision("refuse", "absent", None, None,
                        "DeepseekV2ForCausalLM has no set_eagle3_layers_to_capture: EAGLE-3 with a "
                        "DeepSeek target is unsupported before 0.5.4.post2")
    if pipeline_parallel_size > 1:
        return Decision("refuse", family, None, None,
                        "pipeline_parallel_size %d > 1: the embedding lives on the first rank while "
                        "capture is configured on the last" % pipeline_parallel_size)
    if shape.body == "B" and shape.forward in NATIVE_FORWARDS:
        return Decision("native", "native_" + shape.forward, None, native_layer_ids(layer_ids))
    template = FAMILY_TEMPLATES.get((shape.body, shape.forward))
    if template is None:
        return Decision("refuse", family, None, None,
                        "unknown code shape (set_eagle3 body %s, forward capture %s)" % (shape.body, shape.forward))
    companion = None
    if shape.default_id_calls:
        companion = "companion_cg_attr" if shape.ids_on_runner else "companion_cg_local"
    return Decision("patch", template, companion, list(layer_ids))
