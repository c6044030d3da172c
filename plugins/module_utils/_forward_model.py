# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The forward-capture harness, part 3: the model around the release's capture code.

One model's worth of stand-ins (decoder layers, LayerCommunicator or the layer
boundary, the DeepseekV2 model and its causal LM) with the release's real methods
bound to them, and the decoding of what was captured. Values are chosen so that
every state of the residual stream is recognisable: channel 1 counts the attention
blocks added so far, channel 2 the MLP blocks, so the output of layer N reads
(N+1, N+1) and the embedding (0, 0). Standard library only; exec'd under the venv's
python like parts 1 and 2, and handed torch by part 4.
"""

from __future__ import annotations

import ast
import contextlib
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._forward_code import (
    COMMUNICATOR_FILE,
    DEEPSEEK_FILE,
    PACKER_FILE,
    STAGE_FILE,
    StandInError,
    functions_of,
    has_function,
    init_literals,
    layer_call_arity,
    load_function,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._forward_standins import Callee, Strict, norm, release_globals

# DeepSeek-V3 depth: the default ids [2, n//2, n-3] then differ from the patched ones.
NUM_LAYERS = 61
HIDDEN = 3  # channels: token mark, attention blocks added, MLP blocks added
TOKENS = 2
EMBED_MARK = 1000.0


def stream_name(index: int) -> str:
    """State ``index`` of the residual stream: 0 is the embedding, N + 1 the output of layer N."""
    return "embedding" if index == 0 else "output of layer %d" % (index - 1)


class Harness:
    """One model's worth of stand-ins around the release's real capture code."""

    def __init__(self, torch: Any, texts: Dict[str, Optional[str]], device: str = "cpu") -> None:
        self.torch = torch
        self.texts = texts
        self.device = device
        self.ds = texts[DEEPSEEK_FILE] or ""
        forward = functions_of(self.ds).get("DeepseekV2Model.forward")
        flat = ast.dump(forward) if forward is not None else ""
        # Native families pass the capture list into the decoder layer.
        self.layer_captures = "captured_last_layer_outputs" in flat
        self.layer_outputs = layer_call_arity(forward)
        self.globals = release_globals(torch)
        self.packer_cls = self._packer()
        if self.packer_cls is not None:
            self.globals["AuxHiddenStatePacker"] = self.packer_cls

    # --- tensors and the stand-in building blocks ----------------------------------

    def block(self, hidden: Any, channel: int) -> Any:
        """A fresh attention (channel 1) or MLP (channel 2) output: adds one to its channel."""
        out = self.torch.zeros_like(hidden)
        out[:, channel] = 1.0
        return out

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
        input_norm, post_norm = norm("input_layernorm"), norm("post_attention_layernorm")

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
        if "attn_boundary" in ast.dump(functions_of(self.ds)["DeepseekV2DecoderLayer.forward"]):
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
        post_norm = norm("post_attention_layernorm")

        def simple(hidden_states: Any, forward_batch: Any, context: Any) -> Any:
            return hidden_states  # TP 1: the same tensor, as the real _trivial communicate fn

        def with_norm(hidden_states: Any, residual: Any, forward_batch: Any, layernorm: Any, context: Any) -> Any:
            return layernorm(hidden_states, residual)

        def pair(hidden_states: Any, residual: Any, forward_batch: Any, context: Any,
                 allow_reduce_scatter: bool = False) -> Any:
            return hidden_states, residual

        comm = Strict("LayerCommunicator", input_layernorm=norm("input_layernorm"),
                      post_attention_layernorm=post_norm, _context=Strict("CommunicateContext"),
                      _communicate_simple_fn=simple, _communicate_with_all_reduce_and_layer_norm_fn=with_norm,
                      _communicate_summable_tensor_pair_fn=pair, qkv_latent_func=None, allow_reduce_scatter=False,
                      _sp_variant=None,
                      should_fuse_mlp_allreduce_with_next_layer=lambda fb: False,
                      should_use_reduce_scatter=lambda fb: False)
        for name in ("prepare_attn_and_capture_last_layer_outputs", "prepare_attn",
                     "_post_attn_residual_is_read_only", "prepare_mlp", "postprocess_layer"):
            if has_function(text, "LayerCommunicator." + name):
                setattr(comm, name, types.MethodType(load_function(text, "LayerCommunicator." + name, g), comm))
        return comm

    def boundaries(self) -> Tuple[Any, Any]:
        """0.5.21+: the attention boundary runs the release's real StageBoundary.prepare and
        _prepare_attention (where the capture is); the add+norm under it and the FFN
        boundary are stand-ins with the kernel's in-place residual update."""
        text = self.texts.get(STAGE_FILE)
        if not text:
            raise StandInError("%s is missing" % STAGE_FILE)
        input_norm, post_norm = norm("input_layernorm"), norm("post_attention_layernorm")
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
                       embed_tokens=embed_tokens, norm=norm("norm"), first_k_dense_replace=3,
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
