# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe, decide, patch and verify SGLang's EAGLE-3 embedding capture on DeepSeek.

Pure standard-library logic shared by the ``sglang_eagle3`` Ansible module, the
pytest suite and ``scripts/check-all-releases``. It must run under whatever
``python3`` a host has (3.9 to 3.13) and therefore imports nothing from Ansible,
SGLang or torch.

Why the design looks the way it does:

* "Is this file what pip installed?" is answered by the ``sha256=`` entry that pip
  wrote into ``sglang-<ver>.dist-info/RECORD``, so no hash table ships with the role.
* The release family is read from the *shape* of the code (which body
  ``set_eagle3_layers_to_capture`` has, how ``DeepseekV2Model.forward`` captures),
  never from the version string alone: a rebuilt or locally edited wheel with a
  familiar version must not be patched blindly.
* Patches are hunks anchored on a function (``Class.method``): the old text must
  occur exactly once inside that function. From 0.5.11 the body-A line also occurs
  in ``set_dflash_layers_to_capture``; a file-wide search would be ambiguous.
* A file is "ours" only if reversing the hunks gives back the exact bytes RECORD
  vouches for, and re-applying them gives the current bytes. Markers alone prove
  nothing.
"""

from __future__ import annotations

import ast
import base64
import functools
import glob
import hashlib
import json
import os
import re
import sys
import tempfile
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

DEFAULT_LAYER_IDS = [-1, 2, 30]
DEFAULT_MARKER = "sglang-remediation eagle3-embed v1"
DEEPSEEK_FILE = "sglang/srt/models/deepseek_v2.py"
CUDA_GRAPH_FILE = "sglang/srt/model_executor/cuda_graph_runner.py"
MODEL_RUNNER_FILE = "sglang/srt/model_executor/model_runner.py"
COMPANION_FILES = (CUDA_GRAPH_FILE, MODEL_RUNNER_FILE)

SET_EAGLE3 = "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"
MODEL_INIT = "DeepseekV2Model.__init__"
MODEL_FORWARD = "DeepseekV2Model.forward"

# DeepSeek-V3 depth; the semantic check runs the real method against it.
CHECK_NUM_LAYERS = 61


class EngineError(Exception):
    """A failure whose message is meant for the operator as is."""


class Refusal(EngineError):
    """The host must not be changed (drift, unsupported shape, PP > 1)."""


# --------------------------------------------------------------------------- ids


def validate_layer_ids(value: Any) -> List[int]:
    """Return the user's layer ids, or raise ValueError saying what is wrong.

    The draft was trained on features in ascending layer order (SGLang concatenates
    captures in layer order, whatever order the config lists), so the ids must be
    unique and ascending; -1 (the embedding) can only come first. bool is rejected
    because ``True`` would silently mean layer 1.
    """
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError("layer_ids must be a non-empty list of integers, got %r" % (value,))
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError("layer_ids must hold integers only, got %r in %r" % (item, value))
        if item < -1:
            raise ValueError("layer_ids accepts -1 (embedding) and layer numbers >= 0, got %r" % (item,))
    ids = list(value)
    if len(set(ids)) != len(ids):
        raise ValueError("layer_ids must be unique, got %r" % (ids,))
    if ids != sorted(ids):
        raise ValueError("layer_ids must be ascending (captures are concatenated in layer order), got %r" % (ids,))
    return ids


def native_layer_ids(layer_ids: Sequence[int]) -> List[int]:
    """Translate "output of layer N" ids to the raw capture indices of 0.5.14+.

    There, capture index i is the residual stream entering layer i: index 0 is the
    embedding output and index N+1 is the output of layer N.
    """
    return [0 if val == -1 else val + 1 for val in layer_ids]


# --------------------------------------------------------------- capture range

# Where each forward family captures, read in DeepseekV2Model.forward of the releases
# (and executed on CPU, see sglang-facts.md). Every family captures the stream
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


# ------------------------------------------------------------------ installation


@dataclass
class Installation:
    """Where SGLang lives in a virtualenv and what pip recorded about it."""

    site_packages: str
    version: str
    dist_info: str
    record: Dict[str, str]  # relative path -> hex sha256, from RECORD

    def path(self, rel: str) -> str:
        return os.path.join(self.site_packages, rel)


def record_hash_to_hex(entry: str) -> Optional[str]:
    """Convert a RECORD hash (``sha256=<urlsafe b64, no padding>``) to hex."""
    if not entry.startswith("sha256="):
        return None
    b64 = entry[len("sha256="):]
    raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
    return raw.hex()


def parse_record(text: str) -> Dict[str, str]:
    """Map each RECORD path to its hex sha256 (files without a hash are skipped)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        # Paths in sglang's RECORD never contain commas; rsplit keeps us honest anyway.
        parts = line.rsplit(",", 2)
        if len(parts) != 3:
            continue
        digest = record_hash_to_hex(parts[1])
        if digest:
            out[parts[0]] = digest
    return out


