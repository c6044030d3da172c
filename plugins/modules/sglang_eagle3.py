#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: remediate SGLang's EAGLE-3 embedding capture on DeepSeek targets."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_eagle3
short_description: Probe, patch and verify SGLang's EAGLE-3 embedding capture for DeepSeek targets
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
  - fleetops.sglang._common.sandbox
  - fleetops.sglang._common.anchors
  - fleetops.sglang._common.lease
description:
  - In one call per host, finds SGLang in a virtualenv, classifies C(deepseek_v2.py) (and on
    0.5.4.post2 ... 0.5.10.post1 the CUDA-graph companion files) as pristine, ours or drift
    against pip's RECORD, reads the release family from the code's shape, then patches,
    restores or only reports.
  - Decision C(patch) (0.5.4.post2 ... 0.5.13.post1) applies the patch hunks it ships;
    C(native) (0.5.14+) changes nothing and reports the ids the draft config must list;
    C(refuse) fails (except with O(state=audit)) and leaves the host untouched.
  - Every write is atomic, preceded by a RECORD-verified backup of the pristine file in O(backup_dir),
    and followed by compile, grep and semantic checks and, where the venv's python imports torch, the executed
    forward-capture check; a failed check restores the pristine files.
attributes:
  check_mode:
    support: full
    details:
      - The patched texts are built and verified in memory; nothing is written, not even O(memo_file).
  diff_mode:
    support: full
    details:
      - One before/after entry per file that is or would be patched or restored; O(state=audit) returns none.
      - The whole file texts are returned only when diff mode is on.
