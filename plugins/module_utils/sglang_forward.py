# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Forward-capture check: run the installed release's own capture code on CPU tensors.

The other checks prove a patch by reading it (grep evidence, compile) and by running
``set_eagle3_layers_to_capture`` alone. What the draft is fed is built elsewhere: in
``DeepseekV2Model.forward`` and, from 0.5.14, in the decoder layer, its
``LayerCommunicator`` (or the layer boundary, 0.5.21+) and the aux-hidden-state
packer. This check executes that code, taken from the release's files, with torch
tensors and small strict stand-ins, in the state ModelRunner leaves the model in
before CUDA-graph capture and after it, and names what was captured.

Two halves live in this one file, because Ansible ships module_utils alone:

* the caller's half (standard library only, any host python): builds the request,
  runs this very file's source under the SGLang venv's python through the module's
  ``run_command`` (never ``subprocess``; source and request in a private temp file)
  and reads one JSON line back;
* the harness (``harness_main`` and below): runs in that venv's python, the one that
  imports torch. Where torch is missing it says so and the caller reports
  "not executed (no torch)".

Stand-ins are strict: an attribute or global nobody stubbed raises, so a release that
starts to depend on something new fails the check instead of passing on a default.
The norms keep the GPU kernel's aliasing: ``norm(x, residual)`` adds into ``residual``
in place (fused_add_rmsnorm) and layer 0 gets ``residual=None``, so a capture that
keeps a reference to the embedding instead of a clone sees it overwritten.
Values are chosen so that every state of the residual stream is recognisable:
channel 1 counts the attention blocks added so far, channel 2 the MLP blocks, so the
output of layer N reads (N+1, N+1) and the embedding (0, 0).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import functools
import json
import os
import sys
import tempfile
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

DEEPSEEK_FILE = "sglang/srt/models/deepseek_v2.py"
COMMUNICATOR_FILE = "sglang/srt/layers/communicator.py"
PACKER_FILE = "sglang/srt/layers/aux_hidden_states.py"
STAGE_FILE = "sglang/srt/layers/layer_boundary/stage.py"
MODEL_RUNNER_FILE = "sglang/srt/model_executor/model_runner.py"
CUDA_GRAPH_FILE = "sglang/srt/model_executor/cuda_graph_runner.py"
# Every file the harness may read, relative to site-packages.
FORWARD_FILES = (DEEPSEEK_FILE, COMMUNICATOR_FILE, PACKER_FILE, STAGE_FILE, MODEL_RUNNER_FILE, CUDA_GRAPH_FILE)

# DeepSeek-V3 depth: the default ids [2, n//2, n-3] then differ from the patched ones.
NUM_LAYERS = 61
HIDDEN = 3  # channels: token mark, attention blocks added, MLP blocks added
TOKENS = 2
EMBED_MARK = 1000.0

# The venv's python runs this file's source, read with the request from the JSON file
# named in argv, and prints one JSON line.
BOOT = ("import json, sys; d = json.load(open(sys.argv[1], encoding='utf-8')); "
        "ns = {'__name__': 'sglang_forward_harness'}; "
        "exec(compile(d['source'], '<sglang_forward>', 'exec'), ns); sys.exit(ns['harness_main'](d['request']))")

# Runs argv, returns (rc, stdout, stderr): AnsibleModule.run_command on a host (the
# engine's RunCommand contract: argv only).
RunCommand = Callable[..., Tuple[int, str, str]]


# ------------------------------------------------------------------ caller's half


def stream_name(index: int) -> str:
    """State ``index`` of the residual stream: 0 is the embedding, N + 1 the output of layer N."""
    return "embedding" if index == 0 else "output of layer %d" % (index - 1)


def expected_names(layer_ids: Sequence[int]) -> List[str]:
    """What the draft was trained on, from the user's ids (-1 = embedding, N = output of layer N)."""
    return [stream_name(0 if val == -1 else val + 1) for val in layer_ids]