def parse_metadata_version(text: str) -> Optional[str]:
    """Read ``Version:`` from a dist-info METADATA header."""
    for line in text.splitlines():
        if not line.strip():
            break
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def find_installation(venv: str) -> Installation:
    """Locate sglang and its dist-info under ``<venv>/lib/python3*/site-packages``."""
    candidates = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "sglang")))
    if not candidates:
        raise EngineError("no sglang package under %s/lib/python3*/site-packages" % venv)
    if len(candidates) > 1:
        raise EngineError("several sglang installs in %s: %s" % (venv, ", ".join(candidates)))
    site = os.path.dirname(candidates[0])
    infos = sorted(glob.glob(os.path.join(site, "sglang-*.dist-info")))
    if len(infos) != 1:
        raise EngineError("expected one sglang-*.dist-info in %s, found %d" % (site, len(infos)))
    with open(os.path.join(infos[0], "METADATA"), encoding="utf-8") as fh:
        version = parse_metadata_version(fh.read())
    if not version:
        raise EngineError("no Version in %s/METADATA" % infos[0])
    with open(os.path.join(infos[0], "RECORD"), encoding="utf-8") as fh:
        record = parse_record(fh.read())
    return Installation(site_packages=site, version=version, dist_info=infos[0], record=record)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------ hunks


@dataclass(frozen=True)
class Hunk:
    """One replacement anchored on a function; see templates/patches/*.j2."""

    file: str
    function: str
    old: str
    new: str
    optional: bool = False  # skip when the anchor function does not exist at all


def parse_patch(text: str) -> List[Hunk]:
    """Parse a rendered patch template (format described in the templates).

    Directive lines start with ``@@ ``; text outside hunks is ignored so template
    comments and Jinja whitespace handling cannot change the result.
    """
    hunks: List[Hunk] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "@@ hunk":
            i += 1
            continue
        i += 1
        meta: Dict[str, str] = {}
        while i < len(lines) and lines[i].strip() != "@@ old":
            if lines[i].strip():
                key, sep, val = lines[i].partition(":")
                if not sep:
                    raise ValueError("bad hunk header line %r" % lines[i])
                meta[key.strip()] = val.strip()
            i += 1
        body: Dict[str, List[str]] = {"old": [], "new": []}
        section = "old"
        i += 1
        while i < len(lines) and lines[i].strip() != "@@ end":
            if lines[i].strip() == "@@ new":
                section = "new"
            else:
                body[section].append(lines[i] + "\n")
            i += 1
        if i >= len(lines):
            raise ValueError("hunk for %s not closed by '@@ end'" % meta.get("function"))
        if "file" not in meta or "function" not in meta or not body["old"]:
            raise ValueError("hunk needs file, function and old text: %r" % meta)
        hunks.append(Hunk(
            file=meta["file"], function=meta["function"],
            old="".join(body["old"]), new="".join(body["new"]),
            optional=meta.get("optional", "false").lower() == "true",
        ))
        i += 1
    if not hunks:
        raise ValueError("patch text holds no hunks")
    return hunks


@functools.lru_cache(maxsize=8)
def _parse(source: str) -> ast.Module:
    """ast.parse, cached for the few texts one call looks at (about 3.5 MB a tree):
    function spans and the no-argument call scan read the same files, six texts at
    most. Callers must not modify the tree."""
    return ast.parse(source)


@functools.lru_cache(maxsize=16)
def function_spans(source: str) -> Dict[str, Tuple[int, int]]:
    """Character span of every top-level function and class method, by qualname.

    A qualname defined twice (conditional definitions) is dropped: anchoring on it
    would be ambiguous, so hunks on it fail as drift. Cached: every hunk and check
    asks about the same few texts, and parsing a 3,000-line file is the slow part.
    The returned dict must not be modified.
    """
    tree = _parse(source)
    starts = [0]
    for line in source.splitlines(True):
        starts.append(starts[-1] + len(line))
    spans: Dict[str, Tuple[int, int]] = {}
    dupes = set()

    def add(name: str, node: ast.AST) -> None:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = (starts[first - 1], starts[node.end_lineno])  # type: ignore[attr-defined]
        if name in spans:
            dupes.add(name)
        spans[name] = span

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node.name, node)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add("%s.%s" % (node.name, sub.name), sub)
    for name in dupes:
        del spans[name]
    return spans


def _occurrences(text: str, needle: str) -> List[int]:
    """Positions where ``needle`` starts a line (after indentation if it has none).

    An old text that carries its indentation must start at column 0, so a line at
    indent 12 never matches inside the same line at indent 16 (body B). An old text
    without indentation may follow any indentation (the CUDA-graph calls sit at
    different depths across releases).
    """
    found = []
    pos = text.find(needle)
    while pos != -1:
        line_start = text.rfind("\n", 0, pos) + 1
        prefix = text[line_start:pos]
        if (needle[:1] in " \t" and prefix == "") or (needle[:1] not in " \t" and prefix.strip() == ""):
            found.append(pos)
        pos = text.find(needle, pos + 1)
    return found


def hunk_state(source: str, hunk: Hunk) -> str:
    """'applied', 'clean', 'skip' (optional, anchor absent) or 'drift: <why>'."""
    spans = function_spans(source)
    if hunk.function not in spans:
        return "skip" if hunk.optional else "drift: function %s not found" % hunk.function
    start, end = spans[hunk.function]
    body = source[start:end]
    n_new = len(_occurrences(body, hunk.new)) if hunk.new else 0
    n_old = len(_occurrences(body, hunk.old))
    if hunk.new and n_new == 1 and n_old == len(_occurrences(hunk.new, hunk.old)):
        return "applied"
    if n_new == 0 and n_old == 1:
        return "clean"
    return "drift: in %s the old text occurs %d times and the new text %d times" % (hunk.function, n_old, n_new)


