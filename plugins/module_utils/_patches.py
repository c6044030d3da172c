# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The patch hunks, as data shipped with the engine (sglang_eagle3 and sglang_probe import them).

One text per patch, named as the decision table names it (``_families.FAMILY_TEMPLATES``
and the companions). Each line the patch adds carries ``MARKER``, so that a patched file
says what patched it. Stdlib only; hosts run it.

Format (plain text, parsed by ``_hunks.parse_patch``)::

    @@ hunk                 starts a hunk; "key: value" header lines follow
    file: <path relative to site-packages>
    function: <Class.method the old text must sit in, exactly once>
    optional: true          (only if the hunk is skipped when that function is absent)
    @@ old                  the exact lines to replace (indentation included; a first
                            line without indentation may follow any indentation)
    @@ new                  the lines that replace them
    @@ end

Text outside hunks is ignored. No fuzz: an old text that is not found exactly once, and
is not already replaced by the new text, makes the file "drift".
"""
from __future__ import annotations

from typing import Dict

MARKER = "sglang-remediation eagle3-embed v1"

# The three hunks both loop bodies take: the flag in DeepseekV2Model.__init__, the embedding
# output captured first in DeepseekV2Model.forward, and the flag set where the ids are. Only
# the last hunk, the ids' +1, differs between body A and body B.
_EMBEDDING_CAPTURE = """\
@@ hunk
file: sglang/srt/models/deepseek_v2.py
function: DeepseekV2Model.__init__
@@ old
        self.layers_to_capture = []
@@ new
        self.layers_to_capture = []
        # @MARKER@: EAGLE-3 layer id -1 (the embedding output).
        # Set before the first set_eagle3_layers_to_capture() call can read it.
        self.capture_embedding_for_eagle3 = False
@@ end

@@ hunk
file: sglang/srt/models/deepseek_v2.py
function: DeepseekV2Model.forward
@@ old
        aux_hidden_states = []
@@ new
        aux_hidden_states = []
        # @MARKER@: the embedding output comes first, as the draft
        # was trained on cat([embedding, ...]). Cloned: layer 0 takes this tensor as
        # its residual and fused_add_rmsnorm updates it in place. Only the first
        # pipeline rank holds the embedding.
        if self.capture_embedding_for_eagle3 and self.pp_group.is_first_rank:
            aux_hidden_states.append(hidden_states.clone())
@@ end

@@ hunk
file: sglang/srt/models/deepseek_v2.py
function: DeepseekV2ForCausalLM.set_eagle3_layers_to_capture
@@ old
            self.capture_aux_hidden_states = True
            num_layers = self.config.num_hidden_layers
@@ new
            self.capture_aux_hidden_states = True
            self.model.capture_embedding_for_eagle3 = False  # @MARKER@
            num_layers = self.config.num_hidden_layers
@@ end

"""

# Family body_a_loop: SGLang 0.5.4.post2 ... 0.5.12.post1. set_eagle3_layers_to_capture
# adds 1 to every id ("for the ith layer, it takes the output of the (i-1)th layer");
# DeepseekV2Model.forward appends hidden_states + residual before layer i (L).
# Layer id -1 means the embedding output: it cannot go through the loop (at i == 0
# residual is None), so forward appends it before the loop behind a flag.
# From 0.5.11 the +1 line also exists in set_dflash_layers_to_capture: every hunk is
# anchored on its function.
_BODY_A_LOOP = _EMBEDDING_CAPTURE + """\
@@ hunk
file: sglang/srt/models/deepseek_v2.py
function: DeepseekV2ForCausalLM.set_eagle3_layers_to_capture
@@ old
            self.model.layers_to_capture = [val + 1 for val in layer_ids]
@@ new
            # @MARKER@: id -1 is the embedding output, captured by
            # DeepseekV2Model.forward before layer 0; the other ids keep the +1.
            self.model.capture_embedding_for_eagle3 = -1 in layer_ids
            self.model.layers_to_capture = [val + 1 for val in layer_ids if val >= 0]
@@ end
"""

# Family body_b_loop: SGLang 0.5.13 and 0.5.13.post1. set_eagle3_layers_to_capture
# adds 1 only when the first id is 1 (else uses the ids raw), and forward still
# appends hidden_states + residual before layer i (L), so index 0 cannot work.
# With -1 in the ids the draft config uses the "output of layer N" convention of
# body A ([-1, 2, 30]): the patched method then captures the embedding and adds 1 to
# the others. Without -1 it behaves exactly as upstream.
_BODY_B_LOOP = _EMBEDDING_CAPTURE + """\
@@ hunk
file: sglang/srt/models/deepseek_v2.py
function: DeepseekV2ForCausalLM.set_eagle3_layers_to_capture
@@ old
            if layer_ids and layer_ids[0] == 1:
                self.model.layers_to_capture = [val + 1 for val in layer_ids]
            else:
                self.model.layers_to_capture = list(layer_ids)
@@ new
            # @MARKER@: id -1 is the embedding output, captured by
            # DeepseekV2Model.forward before layer 0; with it the other ids are
            # "output of layer N" ids and take the +1. Without it: upstream rule.
            self.model.capture_embedding_for_eagle3 = -1 in layer_ids
            if self.model.capture_embedding_for_eagle3:
                self.model.layers_to_capture = [val + 1 for val in layer_ids if val >= 0]
            elif layer_ids and layer_ids[0] == 1:
                self.model.layers_to_capture = [val + 1 for val in layer_ids]
            else:
                self.model.layers_to_capture = list(layer_ids)