def short_name(name: str) -> str:
    """"output of layer 2" -> "L2", for the report's one line."""
    prefix = "output of layer "
    return "L" + name[len(prefix):] if name.startswith(prefix) else name


def module_source() -> Optional[str]:
    """This file's source, also when it runs from Ansible's zipped payload.

    Not sglang_fileio.module_source: this file is also exec'd alone in the venv's
    python, where no ansible_collections package exists, so it imports stdlib only.
    """
    loader = globals().get("__loader__")
    try:
        source = loader.get_source(__name__) if loader is not None else None
    except (ImportError, OSError):
        source = None
    if source is None and os.path.isfile(__file__):
        with open(__file__, encoding="utf-8") as fh:
            source = fh.read()
    return source


def not_executed(reason: str) -> Dict[str, Any]:
    return {"executed": False, "ok": None, "reason": reason, "captured": {}, "errors": [], "events": []}


def forward_check(python: Optional[str], site_packages: str, route: str, layer_ids: Sequence[int],
                  draft_ids: Sequence[int], run_command: Optional[RunCommand],
                  texts: Optional[Dict[str, str]] = None, replay_cuda_graph: bool = False) -> Dict[str, Any]:
    """Run the harness under ``python`` (the SGLang venv's) and return its verdict.

    ``route`` is ``patch`` or ``native``; ``layer_ids`` the user's ids (what the draft
    was trained on), ``draft_ids`` what the draft config lists for this release.
    ``texts`` overrides files of site-packages (check mode verifies patched texts that
    are not on disk yet). The result's ``executed`` is False when the venv's python
    has no torch (image builds without deps, the test bed): then ``ok`` is None and
    the other checks stand alone. ``replay_cuda_graph`` (GPU hosts, never CI) also
    replays the graph state in a real ``torch.cuda.CUDAGraph``.
    """
    if not python or not os.path.exists(python):
        return not_executed("no python in the venv (%s)" % python)
    if run_command is None:
        return not_executed("no command runner")
    source = module_source()
    if source is None:
        return not_executed("the harness source cannot be read")
    request = {"site_packages": site_packages, "route": route, "layer_ids": list(layer_ids),
               "draft_ids": list(draft_ids), "expected": expected_names(layer_ids), "texts": texts or {},
               "replay_cuda_graph": replay_cuda_graph}
    # A private file, not stdin: the engine's runners take argv only.
    fd, payload = tempfile.mkstemp(prefix="sglang-forward-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"source": source, "request": request}, fh)
        rc, out, err = run_command([python, "-c", BOOT, payload])
    finally:
        os.unlink(payload)
    lines = [line for line in (out or "").splitlines() if line.startswith("{")]
    if not lines:
        res = not_executed("harness gave no result (rc %s): %s" % (rc, (err or out or "").strip()[-500:]))
        res.update(executed=True, ok=False, errors=[res["reason"]])
        return res
    try:
        res = json.loads(lines[-1])
    except ValueError:
        res = not_executed("harness printed no JSON: %s" % lines[-1][:200])
        res.update(executed=True, ok=False, errors=[res["reason"]])
    return res


def forward_summary(res: Optional[Dict[str, Any]]) -> str:
    """The report's line: "forward: embedding, L2, L30 (executed)" or why not."""
    if not res:
        return "forward: not executed"
    if not res.get("executed"):
        return "forward: not executed (%s)" % res.get("reason", "?")
    captured = res.get("captured", {})
    names = captured.get("graph") if captured.get("graph") is not None else captured.get("eager")
    what = ", ".join(short_name(n) for n in names or []) or "nothing captured"
    if res.get("ok"):
        return "forward: %s (executed%s)" % (what, ", CUDA graph replayed" if res.get("replayed") else "")
    return "forward: FAILED (%s)" % "; ".join(res.get("errors") or ["?"])


# ------------------------------------------------------------ ModelRunner's order


def _functions(source: Optional[str]) -> Dict[str, ast.FunctionDef]:
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
    mr, cg = _functions(model_runner), _functions(cuda_graph_runner)
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


# ------------------------------------------------------------------- the harness


class StandInError(AttributeError):
    """Something the real code read that no stand-in provides."""


class Strict:
    """A stand-in whose unstubbed attributes raise instead of defaulting.

    (``hasattr`` and ``getattr(x, name, default)`` still see "absent", which is what
    the real objects say for attributes they do not have.)
    """

    def __init__(self, name: str, **attrs: Any) -> None:
        object.__setattr__(self, "_standin", name)
        self.__dict__.update(attrs)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise StandInError("stand-in %s has no attribute %r (not stubbed)"
                           % (object.__getattribute__(self, "_standin"), attr))

    def __repr__(self) -> str:
        return "<stand-in %s>" % object.__getattribute__(self, "_standin")


class Callee(Strict):
    """A callable strict stand-in (dunder methods are looked up on the type, not the instance)."""

    def __init__(self, name: str, call: Callable[..., Any], **attrs: Any) -> None:
        super().__init__(name, _call=call, **attrs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)


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


def _has_function(source: Optional[str], qualname: str) -> bool:
    return bool(source) and qualname in _functions(source)


class _Harness:
    """One model's worth of stand-ins around the release's real capture code."""

    def __init__(self, torch: Any, texts: Dict[str, Optional[str]], device: str = "cpu") -> None:
        self.torch = torch
        self.texts = texts
        self.device = device
        self.ds = texts[DEEPSEEK_FILE] or ""
        forward = _functions(self.ds).get("DeepseekV2Model.forward")
        flat = ast.dump(forward) if forward is not None else ""
        # Native families pass the capture list into the decoder layer.
        self.layer_captures = "captured_last_layer_outputs" in flat
        self.layer_outputs = _layer_call_arity(forward)
        self.globals = self._globals()
        self.packer_cls = self._packer()
        if self.packer_cls is not None:
            self.globals["AuxHiddenStatePacker"] = self.packer_cls

    # --- tensors and the stand-in building blocks ----------------------------------

    def block(self, hidden: Any, channel: int) -> Any:
        """A fresh attention (channel 1) or MLP (channel 2) output: adds one to its channel."""
        out = self.torch.zeros_like(hidden)
        out[:, channel] = 1.0
        return out

    def norm(self, name: str) -> Any:
        """RMSNorm with the GPU kernel's aliasing, as identity on the values.

        ``norm(x)`` returns a new tensor; ``norm(x, residual)`` is fused_add_rmsnorm:
        ``residual += x`` and ``x = residual`` both in place, returned as (x, residual).
        """
        def forward(x: Any, residual: Any = None, post_residual_addition: Any = None) -> Any:
            if residual is None:
                return x.clone()
            if post_residual_addition is not None:
                residual.add_(post_residual_addition)
            residual.add_(x)
            x.copy_(residual)
            return x, residual
        return Callee(name, forward, forward=forward, weight=Strict(name + ".weight"), variance_epsilon=1e-6)

    def _globals(self) -> Dict[str, Any]:
        torch = self.torch

        def false(*args: Any, **kwargs: Any) -> bool:  # every optional kernel path: off
            return False

        recorder = Strict("ExpertDistributionRecorder", with_current_layer=lambda i: contextlib.nullcontext())
        attn_tp = Strict("AttnTpContext", input_scattered=False, is_dsa=False,
                         clear_attn_inputs=lambda: None, set_attn_inputs=lambda x: None)
        gather_fns = Strict("CommunicateWithAllReduceAndLayerNormFn",
                            _gather_hidden_states_and_residual=object(),
                            _gather_hidden_states_and_residual_moe=object())
        forward_context = Strict("ForwardContext", attn_input_scattered=False, attn_inputs=None, sp_active=False,
                                 fuse_mlp_allreduce=False, set=lambda key, value: None,
                                 scoped=lambda **kw: contextlib.nullcontext())
        server_args = Strict("ServerArgs", enable_piecewise_cuda_graph=False, disable_piecewise_cuda_graph=True,
                             enable_dp_lm_head=False)

        class BumpAllocator:  # the real one preallocates a CUDA buffer; nothing here reads it
            def __init__(self, buffer_size: int, dtype: Any, device: Any) -> None:
                self.buffer_size = buffer_size

        class PPProxyTensors(dict):
            pass

        class IndexTopKShareState:  # DSA top-k sharing between layers; off on DeepSeek-V3
            def __init__(self, forward_batch: Any, topk_indices: Any) -> None:
                self.topk_indices = topk_indices

            def update(self, topk_indices: Any) -> None:
                self.topk_indices = topk_indices

        g: Dict[str, Any] = {
            "__builtins__": builtins, "torch": torch, "nullcontext": contextlib.nullcontext,
            "Optional": Optional, "List": List, "Dict": Dict, "Tuple": Tuple, "Any": Any,
            "BumpAllocator": BumpAllocator, "PPProxyTensors": PPProxyTensors,
            "IndexTopKShareState": IndexTopKShareState, "enable_prefill_cp": false,
            "get_global_expert_distribution_recorder": lambda: recorder,
            "get_global_server_args": lambda: server_args,
            "get_attn_tp_context": lambda: attn_tp,
            "nsa_use_prefill_cp": false, "dsa_use_prefill_cp": false, "mla_use_prefill_cp": false,
            "is_nsa_enable_prefill_cp": false, "check_cuda_graph_backend": false,
            "apply_flashinfer_allreduce_fusion": false, "apply_aiter_all_reduce_fusion": false,
            "CommunicateWithAllReduceAndLayerNormFn": gather_fns,
            "_use_aiter": False, "_is_gfx95_supported": False, "_is_npu": False, "_is_hip": False,
            "_is_cuda": False, "_use_aiter_bpreshuffle_gfx95": False,
        }

        def start(forward_batch: Any) -> None:
            forward_batch.residual_stream = Strict("ResidualStream", residual=None, pending=None, transport=None,
                                                   complete=lambda hidden_states: hidden_states)

        def final_norm(hidden_states: Any, forward_batch: Any, norm: Any) -> Any:
            return norm(hidden_states, forward_batch.residual_stream.residual)[0]

        g.update({
            "residual_batch": Strict("residual_batch", start=start, norm=final_norm, final_norm=final_norm,
                                     complete_output=lambda hidden_states, forward_batch: hidden_states),
            "residual_access": Strict("residual_access", buffer=lambda hidden_states: hidden_states),
            "current": lambda forward_batch: forward_batch.residual_stream,
            "stream_of": lambda forward_batch: forward_batch.residual_stream,
            "StageKind": Strict("StageKind", ATTENTION="attention", FFN="ffn"),
            "gather_attention_tp": object(),
            "get_forward": lambda: forward_context,
            "maybe_prefetch_next_full_attention_kv": lambda forward_batch, layer_id: None,
        })
        for name in ("Phase", "Backend"):
            g[name] = Strict(name, PREFILL="prefill", DECODE="decode", TC_PIECEWISE="tc_piecewise")
        return g

    def _packer(self) -> Any:
        """The release's own AuxHiddenStatePacker (0.5.17+), from its file, or None."""
        text = self.texts.get(PACKER_FILE)
        if not text or "AuxHiddenStatePacker(" not in self.ds:
            return None
        namespace: Dict[str, Any] = {"__name__": "sglang_packer"}
        exec(compile(text, "<%s>" % PACKER_FILE, "exec"), namespace)  # noqa: S102 (the release's own module)
        return namespace["AuxHiddenStatePacker"]

    # --- the decoder layer --------------------------------------------------------

    def standin_layer(self, index: int) -> Callable[..., Any]:
        """A decoder layer for the L family, whose forward captures before the layer.

        Same residual handling as the real layer: layer 0 (residual None) takes the
        embedding tensor itself as its residual, the post-attention norm adds into it
        in place.
        """
        input_norm, post_norm = self.norm("input_layernorm"), self.norm("post_attention_layernorm")

        def layer(positions: Any, hidden_states: Any, forward_batch: Any, residual: Any, *args: Any,
                  **kwargs: Any) -> Any:
            if residual is None:
                residual = hidden_states
                hidden_states = input_norm(hidden_states)
            else:
                hidden_states, residual = input_norm(hidden_states, residual)
            hidden_states, residual = post_norm(self.block(hidden_states, 1), residual)
            out = (self.block(hidden_states, 2), residual)
            return out + (None,) * (self.layer_outputs - 2)  # 0.5.10+: (hidden, residual, topk_indices)
        return layer

    def real_layer(self, index: int) -> Callable[..., Any]:
        """The release's DeepseekV2DecoderLayer.forward with a real LayerCommunicator (0.5.14+)."""
        g = dict(self.globals)
        harness = self

        class DeepseekV2MLP:
            def __call__(self, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
                return harness.block(hidden_states, 2)

        class DeepseekV2MoE:  # never instantiated: the stand-in MLP is dense
            pass

        g.update(DeepseekV2MLP=DeepseekV2MLP, DeepseekV2MoE=DeepseekV2MoE)
        attn = Callee("DeepseekV2AttentionMLA", lambda **kw: harness.block(kw["hidden_states"], 1),
                      maybe_use_decode_attn_tp=lambda fb: contextlib.nullcontext())
        layer = Strict("DeepseekV2DecoderLayer", layer_id=index, mlp=DeepseekV2MLP(),
                       layer_scatter_modes=Strict("LayerScatterModes"), self_attn=attn,
                       dsa_enable_prefill_cp=False, mla_enable_prefill_cp=False, nsa_enable_prefill_cp=False,
                       _resolve_gfx95_quant_format=lambda: "")
        if "attn_boundary" in ast.dump(_functions(self.ds)["DeepseekV2DecoderLayer.forward"]):
            layer.attn_boundary, layer.ffn_boundary = self.boundaries()
        else:
            layer.layer_communicator = self.communicator(layer)
        forward = load_function(self.ds, "DeepseekV2DecoderLayer.forward", g)
        return types.MethodType(forward, layer)

    def communicator(self, layer: Any) -> Any:
        """LayerCommunicator with its real capture/prepare methods, TP = 1 communication."""
        text = self.texts.get(COMMUNICATOR_FILE)
        if not text:
            raise StandInError("%s is missing" % COMMUNICATOR_FILE)
        g = dict(self.globals)
        post_norm = self.norm("post_attention_layernorm")

        def simple(hidden_states: Any, forward_batch: Any, context: Any) -> Any:
            return hidden_states  # TP 1: the same tensor, as the real _trivial communicate fn

        def with_norm(hidden_states: Any, residual: Any, forward_batch: Any, layernorm: Any, context: Any) -> Any:
            return layernorm(hidden_states, residual)

        def pair(hidden_states: Any, residual: Any, forward_batch: Any, context: Any,
                 allow_reduce_scatter: bool = False) -> Any:
            return hidden_states, residual

        comm = Strict("LayerCommunicator", input_layernorm=self.norm("input_layernorm"),
                      post_attention_layernorm=post_norm, _context=Strict("CommunicateContext"),
                      _communicate_simple_fn=simple, _communicate_with_all_reduce_and_layer_norm_fn=with_norm,
                      _communicate_summable_tensor_pair_fn=pair, qkv_latent_func=None, allow_reduce_scatter=False,
                      _sp_variant=None,
                      should_fuse_mlp_allreduce_with_next_layer=lambda fb: False,
                      should_use_reduce_scatter=lambda fb: False)
        for name in ("prepare_attn_and_capture_last_layer_outputs", "prepare_attn",
                     "_post_attn_residual_is_read_only", "prepare_mlp", "postprocess_layer"):
            if _has_function(text, "LayerCommunicator." + name):
                setattr(comm, name, types.MethodType(load_function(text, "LayerCommunicator." + name, g), comm))
        return comm

    def boundaries(self) -> Tuple[Any, Any]:
        """0.5.21+: the attention boundary runs the release's real StageBoundary.prepare and
        _prepare_attention (where the capture is); the add+norm under it and the FFN
        boundary are stand-ins with the kernel's in-place residual update."""
        text = self.texts.get(STAGE_FILE)
        if not text:
            raise StandInError("%s is missing" % STAGE_FILE)
        input_norm, post_norm = self.norm("input_layernorm"), self.norm("post_attention_layernorm")
        entry = Strict("EntryPath", input_move=None, capture_move=None, capture_move_allocates=False,
                       capture_preserves_residual=None, input_retainable=False)
        steps = Strict("StagePath", entry=entry)

        def add_norm(hidden_states: Any, stream: Any, *args: Any, **call: Any) -> Tuple[Any, Any]:
            if stream.residual is None:
                stream.residual = hidden_states  # layer 0: the embedding tensor itself
                return input_norm(hidden_states), stream
            hidden_states, stream.residual = input_norm(hidden_states, stream.residual)
            return hidden_states, stream

        def ffn_prepare(hidden_states: Any, forward_batch: Any, **call: Any) -> Any:
            stream = forward_batch.residual_stream
            hidden_states, stream.residual = post_norm(hidden_states, stream.residual)
            return hidden_states

        @contextlib.contextmanager
        def ffn_exit(forward_batch: Any, **kw: Any) -> Any:
            yield Strict("FfnExit", finish=lambda hidden_states: hidden_states)

        attn = Strict("StageBoundary(attention)", kind=self.globals["StageKind"].ATTENTION,
                      input_on_attn_tp_slices=False, input_on_attention_tp_slices=False,
                      entry=lambda forward_batch, steps_=None: entry,
                      _select=lambda hidden_states, forward_batch: (hidden_states, steps),
                      _prepare=add_norm, _prepare_input=add_norm,
                      finish=lambda hidden_states, forward_batch, **kw: hidden_states)
        g = dict(self.globals)
        for name in ("prepare", "_prepare_attention"):
            setattr(attn, name, types.MethodType(load_function(text, "StageBoundary." + name, g), attn))
        ffn = Strict("StageBoundary(ffn)", prepare=ffn_prepare, exit=ffn_exit)
        return attn, ffn

    # --- the models ---------------------------------------------------------------

    def model(self) -> Tuple[Any, Any]:
        """(causal LM, DeepseekV2Model) stand-ins, initialised like the real __init__."""
        pp = Strict("PPGroup", is_first_rank=True, is_last_rank=True, world_size=1)
        layers = [self.real_layer(i) if self.layer_captures else self.standin_layer(i) for i in range(NUM_LAYERS)]
        torch = self.torch

        def embed_tokens(input_ids: Any) -> Any:
            out = torch.zeros((input_ids.shape[0], HIDDEN), dtype=torch.float64, device=input_ids.device)
            out[:, 0] = EMBED_MARK + input_ids.to(torch.float64)
            return out

        model = Strict("DeepseekV2Model", pp_group=pp, start_layer=0, end_layer=NUM_LAYERS, layers=layers,
                       embed_tokens=embed_tokens, norm=self.norm("norm"), first_k_dense_replace=3,
                       llama_4_scaling_config=None, enable_a2a_moe=False, use_dsa=False,
                       nsa_enable_prefill_cp=False, dsa_enable_prefill_cp=False, mla_enable_prefill_cp=False,
                       config=Strict("PretrainedConfig", num_hidden_layers=NUM_LAYERS),
                       _dsa_forward_uses_topk=lambda: False, next_full_attention_layer_id={})
        for name, value in init_literals(self.ds).items():
            setattr(model, name, value)
        lm = Strict("DeepseekV2ForCausalLM", pp_group=pp, model=model,
                    config=Strict("PretrainedConfig", num_hidden_layers=NUM_LAYERS), capture_aux_hidden_states=False)
        return lm, model

    def input_ids(self, first: int = 0) -> Any:
        return self.torch.arange(first, first + TOKENS, dtype=self.torch.int64, device=self.device)

    def run_forward(self, model: Any, input_ids: Any) -> Any:
        forward = types.MethodType(load_function(self.ds, "DeepseekV2Model.forward", self.globals), model)
        batch = Strict("ForwardBatch", can_run_tbo=False,
                       forward_mode=Strict("ForwardMode", is_idle=lambda: False, is_extend=lambda: True,
                                           is_decode=lambda: False, is_target_verify=lambda: False))
        return forward(input_ids, self.torch.arange(TOKENS, device=self.device), batch)

    def replay_forward(self, model: Any) -> Tuple[Any, Any]:
        """GPU hosts only: capture the forward in a real torch.cuda.CUDAGraph, change the
        (static) input tokens, replay, and return (output, the tokens replayed)."""
        torch = self.torch
        static_ids = self.input_ids()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.run_forward(model, static_ids)  # warm-up, as CudaGraphRunner does before capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.run_forward(model, static_ids)
        replayed = self.input_ids(first=7)
        static_ids.copy_(replayed)
        graph.replay()
        torch.cuda.synchronize()
        return out, replayed

    def decode(self, captured: Any, input_ids: Any) -> List[str]:
        """Name each captured tensor by the state of the residual stream it holds."""
        torch = self.torch
        if isinstance(captured, (list, tuple)):
            parts = list(captured)
        else:
            parts = list(torch.split(captured, HIDDEN, dim=-1))
        names = []
        marks = EMBED_MARK + input_ids.to(torch.float64).cpu()
        for part in parts:
            part = part.to(torch.float64).cpu()
            attn, mlp = part[:, 1], part[:, 2]
            if part.shape != (TOKENS, HIDDEN) or not torch.equal(part[:, 0], marks) \
                    or not torch.equal(attn, attn[0].expand_as(attn)) or not torch.equal(mlp, mlp[0].expand_as(mlp)):
                names.append("not a state of the residual stream: %s" % part.tolist())
            elif attn[0] == mlp[0]:
                names.append(stream_name(int(attn[0])))
            elif attn[0] == mlp[0] + 1:
                names.append("inside layer %d, after its attention (overwritten in place?)" % int(mlp[0]))
            else:
                names.append("not a state of the residual stream: %s" % part[0].tolist())
        return names


def _layer_call_arity(forward: Optional[ast.FunctionDef]) -> int:
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
    init = _functions(source).get("DeepseekV2Model.__init__")
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


def _scenario(harness: _Harness, calls: Sequence[Tuple[str, str]],
              draft_ids: Optional[Sequence[int]], replay: bool = False) -> Dict[str, Any]:
    """A fresh model, the given set_eagle3_layers_to_capture calls, one forward pass.

    ``draft_ids`` None is a draft config without ids: SGLang then passes None too.
    """
    lm, model = harness.model()
    set_layers = load_function(harness.ds, "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture", dict(harness.globals))
    for kind, _where in calls:
        if kind == "defaults" or (kind == "configured" and draft_ids is None):
            set_layers(lm)
        elif kind == "configured":
            set_layers(lm, list(draft_ids))
    if replay:
        out, input_ids = harness.replay_forward(model)
    else:
        input_ids = harness.input_ids()
        out = harness.run_forward(model, input_ids)
    if isinstance(out, tuple):
        return {"names": harness.decode(out[1], input_ids), "aux": True}
    return {"names": [], "aux": False}


def run_capture_check(torch: Any, texts: Dict[str, Optional[str]], route: str, draft_ids: Optional[Sequence[int]],
                      expected: Sequence[str], device: str = "cpu", replay_cuda_graph: bool = False) -> Dict[str, Any]:
    """The verdict: plain serving, CUDA-graph capture state and eager state, each executed.

    ``raised`` maps a state to the exception the release's code raised in it (what SGLang
    would die of at warm-up); ``captured`` the names of what the other states captured.
    With ``replay_cuda_graph`` (a CUDA device), the graph state is captured in a real
    CUDA graph and replayed with other tokens (``captured["graph"]``, ``replayed``).
    """
    harness = _Harness(torch, texts, device)
    events = runner_events(texts.get(MODEL_RUNNER_FILE), texts.get(CUDA_GRAPH_FILE))
    result: Dict[str, Any] = {"executed": True, "route": route, "errors": [], "captured": {}, "raised": {},
                              "events": ["%s: %s" % (w, k) for k, w in events]}
    errors: List[str] = result["errors"]
    stages: List[Tuple[str, List[Tuple[str, str]]]] = [("plain", [])]
    if any(kind == "graphs" for kind, _w in events):
        stages.append(("graph", events[:[k for k, _w in events].index("graphs")]))
    elif replay_cuda_graph:
        stages.append(("graph", list(events)))
    stages.append(("eager", [e for e in events if e[0] != "graphs"]))
    result["replayed"] = bool(replay_cuda_graph)
    for stage, calls in stages:
        try:
            got = _scenario(harness, calls, draft_ids, replay=replay_cuda_graph and stage == "graph")
        except Exception as exc:  # the release's code or a stand-in refused: that is the finding
            result["raised"][stage] = "%s: %s" % (type(exc).__name__, exc)
            errors.append("%s: %s" % (stage, result["raised"][stage]))
            continue
        if stage == "plain":
            if got["aux"]:
                errors.append("plain serving (no EAGLE-3) captured %s" % got["names"])
            continue
        result["captured"][stage] = got["names"]
        if got["names"] != list(expected):
            label = "CUDA-graph capture (after %s)" % ", ".join("%s %s" % (w, k) for k, w in calls) \
                if stage == "graph" else "eager"
            errors.append("%s captured %s, the draft was trained on %s" % (label, got["names"] or "nothing",
                                                                           list(expected)))
    result["ok"] = not errors
    return result


def harness_main(request: Dict[str, Any]) -> int:
    """Entry point in the venv's python: print the verdict as one JSON line."""
    try:
        import torch  # pylint: disable=import-outside-toplevel,import-error
    except ImportError as exc:
        res = not_executed("no torch")
        res["detail"] = str(exc)
        _emit(res)
        return 0
    texts: Dict[str, Optional[str]] = {}
    for rel in FORWARD_FILES:
        if rel in request.get("texts", {}):
            texts[rel] = request["texts"][rel]
            continue
        path = os.path.join(request["site_packages"], rel)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                texts[rel] = fh.read()
        else:
            texts[rel] = None
    replay = bool(request.get("replay_cuda_graph"))
    if replay and not torch.cuda.is_available():
        _emit(not_executed("no CUDA device for the CUDA-graph replay"))
        return 0
    with torch.inference_mode():
        try:
            result = run_capture_check(torch, texts, request["route"], request["draft_ids"], request["expected"],
                                       device="cuda" if replay else "cpu", replay_cuda_graph=replay)
        except Exception as exc:  # pylint: disable=broad-except
            result = {"executed": True, "ok": False, "errors": ["%s: %s" % (type(exc).__name__, exc)],
                      "captured": {}, "events": []}
    result["torch"] = torch.__version__
    _emit(result)
    return 0


def _emit(result: Dict[str, Any]) -> None:
    """The one JSON line the caller reads (stdout: this runs as its own process)."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