def _replace_in_function(source: str, function: str, old: str, new: str) -> str:
    start, end = function_spans(source)[function]
    body = source[start:end]
    (pos,) = _occurrences(body, old)
    return source[:start] + body[:pos] + new + body[pos + len(old):] + source[end:]


@dataclass
class ApplyResult:
    state: str  # applied | clean | drift
    text: str  # the file after applying (== input unless state is clean)
    reason: str = ""


def apply_hunks(source: str, hunks: Sequence[Hunk]) -> ApplyResult:
    """Apply every hunk or none: no fuzz, no partial application."""
    states = [hunk_state(source, h) for h in hunks]
    drift = [s for s in states if s.startswith("drift")]
    if drift:
        return ApplyResult("drift", source, "; ".join(s[len("drift: "):] for s in drift))
    real = [s for s in states if s != "skip"]
    if all(s == "applied" for s in real):
        return ApplyResult("applied", source)
    if not all(s == "clean" for s in real):
        return ApplyResult("drift", source, "some hunks are applied and others are not")
    text = source
    for hunk, state in zip(hunks, states):
        if state == "clean":
            text = _replace_in_function(text, hunk.function, hunk.old, hunk.new)
    return ApplyResult("clean", text)


def reverse_hunks(source: str, hunks: Sequence[Hunk]) -> Optional[str]:
    """Undo applied hunks; None unless every non-skipped hunk is applied."""
    text = source
    for hunk in reversed(list(hunks)):
        state = hunk_state(text, hunk)
        if state == "skip":
            continue
        if state != "applied":
            return None
        text = _replace_in_function(text, hunk.function, hunk.new, hunk.old)
    return text


# ------------------------------------------------------------------------ files


@dataclass
class FileProbe:
    """What a target file is and what its pristine text would be."""

    rel: str
    path: str
    state: str  # pristine | ours | drift | missing
    sha256: str
    record_sha256: Optional[str]
    text: str
    pristine_text: Optional[str]
    reason: str = ""


def read_text(path: str) -> Tuple[bytes, str]:
    with open(path, "rb") as fh:
        data = fh.read()
    return data, data.decode("utf-8")


def probe_file(inst: Installation, rel: str, hunk_sets: Sequence[Sequence[Hunk]]) -> FileProbe:
    """Classify one file as pristine, ours (for one of ``hunk_sets``) or drift."""
    path = inst.path(rel)
    expected = inst.record.get(rel)
    if not os.path.exists(path):
        return FileProbe(rel, path, "missing", "", expected, "", None, "file does not exist")
    data, text = read_text(path)
    digest = sha256_hex(data)
    if expected is None:
        return FileProbe(rel, path, "drift", digest, None, text, None, "no sha256 for it in RECORD")
    if digest == expected:
        return FileProbe(rel, path, "pristine", digest, expected, text, text)
    for hunks in hunk_sets:
        mine = [h for h in hunks if h.file == rel]
        if not mine:
            continue
        try:
            base = reverse_hunks(text, mine)
        except SyntaxError:
            base = None
        if base is None or sha256_hex(base.encode("utf-8")) != expected:
            continue
        if apply_hunks(base, mine).text == text:
            return FileProbe(rel, path, "ours", digest, expected, text, base)
    return FileProbe(rel, path, "drift", digest, expected, text, None,
                     "sha256 %s matches neither RECORD (%s) nor our patch applied to it" % (digest, expected))


# ------------------------------------------------------------------------ shape


@dataclass
class Shape:
    """The release family as read from the code itself."""

    body: str  # A | B | absent | unknown
    forward: str  # L | C | P | R | unknown
    default_id_calls: List[str] = field(default_factory=list)  # "file:qualname" of no-arg calls
    ids_on_runner: bool = False  # ModelRunner.__init__ stores eagle_aux_hidden_state_layer_ids


def _segment(source: str, spans: Dict[str, Tuple[int, int]], name: str) -> Optional[str]:
    if name not in spans:
        return None
    start, end = spans[name]
    return source[start:end]


def _squash(code: str) -> str:
    return re.sub(r"\s+", " ", code)


def detect_body(source: str) -> str:
    """Body A: unconditional ``+1``; B: ``+1`` only when the first id is 1."""
    spans = function_spans(source)
    seg = _segment(source, spans, SET_EAGLE3)
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
    """How DeepseekV2Model.forward captures aux hidden states (see sglang-facts.md)."""
    seg = _segment(source, function_spans(source), MODEL_FORWARD)
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
    tree = _parse(source)
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
    seg = _segment(model_runner_source, function_spans(model_runner_source), "ModelRunner.__init__")
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


# ----------------------------------------------------------------------- verify


def _strip_annotations(fn: ast.FunctionDef) -> ast.FunctionDef:
    args = fn.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        arg.annotation = None
    if args.vararg:
        args.vararg.annotation = None
    if args.kwarg:
        args.kwarg.annotation = None
    fn.returns = None
    fn.decorator_list = []
    return fn


