# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The forward-capture harness, part 1: reading and compiling the release's own code.

What the harness executes is taken from the installed release's files: its methods,
compiled one by one with ``ast`` (annotations and decorators stripped) into the
namespace of stand-ins, and the order in which ModelRunner touches the capture ids.
Standard library only and no import of the collection: this file is also exec'd,
with the other harness files, under the SGLang venv's python (see _forward).
"""

from __future__ import annotations

import ast
import copy
import functools
from typing import Any, Callable, Dict, List, Optional, Tuple

DEEPSEEK_FILE = "sglang/srt/models/deepseek_v2.py"
COMMUNICATOR_FILE = "sglang/srt/layers/communicator.py"
PACKER_FILE = "sglang/srt/layers/aux_hidden_states.py"
STAGE_FILE = "sglang/srt/layers/layer_boundary/stage.py"
MODEL_RUNNER_FILE = "sglang/srt/model_executor/model_runner.py"
CUDA_GRAPH_FILE = "sglang/srt/model_executor/cuda_graph_runner.py"
# Every file the harness may read, relative to site-packages.
FORWARD_FILES = (DEEPSEEK_FILE, COMMUNICATOR_FILE, PACKER_FILE, STAGE_FILE, MODEL_RUNNER_FILE, CUDA_GRAPH_FILE)


class StandInError(AttributeError):
    """Something the real code read that no stand-in provides."""


# ------------------------------------------------------------ ModelRunner's order


def functions_of(source: Optional[str]) -> Dict[str, ast.FunctionDef]:
    """Every ``Class.method`` of the file, by qualified name (module-level functions are not needed)."""
    out: Dict[str, ast.FunctionDef] = {}
    if not source:
        return out
    for node in _tree(source).body:
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    out["%s.%s" % (node.name, sub.name)] = sub
    return out


def _calls_in_order(fn: Optional[ast.FunctionDef]) -> List[ast.Call]:
    if fn is None:
        return []
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _set_calls(fn: Optional[ast.FunctionDef], where: str) -> List[Tuple[str, str]]:
    """The set_eagle3_layers_to_capture calls in ``fn``: ("defaults"|"configured", where)."""
    return [("configured" if (c.args or c.keywords) else "defaults", where)
            for c in _calls_in_order(fn) if c.func.attr == "set_eagle3_layers_to_capture"]  # type: ignore[attr-defined]


def runner_events(model_runner: Optional[str], cuda_graph_runner: Optional[str]) -> List[Tuple[str, str]]:
    """The calls ModelRunner.initialize makes that touch the capture ids, in their order.

    Read from the release's own code: kernel warmup (``_dummy_run``), the first
    ``init_device_graphs()`` (``CudaGraphRunner.__init__``'s calls, then the capture
    itself, event "graphs"), ``init_aux_hidden_state_capture()`` and direct calls.
    Any argument counts as the draft's configured ids (every release passes them).
    """
    mr, cg = functions_of(model_runner), functions_of(cuda_graph_runner)
    events: List[Tuple[str, str]] = []
    graphs = False
    for call in _calls_in_order(mr.get("ModelRunner.initialize")):
        name = call.func.attr  # type: ignore[attr-defined]
        if name == "kernel_warmup":
            events += _set_calls(mr.get("ModelRunner._dummy_run"), "ModelRunner._dummy_run (kernel warmup)")
        elif name == "init_device_graphs" and not graphs:
            graphs = True
            events += _set_calls(cg.get("CudaGraphRunner.__init__"), "CudaGraphRunner.__init__")
            events.append(("graphs", "CUDA-graph capture"))
        elif name == "init_aux_hidden_state_capture":
            events += _set_calls(mr.get("ModelRunner.init_aux_hidden_state_capture"),
                                 "ModelRunner.init_aux_hidden_state_capture")
        elif name == "set_eagle3_layers_to_capture":
            events.append(("configured" if (call.args or call.keywords) else "defaults", "ModelRunner.initialize"))
    if not any(kind == "configured" for kind, _w in events):
        # 0.5.14+: initialize is split up; upstream applies the ids before any graph.
        aux = _set_calls(mr.get("ModelRunner.init_aux_hidden_state_capture"), "ModelRunner.init_aux_hidden_state_capture")
        events = (aux or [("configured", "draft ids (no call found in ModelRunner.initialize)")]) + events
    return events


# ------------------------------------------------------ the release's own code


def _strip(fn: ast.FunctionDef) -> ast.FunctionDef:
    args = fn.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        arg.annotation = None
    for arg in (args.vararg, args.kwarg):
        if arg is not None:
            arg.annotation = None
    fn.returns = None
    fn.decorator_list = []
    return fn


@functools.lru_cache(maxsize=8)
def _tree(source: str) -> ast.Module:
    """ast.parse, once per text (the model file is ~3,000 lines; layers load it 61 times)."""
    return ast.parse(source)


@functools.lru_cache(maxsize=64)
def _code(source: str, qualname: str) -> Any:
    cls, _sep, name = qualname.rpartition(".")
    for node in _tree(source).body:
        body = node.body if isinstance(node, ast.ClassDef) and node.name == cls else ([node] if not cls else [])
        for sub in body:
            if isinstance(sub, ast.FunctionDef) and sub.name == name:
                module = ast.Module(body=[_strip(copy.deepcopy(sub))], type_ignores=[])
                return compile(ast.fix_missing_locations(module), "<%s>" % qualname, "exec")
    raise StandInError("%s not found in the release's file" % qualname)


def load_function(source: str, qualname: str, namespace: Dict[str, Any]) -> Callable[..., Any]:
    """Compile ``Class.method`` (or a top-level function) from the release's file into ``namespace``."""
    exec(_code(source, qualname), namespace)  # noqa: S102 (the release's own code, the point of the check)
    return namespace.pop(qualname.rpartition(".")[2])


def has_function(source: Optional[str], qualname: str) -> bool:
    return bool(source) and qualname in functions_of(source)


def layer_call_arity(forward: Optional[ast.FunctionDef]) -> int:
    """How many values DeepseekV2Model.forward unpacks from ``layer(...)`` (2, or 3 from 0.5.10)."""
    for node in ast.walk(forward) if forward is not None else []:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "layer" \
                and isinstance(node.targets[0], ast.Tuple):
            return len(node.targets[0].elts)
    return 2


def init_literals(source: str) -> Dict[str, Any]:
    """``self.<attr> = <literal>`` assignments of the real DeepseekV2Model.__init__.

    The constructor itself builds the weights; what the capture needs from it is the
    initial state of its capture attributes (``layers_to_capture = []`` and, with the
    patch, the embedding flag), which the literal assignments are.
    """
    out: Dict[str, Any] = {}
    init = functions_of(source).get("DeepseekV2Model.__init__")
    if init is None:
        return out
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                if target.attr in ("layers_to_capture",) or "capture" in target.attr:
                    try:
                        out[target.attr] = ast.literal_eval(node.value)
                    except ValueError:
                        continue
    return out