@@ end
"""

# Both companions make the no-argument calls that reset the ids before CUDA-graph capture
# (CudaGraphRunner.__init__, and ModelRunner._dummy_run, which kernel warmup runs) pass the
# configured ids, held on ModelRunner.
_CONFIGURED_IDS_IN_GRAPHS = """\
@@ hunk
file: sglang/srt/model_executor/cuda_graph_runner.py
function: CudaGraphRunner.__init__
@@ old
self.model_runner.model.set_eagle3_layers_to_capture()
@@ new
self.model_runner.model.set_eagle3_layers_to_capture(self.model_runner.eagle_aux_hidden_state_layer_ids)  # @MARKER@: configured ids
@@ end
"""


def _dummy_run_hunk(optional: bool) -> str:
    """The _dummy_run hunk; optional where some releases of the family have no _dummy_run."""
    return ("""\
@@ hunk
file: sglang/srt/model_executor/model_runner.py
function: ModelRunner._dummy_run
""" + ("optional: true\n" if optional else "") + """\
@@ old
self.model.set_eagle3_layers_to_capture()
@@ new
self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)  # @MARKER@: configured ids
@@ end
""")


# Companion companion_cg_attr: SGLang 0.5.8 ... 0.5.10.post1, applied together with
# body_a_loop when CudaGraphRunner.__init__ and ModelRunner._dummy_run call
# set_eagle3_layers_to_capture() with no ids.
#
# Why it is needed: those calls reset the target to the default ids [2, n//2, n-3]
# (no embedding) right before CUDA graphs are captured (and in kernel warmup); the
# draft's ids are applied only after init_device_graphs(). Every graph-captured
# decode/verify step then feeds the draft other features than eager prefill: a
# silent mismatch and a low accept length. Fixed upstream in 0.5.11 (PR #22836).
#
# Why this way: here ModelRunner.__init__ already reads the draft's
# eagle_config.eagle_aux_hidden_state_layer_ids into
# self.eagle_aux_hidden_state_layer_ids (None when absent, i.e. upstream defaults)
# before initialize() builds any graph, and both calls are guarded by
# eagle_use_aux_hidden_state, which is only True on the path that sets it. Passing
# that attribute is the smallest change that makes graphs use the configured ids.
_COMPANION_CG_ATTR = _CONFIGURED_IDS_IN_GRAPHS + "\n" + _dummy_run_hunk(optional=False)

# Companion companion_cg_local: SGLang 0.5.4.post2 ... 0.5.7, applied together with
# body_a_loop when CudaGraphRunner.__init__ calls set_eagle3_layers_to_capture()
# with no ids.
#
# Why it is needed: ModelRunner.initialize reads the draft's
# eagle_config.eagle_aux_hidden_state_layer_ids into a local variable only AFTER
# init_device_graphs(), and CudaGraphRunner.__init__ (plus ModelRunner._dummy_run,
# which kernel warmup runs, from 0.5.6) first resets the target to the default ids.
# Every CUDA-graph decode/verify step is therefore baked with [2, n//2, n-3] and no
# embedding, while eager prefill uses the draft's ids: a silent feature mismatch.
#
# Why this way: it is what upstream did in 0.5.11 (PR #22836: resolve the ids before
# graph capture). The ids are resolved once more, on ModelRunner, before the device
# graphs are built, with the same draft ModelConfig and the same fall-back to None
# (defaults) as upstream's later block, which stays as it is and re-applies the
# same ids. The no-argument calls then pass those ids, so graphs and eager paths
# capture the same tensors. _dummy_run does not exist before 0.5.6, hence optional.
# On 0.5.8 ... 0.5.10.post1 ModelRunner.__init__ already holds the ids:
# companion_cg_attr.
_COMPANION_CG_LOCAL = """\
@@ hunk
file: sglang/srt/model_executor/model_runner.py
function: ModelRunner.initialize
@@ old
        if self.device == "cuda":
@@ new
        # @MARKER@: resolve the draft's EAGLE-3 aux-hidden-state
        # ids before CUDA-graph capture, so CudaGraphRunner captures with them
        # instead of the defaults (as upstream does from 0.5.11).
        self.eagle_aux_hidden_state_layer_ids = None
        if self.spec_algorithm.is_eagle3() and not self.is_draft_worker:
            try:
                self.eagle_aux_hidden_state_layer_ids = ModelConfig.from_server_args(
                    server_args,
                    model_path=server_args.speculative_draft_model_path,
                    model_revision=getattr(
                        server_args, "speculative_draft_model_revision", None
                    ),
                    is_draft_model=True,
                ).hf_config.eagle_config["eagle_aux_hidden_state_layer_ids"]
            except Exception:
                self.eagle_aux_hidden_state_layer_ids = None
        if self.device == "cuda":
@@ end

""" + _CONFIGURED_IDS_IN_GRAPHS + "\n" + _dummy_run_hunk(optional=True)


# Name to text, the marker in place: what the engine applies when its caller passes no patches.
PATCHES: Dict[str, str] = {
    "body_a_loop": _BODY_A_LOOP.replace("@MARKER@", MARKER),
    "body_b_loop": _BODY_B_LOOP.replace("@MARKER@", MARKER),
    "companion_cg_attr": _COMPANION_CG_ATTR.replace("@MARKER@", MARKER),
    "companion_cg_local": _COMPANION_CG_LOCAL.replace("@MARKER@", MARKER),
}