def load_method(source: str, qualname: str) -> Callable[..., Any]:
    """Compile one method from the real file, without importing torch or SGLang."""
    seg = _segment(source, function_spans(source), qualname)
    if seg is None:
        raise EngineError("%s not found" % qualname)
    tree = ast.parse(textwrap.dedent(seg))
    fn = _strip_annotations(tree.body[0])  # type: ignore[arg-type]
    module = ast.Module(body=[fn], type_ignores=[])
    namespace: Dict[str, Any] = {}
    exec(compile(ast.fix_missing_locations(module), "<%s>" % qualname, "exec"), namespace)
    return namespace[fn.name]


def _fake_causal_lm(num_layers: int = CHECK_NUM_LAYERS) -> Any:
    """Just what set_eagle3_layers_to_capture touches, on the last (only) PP rank."""
    model = types.SimpleNamespace(layers_to_capture=[], capture_embedding_for_eagle3=False,
                                  start_layer=0, end_layer=num_layers)
    return types.SimpleNamespace(
        pp_group=types.SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1),
        config=types.SimpleNamespace(num_hidden_layers=num_layers),
        model=model, capture_aux_hidden_states=False,
    )


def run_set_layers(method: Callable[..., Any], calls: Sequence[Optional[List[int]]]) -> Dict[str, Any]:
    """Call the method in order on one fake model and report the resulting state."""
    fake = _fake_causal_lm()
    for ids in calls:
        if ids is None:
            method(fake)
        else:
            method(fake, list(ids))
    return {
        "layers_to_capture": list(fake.model.layers_to_capture),
        "capture_embedding_for_eagle3": bool(fake.model.capture_embedding_for_eagle3),
        "capture_aux_hidden_states": bool(fake.capture_aux_hidden_states),
    }


# Ids without -1 that must behave exactly as upstream after patching: the SpecForge
# DeepSeek-V3 config, the speculators convention, the native ones, a single layer.
UPSTREAM_ID_SAMPLES = ([1, 29, 57], [2, 30, 58], [0, 3, 31], [5], [2, 30])


def semantic_check_patch(pristine: str, patched: str, layer_ids: Sequence[int]) -> List[str]:
    """Errors (empty if none) from running the real pristine and patched methods."""
    errors: List[str] = []
    old = load_method(pristine, SET_EAGLE3)
    new = load_method(patched, SET_EAGLE3)
    ids = list(layer_ids)
    want_layers = [v + 1 for v in ids if v >= 0]
    got = run_set_layers(new, [ids])
    if got["capture_embedding_for_eagle3"] != (-1 in ids) or got["layers_to_capture"] != want_layers:
        errors.append("ids %r gave %r, expected embedding=%s layers_to_capture=%r"
                      % (ids, got, -1 in ids, want_layers))
    for sample in UPSTREAM_ID_SAMPLES:
        up, mine = run_set_layers(old, [sample]), run_set_layers(new, [sample])
        mine_flag = mine.pop("capture_embedding_for_eagle3")
        up.pop("capture_embedding_for_eagle3")
        if up != mine or mine_flag:
            errors.append("ids %r: upstream gives %r, patched %r (embedding=%s)" % (sample, up, mine, mine_flag))
    up, mine = run_set_layers(old, [None]), run_set_layers(new, [ids, None])
    mine_flag = mine.pop("capture_embedding_for_eagle3")
    up.pop("capture_embedding_for_eagle3")
    if up != mine or mine_flag:
        errors.append("default (no ids) after %r: upstream %r, patched %r (embedding=%s)" % (ids, up, mine, mine_flag))
    return errors


def semantic_check_native(pristine: str, layer_ids: Sequence[int]) -> List[str]:
    """Prove the translated ids reach layers_to_capture unchanged on 0.5.14+.

    On C/P/R forwards capture index i is the residual stream entering layer i
    (index 0 = embedding output, captured as a copy). If the translated list starts
    with 1, body B's heuristic would add 1 again; that is caught here.
    """
    ids = native_layer_ids(layer_ids)
    got = run_set_layers(load_method(pristine, SET_EAGLE3), [ids])
    if sorted(got["layers_to_capture"]) != sorted(ids):
        return ["native ids %r became layers_to_capture %r (not expressible natively)" % (ids, got["layers_to_capture"])]
    return []


EVIDENCE_RULES = (
    # (name, regex, qualname where it must appear exactly once)
    ("init_flag", r"^\s*self\.capture_embedding_for_eagle3 = False\b", MODEL_INIT),
    ("reset_flag", r"^\s*self\.model\.capture_embedding_for_eagle3 = False\b", SET_EAGLE3),
    ("set_flag", r"^\s*self\.model\.capture_embedding_for_eagle3 = -1 in layer_ids\b", SET_EAGLE3),
    ("filter_negative", r"^\s*self\.model\.layers_to_capture = \[val \+ 1 for val in layer_ids if val >= 0\]", SET_EAGLE3),
    ("append_embedding", r"^\s*aux_hidden_states\.append\(hidden_states\.clone\(\)\)", MODEL_FORWARD),
)


