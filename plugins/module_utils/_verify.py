# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proof that patched (or native) files capture what the draft was trained on.

Three kinds of evidence, all without importing torch or SGLang: grep evidence
(each patched line exactly once, where it belongs), compilation by the venv's own
interpreter, and a semantic check that runs the real ``set_eagle3_layers_to_capture``
on a fake model. ``verify_texts`` is the one entry point; a further check joins it
there, so every caller (patch, check mode, audit) gets it at once.

A fourth, ``forward_capture_check``, executes the release's forward-pass capture with
torch, under the venv's python (``_forward``). It runs only on ``state=present``
(after the patch, in check mode on the would-be texts, and on the native route), never
in an audit, so it is called next to ``verify_texts`` rather than inside it.
Standard library only (hosts run python3 3.9 to 3.13).
"""

from __future__ import annotations

import ast
import os
import re
import sys
import textwrap
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import DEEPSEEK_FILE, EngineError
from ansible_collections.fleetops.sglang.plugins.module_utils._forward import forward_check, forward_summary
from ansible_collections.fleetops.sglang.plugins.module_utils._hunks import function_spans, segment
from ansible_collections.fleetops.sglang.plugins.module_utils._families import (
    MODEL_FORWARD,
    MODEL_INIT,
    SET_EAGLE3,
    default_id_calls,
    native_layer_ids,
)

# DeepSeek-V3 depth; the semantic check runs the real method against it.
CHECK_NUM_LAYERS = 61

# Runs argv, returns (rc, stdout, stderr): AnsibleModule.run_command on a host.
RunCommand = Callable[[List[str]], Tuple[int, str, str]]


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
    seg = segment(source, qualname)
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
    fwd = segment(source, MODEL_FORWARD) or ""
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


def forward_capture_check(python: Optional[str], site_packages: str, route: str, ids: Sequence[int],
                          draft_ids: Sequence[int], run_command: Optional[Callable[..., Tuple[int, str, str]]],
                          texts: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Any], List[str]]:
    """(the ``forward`` result, errors): the release's capture code, executed (_forward).

    Errors only when it ran and failed. Without torch in the venv, or without
    ``python``, the result says why it did not run and there are no errors: the
    other checks stand alone. ``texts`` are the would-be files (check mode).
    """
    res = forward_check(python, site_packages, route, ids, draft_ids, run_command, texts=texts)
    res["summary"] = forward_summary(res)
    if res.get("executed") and not res.get("ok"):
        return res, ["forward: " + e for e in res.get("errors") or ["failed"]]
    return res, []
