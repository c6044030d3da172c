# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The forward-capture harness, part 2: strict stand-ins and the globals the release reads.

Stand-ins are strict: an attribute nobody stubbed raises, so a release that starts
to depend on something new fails the check instead of passing on a default. The
norms keep the GPU kernel's aliasing (fused_add_rmsnorm adds into ``residual`` in
place). Standard library only; exec'd under the venv's python like part 1.
"""

from __future__ import annotations

import builtins
import contextlib
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._forward_code import StandInError


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


def norm(name: str) -> Any:
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


def release_globals(torch: Any) -> Dict[str, Any]:
    """The module-level names the release's functions read, as stand-ins (every optional path off)."""
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