def _line_of(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def grep_evidence(source: str, rel: str) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Lines proving the patch is in place, and errors unless each occurs once where expected."""
    spans = function_spans(source)
    evidence: List[Dict[str, Any]] = []
    errors: List[str] = []
    lines = source.splitlines()
    for name, pattern, qual in EVIDENCE_RULES:
        rx = re.compile(pattern)
        hits = [n for n, line in enumerate(lines, 1) if rx.search(line)]
        evidence.extend({"path": rel, "line": n, "text": lines[n - 1].strip(), "what": name} for n in hits)
        if qual not in spans:
            errors.append("%s: %s missing" % (name, qual))
            continue
        lo, hi = _line_of(source, spans[qual][0]), _line_of(source, spans[qual][1] - 1)
        inside = [n for n in hits if lo <= n <= hi]
        if len(hits) != 1 or len(inside) != 1:
            errors.append("%s: expected exactly one line in %s, found %d (%d in it)" % (name, qual, len(hits), len(inside)))
    # The embedding must be appended before the first layer's capture.
    fwd = _segment(source, spans, MODEL_FORWARD) or ""
    a, b = fwd.find("aux_hidden_states.append(hidden_states.clone())"), fwd.find("for i in range(")
    if a == -1 or b == -1 or a > b:
        errors.append("append_embedding: not placed before the layer loop in %s" % MODEL_FORWARD)
    return evidence, errors


def companion_evidence(source: str, rel: str) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Configured-id calls in a companion file; no no-argument call may remain."""
    lines = source.splitlines()
    rules = (
        ("configured_ids_call",
         r"set_eagle3_layers_to_capture\(\s*self\.(model_runner\.)?eagle_aux_hidden_state_layer_ids"),
        ("ids_resolved_before_graphs", r"self\.eagle_aux_hidden_state_layer_ids = ModelConfig\.from_server_args\("),
    )
    evidence = [{"path": rel, "line": n, "text": line.strip(), "what": what}
                for n, line in enumerate(lines, 1)
                for what, rx in rules if re.search(rx, line)]
    left = default_id_calls(source, rel)
    errors = ["no-argument set_eagle3_layers_to_capture() still in %s" % c for c in left]
    return evidence, errors


# Runs argv, returns (rc, stdout, stderr): AnsibleModule.run_command on a host.
RunCommand = Callable[[List[str]], Tuple[int, str, str]]


def compile_check(path: str, python: Optional[str], run_command: Optional[RunCommand] = None) -> Optional[str]:
    """Compile the file (no .pyc written); None on success, else the error text.

    With ``python`` the venv's interpreter compiles it, since the host python may be
    older than the one SGLang runs under; the caller's ``run_command`` runs it (the
    module's, so that its environment and error handling apply).
    """
    if not python or os.path.realpath(python) == os.path.realpath(sys.executable):
        try:
            with open(path, "rb") as fh:
                compile(fh.read(), path, "exec", dont_inherit=True)
            return None
        except SyntaxError as exc:
            return "%s: %s" % (path, exc)
    code = "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec', dont_inherit=True)"
    if run_command is None:
        raise EngineError("compiling with %s needs a command runner (Request.run_command)" % python)
    rc, _out, err = run_command([python, "-c", code, path])
    return None if rc == 0 else (err.strip() or "compile failed")


# ------------------------------------------------------------------------ write


def backup_path(backup_dir: str, version: str, rel: str) -> str:
    return os.path.join(backup_dir, "sglang-" + version, rel)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` in one rename, keeping its mode and (if allowed) owner."""
    st = os.stat(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, st.st_mode & 0o7777)
        try:
            os.chown(tmp, st.st_uid, st.st_gid)
        except OSError:
            pass  # not root: the file is ours already
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_backup(backup_dir: str, version: str, probe: FileProbe) -> str:
    """Copy the pristine bytes out of site-packages before the first write."""
    dest = backup_path(backup_dir, version, probe.rel)
    os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
    data = (probe.pristine_text or "").encode("utf-8")
    if sha256_hex(data) != probe.record_sha256:
        raise EngineError("refusing to back up %s: not the RECORD bytes" % probe.path)
    if not (os.path.exists(dest) and sha256_hex(read_text(dest)[0]) == probe.record_sha256):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, dest)
    return dest


def pristine_bytes_for_restore(backup_dir: str, version: str, probe: FileProbe) -> bytes:
    """The RECORD-verified pristine bytes: from the backup, else from reversing our hunks."""
    dest = backup_path(backup_dir, version, probe.rel)
    if os.path.exists(dest):
        data = read_text(dest)[0]
        if sha256_hex(data) == probe.record_sha256:
            return data
    if probe.pristine_text is not None:
        data = probe.pristine_text.encode("utf-8")
        if sha256_hex(data) == probe.record_sha256:
            return data
    raise EngineError("no backup of %s matching RECORD sha256 %s" % (probe.path, probe.record_sha256))


# ----------------------------------------------------------------------- engine


@dataclass
class Request:
    venv: str
    layer_ids: List[int] = field(default_factory=lambda: list(DEFAULT_LAYER_IDS))
    patches: Dict[str, str] = field(default_factory=dict)  # template name -> rendered text
    state: str = "present"  # present | absent | audit
    backup_dir: str = "/var/lib/sglang-remediation/backup"
    pipeline_parallel_size: int = 1
    python: Optional[str] = None
    check_mode: bool = False
    run_command: Optional[RunCommand] = field(default=None, compare=False, repr=False)


def _hunks(patches: Dict[str, str], name: str) -> List[Hunk]:
    if name not in patches:
        raise EngineError("patch template %r was not passed in 'patches' (got: %s)"
                          % (name, ", ".join(sorted(patches)) or "none"))
    return parse_patch(patches[name])


def _known_hunk_sets(patches: Dict[str, str]) -> List[List[Hunk]]:
    return [parse_patch(text) for _name, text in sorted(patches.items())]


def run(req: Request) -> Dict[str, Any]:
    """Probe, decide, apply and verify in one pass; returns the module's result.

    The result carries ``failed: True`` and ``msg`` when the host must not or could
    not be changed; the host is then as it was before the call.
    """
    result: Dict[str, Any] = {
        "changed": False, "release": None, "family": None, "decision": None,
        "file_state_before": None, "sha256_before": None, "sha256_after": None,
        "record_sha256": None, "companion": {"needed": False, "files": []},
        "draft_layer_ids": None, "evidence": [], "checks": {"compiled": None, "semantic": None},
        "compliant": False, "msg": "", "diff": [], "failed": False,
    }
    try:
        ids = validate_layer_ids(req.layer_ids)
        inst = find_installation(req.venv)
        result["release"] = inst.version
        _run(req, ids, inst, result)
    except Refusal as exc:
        # audit only reports: a refusal is a finding there, not a task failure.
        result["failed"] = req.state != "audit"
        result["decision"] = "refuse"
        result["compliant"] = False
        result["msg"] = "sglang %s: %s" % (result["release"] or "unknown release", exc)
    except (EngineError, ValueError, OSError, SyntaxError, UnicodeDecodeError) as exc:
        result["failed"] = True
        result["msg"] = "sglang %s: %s" % (result["release"] or "unknown release", exc)
    if result["failed"]:
        result["changed"] = False
        result["diff"] = []
    return result


def _refuse(path: str, reason: str) -> None:
    raise Refusal("%s: refused: %s" % (path, reason))


def _run(req: Request, ids: List[int], inst: Installation, result: Dict[str, Any]) -> None:
    known = _known_hunk_sets(req.patches)
    main = probe_file(inst, DEEPSEEK_FILE, known)
    result.update(file_state_before=main.state, sha256_before=main.sha256,
                  sha256_after=main.sha256, record_sha256=main.record_sha256)
    if main.state in ("drift", "missing"):
        _refuse(main.path, "file is %s (%s)" % (main.state, main.reason))
    if main.pristine_text is None:
        raise AssertionError("a patched file has no pristine text")
    shape = Shape(body=detect_body(main.pristine_text), forward=detect_forward(main.pristine_text))
    companions: List[FileProbe] = []
    for rel in COMPANION_FILES:
        probe = probe_file(inst, rel, known)
        if probe.state == "missing":
            continue
        companions.append(probe)
        # A drifted companion is read as it is, so a leftover no-argument call
        # still marks the release as needing the companion (and is then refused).
        text = probe.pristine_text if probe.pristine_text is not None else probe.text
        shape.default_id_calls += default_id_calls(text, rel)
        if rel == MODEL_RUNNER_FILE:
            shape.ids_on_runner = runner_stores_ids(text)
    dec = decide(shape, ids, req.pipeline_parallel_size)
    result.update(family=dec.family, decision=dec.decision, draft_layer_ids=dec.draft_layer_ids)
    result["shape"] = {"body": shape.body, "forward": shape.forward, "default_id_calls": shape.default_id_calls}
    if dec.decision == "refuse":
        _refuse(main.path, dec.reason)
    if dec.decision == "native":
        _native(main, ids, result)
        return
    plan: List[Tuple[FileProbe, List[Hunk]]] = [(main, _hunks(req.patches, dec.family))]
    if dec.companion:
        hunks = _hunks(req.patches, dec.companion)
        for probe in companions:
            mine = [h for h in hunks if h.file == probe.rel]
            if mine:
                plan.append((probe, mine))
        result["companion"] = {"needed": True, "template": dec.companion,
                               "files": [p.rel for p, _planned in plan[1:]]}
    for probe, _planned in plan:
        if probe.state == "drift":
            _refuse(probe.path, "file is drift (%s)" % probe.reason)
    if req.state == "absent":
        _restore(req, inst, [p for p, _planned in plan], result)
    else:
        _present(req, ids, inst, plan, result)


def _native(main: FileProbe, ids: List[int], result: Dict[str, Any]) -> None:
    """0.5.14+: no source change; prove the translated ids reach layers_to_capture."""
    if main.pristine_text is None:
        raise AssertionError("a patched file has no pristine text")
    errors = semantic_check_native(main.pristine_text, ids)
    result["checks"] = {"compiled": None, "semantic": not errors}
    if errors:
        _refuse(main.path, "; ".join(errors))
    result["compliant"] = main.state == "pristine"
    result["msg"] = ("native embedding capture: the draft config must list eagle_aux_hidden_state_layer_ids "
                     "%r; no source change" % (result["draft_layer_ids"],))


def _diff(path: str, before: str, after: str) -> Dict[str, str]:
    return {"before_header": path, "after_header": path, "before": before, "after": after}


def _restore(req: Request, inst: Installation, probes: List[FileProbe], result: Dict[str, Any]) -> None:
    """state=absent: put the RECORD bytes back wherever our patch is in place."""
    for probe in probes:
        if probe.state != "ours":
            continue
        data = pristine_bytes_for_restore(req.backup_dir, inst.version, probe)
        result["diff"].append(_diff(probe.path, probe.text, data.decode("utf-8")))
        if not req.check_mode:
            atomic_write(probe.path, data)
        result["changed"] = True
        if probe.rel == DEEPSEEK_FILE:
            result["sha256_after"] = sha256_hex(data)
    result["compliant"] = True
    result["msg"] = "pristine files restored" if result["changed"] else "files already pristine"


def verify_texts(texts: Dict[str, str], pristine: Dict[str, str], ids: Sequence[int], paths: Dict[str, str],
                 python: Optional[str], on_disk: bool,
                 run_command: Optional[RunCommand] = None) -> Tuple[List[Dict[str, Any]], Dict[str, Any], List[str]]:
    """Evidence, compile and semantic checks over patched texts (on disk, or in memory for check mode)."""
    evidence: List[Dict[str, Any]] = []
    errors: List[str] = []
    for rel, text in texts.items():
        ev, err = grep_evidence(text, rel) if rel == DEEPSEEK_FILE else companion_evidence(text, rel)
        evidence += ev
        errors += err
    compiled = True
    for rel, text in texts.items():
        if on_disk:
            problem = compile_check(paths[rel], python, run_command)
        else:
            try:
                compile(text, paths[rel], "exec", dont_inherit=True)
                problem = None
            except SyntaxError as exc:
                problem = str(exc)
        if problem:
            compiled = False
            errors.append("compile: " + problem)
    sem = semantic_check_patch(pristine[DEEPSEEK_FILE], texts[DEEPSEEK_FILE], ids)
    errors += sem
    return evidence, {"compiled": compiled, "semantic": not sem}, errors


def _present(req: Request, ids: List[int], inst: Installation,
             plan: List[Tuple[FileProbe, List[Hunk]]], result: Dict[str, Any]) -> None:
    """state=present (write unless check mode) or audit (never write)."""
    targets: Dict[str, str] = {}
    pristine: Dict[str, str] = {}
    paths: Dict[str, str] = {}
    to_write: List[FileProbe] = []
    for probe, hunks in plan:
        if probe.pristine_text is None:
            raise AssertionError("a patched file has no pristine text")
        res = apply_hunks(probe.pristine_text, hunks)
        if res.state != "clean":
            _refuse(probe.path, "patch does not apply to the pristine file: %s" % (res.reason or res.state))
        targets[probe.rel], pristine[probe.rel], paths[probe.rel] = res.text, probe.pristine_text, probe.path
        if probe.text != res.text:
            to_write.append(probe)
            result["diff"].append(_diff(probe.path, probe.text, res.text))
    pending = ", ".join(p.rel for p in to_write)
    if req.state == "audit" or req.check_mode:
        # Verify what the files would be, without touching them.
        evidence, checks, errors = verify_texts(targets, pristine, ids, paths, req.python, on_disk=False,
                                                run_command=req.run_command)
        result.update(evidence=evidence, checks=checks)
        if req.state == "audit":
            result["diff"] = []
            result["compliant"] = not to_write and not errors
            result["msg"] = ("compliant" if result["compliant"] else
                             "not compliant: " + ("; ".join(errors) or "not patched: " + pending))
            return
        if errors:
            raise EngineError("the patched text would fail verification: " + "; ".join(errors))
        result.update(changed=bool(to_write), compliant=not to_write,
                      sha256_after=sha256_hex(targets[DEEPSEEK_FILE].encode("utf-8")))
        result["msg"] = ("would patch: " + pending) if to_write else "already patched"
        return
    written: List[FileProbe] = []
    try:
        for probe in to_write:
            save_backup(req.backup_dir, inst.version, probe)
        for probe in to_write:
            atomic_write(probe.path, targets[probe.rel].encode("utf-8"))
            written.append(probe)
        on_disk = {rel: read_text(paths[rel])[1] for rel in targets}
        evidence, checks, errors = verify_texts(on_disk, pristine, ids, paths, req.python, on_disk=True,
                                                run_command=req.run_command)
        if errors:
            raise EngineError("verification failed after writing, pristine files restored: " + "; ".join(errors))
    except BaseException:
        for probe in written:
            atomic_write(probe.path, pristine_bytes_for_restore(req.backup_dir, inst.version, probe))
        raise
    result.update(evidence=evidence, checks=checks, changed=bool(to_write), compliant=True,
                  sha256_after=sha256_hex(read_text(paths[DEEPSEEK_FILE])[0]))
    result["msg"] = ("patched: " + pending) if to_write else "already patched"


# ------------------------------------------------------------ audit memo

# An audit of the same bytes by the same engine with the same request gives the
# same answer, so the probe of a compliant host need not parse ~10k lines of
# SGLang again on every rerun. The memo is keyed on everything the audit reads
# (audit_inputs lists it; tests/test_audit_memo.py proves the audit opens
# nothing else) plus the engine's own source and the interpreter: change one
# byte of any of them and the audit runs in full again.
AUDIT_MEMO_VERSION = 1


def _engine_source() -> Optional[bytes]:
    """This module's source, also when it runs from Ansible's zipped payload."""
    loader = globals().get("__loader__")
    try:
        source = loader.get_source(__name__) if loader is not None else None
    except (ImportError, OSError):
        source = None
    return source.encode("utf-8") if source else None


def audit_inputs(venv: str) -> List[str]:
    """The paths an audit of ``venv`` reads, in order (the files may not exist)."""
    candidates = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "sglang")))
    paths = ["glob:" + "|".join(candidates)]
    if len(candidates) != 1:
        return paths
    site = os.path.dirname(candidates[0])
    infos = sorted(glob.glob(os.path.join(site, "sglang-*.dist-info")))
    paths.append("glob:" + "|".join(infos))
    if len(infos) == 1:
        paths += [os.path.join(infos[0], "METADATA"), os.path.join(infos[0], "RECORD")]
    paths += [os.path.join(site, rel) for rel in (DEEPSEEK_FILE,) + COMPANION_FILES]
    return paths


def audit_key(req: Request) -> Optional[str]:
    """sha256 over the audit's inputs, or None when they cannot be pinned down."""
    source = _engine_source()
    if source is None:
        return None
    try:
        ids = validate_layer_ids(req.layer_ids)
    except ValueError:
        return None
    h = hashlib.sha256()
    h.update(repr((AUDIT_MEMO_VERSION, sys.version, sha256_hex(source), os.path.abspath(req.venv), ids,
                   sorted(req.patches.items()), req.pipeline_parallel_size, req.backup_dir)).encode("utf-8"))
    for path in audit_inputs(req.venv):
        if path.startswith("glob:"):
            h.update(path.encode("utf-8"))
            continue
        try:
            with open(path, "rb") as fh:
                digest = sha256_hex(fh.read())
        except FileNotFoundError:
            digest = "missing"
        except OSError:
            return None  # unreadable: the full audit reports why
        h.update(("%s=%s\n" % (path, digest)).encode("utf-8"))
    return h.hexdigest()


def _write_memo(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def audit_memoized(req: Request, memo_file: Optional[str], write: bool) -> Dict[str, Any]:
    """``run(req)`` for state=audit, answered from ``memo_file`` when its key still holds.

    The result carries ``memo``: ``hit``, ``miss`` (computed, and stored when
    ``write``) or ``off`` (no memo file, or inputs that cannot be keyed). After a
    miss it also carries ``memo_key`` for ``store_audit_memo``, unless an input
    changed while the audit ran. A memo that cannot be read or written only costs
    the full audit.
    """
    if req.state != "audit":
        raise ValueError("only audits are memoized")
    key = audit_key(req) if memo_file else None
    if key is None:
        result = run(req)
        result["memo"] = "off"
        return result
    try:
        with open(memo_file, encoding="utf-8") as fh:
            memo = json.load(fh)
        if isinstance(memo, dict) and memo.get("key") == key and isinstance(memo.get("result"), dict):
            result = memo["result"]
            result["memo"] = "hit"
            return result
    except (OSError, ValueError):
        pass
    result = run(req)
    result["memo"] = "miss"
    # An error (unreadable file, broken install) is not a verdict on the bytes, and
    # bytes that changed during the audit have no single verdict: neither is stored.
    if not result["failed"] and audit_key(req) == key:
        result["memo_key"] = key
        if write:
            store_audit_memo(memo_file, result)
    return result


def store_audit_memo(memo_file: str, result: Dict[str, Any]) -> bool:
    """Store a missed audit (with its ``memo_key``) in ``memo_file``; False when it cannot."""
    key = result.get("memo_key")
    if not key or result.get("memo") != "miss":
        return False
    stored = {k: v for k, v in result.items() if k not in ("memo", "memo_key")}
    try:
        # Key order kept: the role's fingerprint prints the companion dict as Python does.
        _write_memo(memo_file, json.dumps({"key": key, "result": stored}).encode("utf-8"))
    except OSError:
        return False
    return True


# ------------------------------------------------------------------ fingerprint

FINGERPRINT_STYLES = ("role", "canonical")


def fingerprint_value(result: Dict[str, Any], style: str = "role") -> str:
    """The text the fingerprint's ``sglang`` component hashes, from a ``run()`` result.

    ``role`` is byte for byte what vars/main.yml ``_sglang_fp_components.sglang``
    renders today: release, sha256_after and the companion dict as Jinja prints it
    (Python's repr), joined by spaces. ``canonical`` says the same without depending
    on how a template prints a dict: release, deepseek_v2.py sha256 and the companion
    template name (``none`` without one). Audit and present give the same text on a
    compliant host, since sha256_after is then the file's current hash.
    """
    def text(value: Any) -> str:
        return "" if value is None else str(value)

    companion = result.get("companion")
    if style == "role":
        return "%s %s %s" % (text(result.get("release")), text(result.get("sha256_after")), text(companion))
    if style == "canonical":
        template = companion.get("template") if isinstance(companion, dict) else None
        return "release=%s deepseek_v2.py=%s companion=%s" % (
            text(result.get("release")), text(result.get("sha256_after")), template or "none")
    raise ValueError("fingerprint style must be one of %s, got %r" % (", ".join(FINGERPRINT_STYLES), style))
