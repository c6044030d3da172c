#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: remediate SGLang's EAGLE-3 embedding capture on DeepSeek targets."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_eagle3
short_description: Probe, patch and verify SGLang's EAGLE-3 embedding capture for DeepSeek targets
description:
  - In one call per host, finds SGLang in a virtualenv, classifies C(deepseek_v2.py) (and on
    0.5.4.post2 ... 0.5.10.post1 the CUDA-graph companion files) as pristine, ours or drift
    against pip's RECORD, reads the release family from the code's shape, then patches,
    restores or only reports.
  - Decision C(patch) (0.5.4.post2 ... 0.5.13.post1) applies the rendered patch templates;
    C(native) (0.5.14+) changes nothing and reports the ids the draft config must list;
    C(refuse) fails (except in audit) and leaves the host untouched.
options:
  venv:
    description: Virtualenv holding SGLang (C(<venv>/lib/python3*/site-packages/sglang)).
    type: path
    required: true
  layer_ids:
    description:
      - Aux hidden-state layer ids the draft was trained on; C(-1) is the embedding output,
        C(N) the output of layer N. Unique, ascending, -1 only first.
    type: list
    elements: int
    default: [-1, 2, 30]
  patches:
    description: Rendered patch templates, template name (file name without C(.yml.j2)) to text.
    type: dict
    default: {}
  state:
    description: C(present) patches, C(absent) restores the pristine files, C(audit) only reports.
    type: str
    choices: [present, absent, audit]
    default: present
  backup_dir:
    description: Where pristine copies are kept, outside site-packages.
    type: path
    default: /var/lib/sglang-remediation/backup
  pipeline_parallel_size:
    description: The server's pipeline parallel size; above 1 is refused.
    type: int
    default: 1
  python:
    description: Interpreter used to compile the patched files (the venv's); defaults to the module's.
    type: path
  memo_file:
    description:
      - The audit memo C(sglang_probe) reads. After a successful C(present) run (not in check mode)
        the audit of the files as they now are is stored there, so the next rerun's probe need
        not parse SGLang again. C(audit) reads it and never writes it.
    type: path
"""

RETURN = r"""
release: {description: Installed SGLang version (dist-info METADATA), type: str, returned: always}
family: {description: "Patch template or native_<forward> chosen from the code shape", type: str, returned: always}
decision: {description: patch, native or refuse, type: str, returned: always}
file_state_before: {description: pristine, ours or drift (deepseek_v2.py), type: str, returned: always}
sha256_before: {description: sha256 of deepseek_v2.py before the call, type: str, returned: always}
sha256_after: {description: sha256 of deepseek_v2.py after the call (or as it would be in check mode), type: str, returned: always}
record_sha256: {description: sha256 pip recorded for deepseek_v2.py, type: str, returned: always}
companion: {description: "{needed, template, files}: CUDA-graph companion patch", type: dict, returned: always}
draft_layer_ids: {description: Ids the draft config's eagle_aux_hidden_state_layer_ids must list for this release, type: list, returned: always}
evidence: {description: "{path, line, text, what} lines proving the patch", type: list, returned: always}
checks: {description: "{compiled, semantic}", type: dict, returned: always}
compliant: {description: The host serves the embedding capture as configured, type: bool, returned: always}
"""

EXAMPLES = r"""
- name: Apply the embedding-capture patch
  sglang_eagle3:
    venv: /opt/sglang/venv
    layer_ids: [-1, 2, 30]
    python: /opt/sglang/venv/bin/python
    patches:
      body_a_loop: "{{ lookup('ansible.builtin.template', 'patches/body_a_loop.yml.j2') }}"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils.sglang_eagle3 import DEFAULT_LAYER_IDS, Request, audit_memoized, run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            layer_ids=dict(type="list", elements="raw", default=list(DEFAULT_LAYER_IDS)),
            patches=dict(type="dict", default={}),
            state=dict(type="str", choices=["present", "absent", "audit"], default="present"),
            backup_dir=dict(type="path", default="/var/lib/sglang-remediation/backup"),
            pipeline_parallel_size=dict(type="int", default=1),
            python=dict(type="path"),
            memo_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    # layer_ids is taken raw so the engine, not Ansible's coercion, judges "2" or true.
    req = Request(
        venv=p["venv"], layer_ids=p["layer_ids"], patches=p["patches"] or {}, state=p["state"],
        backup_dir=p["backup_dir"], pipeline_parallel_size=p["pipeline_parallel_size"],
        python=p["python"], check_mode=module.check_mode,
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
        ), p["memo_file"], write=True)
    if not module._diff:
        # Whole-file texts are only worth shipping back when --diff asked for them.
        result.pop("diff", None)
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