options:
  venv:
    description: Virtualenv holding SGLang (C(<venv>/lib/python3*/site-packages/sglang)).
    type: path
    required: true
  layer_ids:
    description:
      - Aux hidden-state layer ids the draft was trained on; V(-1) is the embedding output,
        V(N) the output of layer N. Unique, ascending, V(-1) only first.
      - Taken as given (C(elements=raw)) so that the engine, not Ansible's type coercion, refuses
        strings such as V("2") and booleans.
    type: list
    elements: raw
    default: [-1, 2, 30]
  patches:
    description:
      - Patch name to hunk text, replacing the hunks shipped with the collection (C(plugins/module_utils/_patches.py)).
      - Leave it out; it is there to try a patch before it ships. Before 2.0.0 the role rendered the hunks from
        templates and passed them here on every call.
    type: dict
    default: {}
  state:
    description:
      - V(present) patches, V(absent) restores the pristine files, V(audit) only reports.
      - With V(audit) a refusal is a finding, returned with RV(decision=refuse), not a failure.
    type: str
    choices: [present, absent, audit]
    default: present
  backup_dir:
    description: Where pristine copies are kept, outside site-packages.
    type: path
    default: /var/lib/sglang-remediation/backup
  pipeline_parallel_size:
    description: The server's pipeline parallel size; above V(1) is refused.
    type: int
    default: 1
  python:
    description:
      - Interpreter used to compile the patched files (the venv's); defaults to the module's.
      - The forward-capture check runs under it when it imports torch (see RV(forward)); without O(python) it is not run.
    type: path
  memo_file:
    description:
      - The audit memo M(fleetops.sglang.sglang_probe) reads. After a successful V(present) run (not in check mode)
        the audit of the files as they now are is stored there, so the next rerun's probe need
        not parse SGLang again. V(audit) reads it and never writes it.
    type: path
seealso:
  - module: fleetops.sglang.sglang_probe
  - module: fleetops.sglang.sglang_draft_config
"""

RETURN = r"""
release:
  description: Installed SGLang version (dist-info METADATA); V(null) when no install was found.
  type: str
  returned: always
  sample: "0.5.9"
family:
  description:
    - Patch template (V(body_a_loop), V(body_b_loop)) or C(native_<forward>) chosen from the code's shape;
      on a refusal the shape read (V(absent), C(body_<body>_<forward>)). V(null) when the shape was not read.
  type: str
  returned: always
  sample: body_a_loop
decision:
  description: What the engine decided; V(null) when it could not decide (no install, unreadable file, invalid request).
  type: str
  returned: always
  choices: [patch, native, refuse]
  sample: patch
file_state_before:
  description:
    - V(pristine) (the RECORD bytes), V(ours) (our patch on the RECORD bytes), V(drift) or V(missing),
      for C(deepseek_v2.py) before the call. V(null) without an install.
  type: str
  returned: always
  sample: pristine
sha256_before:
  description: sha256 of C(deepseek_v2.py) before the call.
  type: str
  returned: always
  sample: 3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d
sha256_after:
  description: sha256 of C(deepseek_v2.py) after the call (or as it would be in check mode).
  type: str
  returned: always
  sample: ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb
record_sha256:
  description: sha256 pip recorded for C(deepseek_v2.py) in the dist-info RECORD.
  type: str
  returned: always
  sample: 3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d
companion:
  description: The CUDA-graph companion patch (releases up to 0.5.10.post1 bake the default ids into CUDA graphs).
  type: dict
  returned: always
  sample:
    needed: true
    template: companion_cg_attr
    files: [sglang/srt/model_executor/cuda_graph_runner.py]
  contains:
    needed:
      description: Whether the release needs the companion patch.
      type: bool
      sample: true
    template:
      description: Companion patch; only present when RV(companion.needed) is true.
      type: str
      choices: [companion_cg_attr, companion_cg_local]
      sample: companion_cg_attr
    files:
      description: Companion files patched, relative to site-packages.
      type: list
      elements: str
      sample: [sglang/srt/model_executor/cuda_graph_runner.py]
draft_layer_ids:
  description:
    - Ids the draft config's C(eagle_aux_hidden_state_layer_ids) must list for this release
      (O(layer_ids) on C(patch), translated to SGLang's own capture indices on C(native)); V(null) on C(refuse).
  type: list
  elements: int
  returned: always
  sample: [-1, 2, 30]
evidence:
  description: Lines proving the patch is in place, one per matching line of the patched (or would-be patched) files.
  type: list
  elements: dict
  returned: always
  sample:
    - path: sglang/srt/models/deepseek_v2.py
      line: 2634
      text: self.model.capture_embedding_for_eagle3 = -1 in layer_ids
      what: set_flag
    - path: sglang/srt/model_executor/cuda_graph_runner.py
      line: 412
      text: >-
        self.model_runner.model.set_eagle3_layers_to_capture(self.model_runner.eagle_aux_hidden_state_layer_ids)
        # sglang-remediation eagle3-embed v1: configured ids
      what: configured_ids_call
  contains:
    path:
      description: File, relative to site-packages.
      type: str
      sample: sglang/srt/models/deepseek_v2.py
    line:
      description: Line number, from 1.
      type: int
      sample: 2634
    text:
      description: The line, stripped.
      type: str
      sample: self.model.capture_embedding_for_eagle3 = -1 in layer_ids
    what:
      description: Which rule the line satisfies.
      type: str
      choices: [init_flag, reset_flag, set_flag, filter_negative, append_embedding, configured_ids_call, ids_resolved_before_graphs]
      sample: set_flag
checks:
  description: Verification of the patched (or would-be patched) files.
  type: dict
  returned: always
  sample: {compiled: true, semantic: true}
  contains:
    compiled:
      description: Every patched file compiles; V(null) when nothing was verified (and on C(native)).
      type: bool
      sample: true
    semantic:
      description: The real C(set_eagle3_layers_to_capture) gives the expected capture for O(layer_ids) and upstream's for other ids.
      type: bool
      sample: true
forward:
  description:
    - The forward-capture check (O(state=present) only, check mode included). With O(python) importing torch it
      executes the release's own capture code (C(set_eagle3_layers_to_capture), C(DeepseekV2Model.forward), from
      0.5.14 the decoder layer, its communicator or layer boundary and the packer) on CPU tensors, in the state
      CUDA graphs are captured in and in the eager state, and names what the draft would be fed.
    - A failure is a verification failure (pristine files restored). Without torch it reports why it did not run
      and the other checks stand alone.
  type: dict
  returned: always
  sample:
    executed: true
    ok: true
    summary: "forward: embedding, L2, L30 (executed)"
    captured: {graph: [embedding, output of layer 2, output of layer 30], eager: [embedding, output of layer 2, output of layer 30]}
    errors: []
  contains:
    executed:
      description: Whether the capture code ran (false without torch in the venv, without O(python), or outside O(state=present)).
      type: bool
      sample: true
    ok:
      description: Every state captured what the draft was trained on; V(null) when not executed.
      type: bool
      sample: true
    summary:
      description: One line for the report.
      type: str
      sample: "forward: embedding, L2, L30 (executed)"
    captured:
      description: Per state (V(graph), the state CUDA graphs are captured in; V(eager)), the captured tensors by name.
      type: dict
      sample: {eager: [embedding, output of layer 2, output of layer 30]}
    errors:
      description: What failed, per state (V(plain) is serving without EAGLE-3).
      type: list
      elements: str
      sample: []
    reason:
      description: Why it was not executed.
      type: str
      sample: no torch
shape:
  description: The code's shape the release family is read from.
  type: dict
  returned: when the installed C(deepseek_v2.py) could be classified (not on drift, missing file or missing install)
  sample:
    body: A
    forward: L
    default_id_calls: ["sglang/srt/model_executor/cuda_graph_runner.py:CudaGraphRunner.__init__"]
  contains:
    body:
      description: Body of C(set_eagle3_layers_to_capture).
      type: str
      choices: [A, B, absent, unknown]
      sample: A
    forward:
      description: How C(DeepseekV2Model.forward) captures aux hidden states.
      type: str
      choices: [L, C, P, R, unknown]
      sample: L
    default_id_calls:
      description: C(file:qualname) of each no-argument C(set_eagle3_layers_to_capture()) call in the companion files.
      type: list
      elements: str
      sample: ["sglang/srt/model_executor/cuda_graph_runner.py:CudaGraphRunner.__init__"]
compliant:
  description: The host serves the embedding capture as configured (after this call; in check mode and audit, already now).
  type: bool
  returned: always
  sample: true
fingerprint:
  description:
    - The text the C(sglang) component of the running fingerprint hashes (release, C(deepseek_v2.py) sha256
      after the call and the companion dict); the role records it as C(value:<fingerprint>) after a healthy start.
  type: str
  returned: always
  sample: "0.5.9 ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb {'needed': False, 'files': []}"
findings:
  description:
    - Why the files are not compliant, one item per failed check (or V(not patched) and the files to patch);
      empty when compliant. Set by O(state=audit) and check mode; RV(msg) says the same in one line.
  type: list
  elements: str
  returned: always
  sample: ["not patched: sglang/srt/models/deepseek_v2.py"]
memo:
  description: With O(state=audit), how the audit was answered; V(hit) from O(memo_file), V(miss) computed, V(off) no memo used.
  type: str
  returned: when O(state=audit)
  choices: [hit, miss, "off"]
  sample: miss
msg:
  description: What was done or decided, in one line.
  type: str
  returned: always
  sample: "patched: sglang/srt/models/deepseek_v2.py, sglang/srt/model_executor/cuda_graph_runner.py"
diff:
  description: Before and after text of each file patched or restored (or that would be, in check mode).
  type: list
  elements: dict
  returned: when diff mode is on
  sample:
    - before_header: /opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/models/deepseek_v2.py
      after_header: /opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/models/deepseek_v2.py
      before: "# Copyright 2023-2024 SGLang Team\n..."
      after: "# Copyright 2023-2024 SGLang Team\n..."
"""

EXAMPLES = r"""
- name: Apply the embedding-capture patch
  fleetops.sglang.sglang_eagle3:
    venv: /opt/sglang/venv
    layer_ids: [-1, 2, 30]
    python: /opt/sglang/venv/bin/python
    memo_file: /var/lib/sglang-remediation/audit-memo.json
  register: eagle3

- name: Show the ids the draft config must list
  ansible.builtin.debug:
    var: eagle3.draft_layer_ids

- name: Only report what would be done
  fleetops.sglang.sglang_eagle3:
    venv: /opt/sglang/venv
    state: audit
  register: audit

- name: Put the pristine files back
  fleetops.sglang.sglang_eagle3:
    venv: /opt/sglang/venv
    state: absent
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils import _sandbox
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import beat
from ansible_collections.fleetops.sglang.plugins.module_utils._eagle3 import Request, run
from ansible_collections.fleetops.sglang.plugins.module_utils._memo import audit_memoized
from ansible_collections.fleetops.sglang.plugins.module_utils._families import DEFAULT_LAYER_IDS


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            layer_ids=dict(type="list", elements="raw", default=list(DEFAULT_LAYER_IDS)),
            patches=dict(type="dict", default={}),
            state=dict(type="str", choices=["present", "absent", "audit"], default="present"),
            backup_dir=dict(type="path", default="/var/lib/sglang-remediation/backup"),
            pipeline_parallel_size=dict(type="int", default=1),
            anchors=dict(type="dict", default={}),
            sandbox=_sandbox.argument_spec(),
            python=dict(type="path"),
            memo_file=dict(type="path"),
            lease=dict(type="dict", options=dict(path=dict(type="path", required=True),
                                                 run_id=dict(type="str", required=True))),
        ),
        supports_check_mode=True,
    )
    p = module.params
    # A long step first tells other controllers that this run is alive (sglang_lease.beat).
    beat(p["lease"])
    # layer_ids is taken raw so the engine, not Ansible's coercion, judges "2" or true.
    req = Request(
        venv=p["venv"], layer_ids=p["layer_ids"], patches=p["patches"] or {}, state=p["state"],
        backup_dir=p["backup_dir"], pipeline_parallel_size=p["pipeline_parallel_size"],
        python=p["python"], check_mode=module.check_mode, run_command=module.run_command, anchors=p["anchors"],
        sandbox=p["sandbox"],
    )
    if p["state"] == "audit":
        result = audit_memoized(req, p["memo_file"], write=False)
        result.pop("memo_key", None)
    else:
        result = run(req)
    failed = result.pop("failed")
    if p["state"] == "present" and p["memo_file"] and not failed and not module.check_mode:
        # The same audit request the probe makes: the next rerun finds it.
        audit_memoized(Request(
            venv=p["venv"], layer_ids=p["layer_ids"], patches=p["patches"] or {}, state="audit",
            backup_dir=p["backup_dir"], pipeline_parallel_size=p["pipeline_parallel_size"], check_mode=True,
            anchors=p["anchors"],
        ), p["memo_file"], write=True)
    if not module._diff:
        # Whole-file texts are only worth shipping back when --diff asked for them.
        result.pop("diff", None)
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
