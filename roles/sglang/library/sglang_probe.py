#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: judge in one read-only call whether an SGLang host is compliant."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_probe
short_description: Decide in one read-only call whether an SGLang host needs any remediation
description:
  - Gathers everything the role would check on a host and says whether it is compliant, so a
    fleet-wide rerun can end compliant hosts after one remote call.
  - Compares the installed release with the pinned one, audits C(deepseek_v2.py) and its
    companions with the patch engine (C(sglang_eagle3) in audit mode), the draft config's
    C(eagle_aux_hidden_state_layer_ids) with the ids the release needs, the unit and
    environment files with the sha256 of the controller's renderings, the running
    fingerprint with the one recorded after the last healthy start, and whether the
    service is active.
  - Changes nothing on the host but, with I(memo_write), its audit memo; the only subprocess
    is one C(systemctl is-active), and only with I(service_manage).
options:
  venv:
    description: Virtualenv holding SGLang.
    type: path
    required: true
  expected_version:
    description: The pinned SGLang release (C(sglang_version)).
    type: str
    required: true
  layer_ids:
    description: The user's layer ids (C(sglang_eagle3_layer_ids)); -1 is the embedding output.
    type: list
    elements: raw
    default: [-1, 2, 30]
  patches:
    description: Rendered patch templates, as passed to C(sglang_eagle3).
    type: dict
    default: {}
  pipeline_parallel_size:
    description: The server's pipeline parallel size.
    type: int
    default: 1
  backup_dir:
    description: Where the engine keeps pristine copies (read only here).
    type: path
    default: /var/lib/sglang-remediation/backup
  draft_config:
    description: Path of the draft model's C(config.json).
    type: path
    required: true
  files:
    description:
      - Name to C({path, sha256}) of files rendered on the controller (unit, environment file).
        Only the hash is passed, never the content. Checked only with I(service_manage).
    type: dict
    default: {}
  fingerprint_file:
    description: The JSON C(sglang_fingerprint) records after the last healthy start.
    type: path
  fingerprint_components:
    description:
      - Same dict the role passes to C(sglang_fingerprint) (name to path or C(value:<text>)).
      - The C(sglang) component is computed here from the audit unless given as C(value:<text>);
        pass it as C(auto) or leave it out.
    type: dict
    default: {}
  fingerprint_style:
    description:
      - How the C(sglang) component is computed. C(role) matches what vars/main.yml renders
        today; C(canonical) is the template-independent form (see module_utils).
    type: str
    choices: [role, canonical]
    default: role
  service:
    description: systemd unit name.
    type: str
    default: sglang
  service_manage:
    description: Whether the role manages the service; when false, files, fingerprint and service are not checked.
    type: bool
    default: true
  memo_file:
    description:
      - JSON file holding the last audit and the sha256 of everything it read (the SGLang files,
        RECORD, METADATA, the request, the engine's source, the interpreter). When every input
        is byte-identical the audit is answered from it instead of parsing SGLang again.
      - Without it the audit always runs in full.
    type: path
  memo_write:
    description:
      - Store a freshly computed audit in I(memo_file) when the host is compliant (the run ends
        there). The role sets it on converging runs only, so audits and check mode write nothing;
        a host that is then changed or refused leaves the memo as it was.
    type: bool
    default: false
"""

RETURN = r"""
compliant: {description: Nothing to do on this host, type: bool, returned: always}
reasons: {description: Why it is not compliant, one human-readable line each, type: list, returned: always}
release: {description: Installed SGLang version (null when none is installed), type: str, returned: always}
decision: {description: patch, native or refuse (null without an install), type: str, returned: always}
draft_layer_ids: {description: Ids the draft config must list for the installed release, type: list, returned: always}
draft_layer_ids_found: {description: Ids the draft config lists now, type: raw, returned: always}
eagle3:
  description: The engine's audit result (as sglang_eagle3 state=audit returns it), with C(memo) hit, miss or off
  type: dict
  returned: always
fingerprint: {description: "{current, recorded}: component hashes now and at the last healthy start", type: dict, returned: always}
active: {description: Whether the service is active (null when not checked), type: bool, returned: always}
restart_needed: {description: A converging run would restart the service, type: bool, returned: always}
"""

EXAMPLES = r"""
- name: Probe the host
  sglang_probe:
    venv: /opt/sglang/venv
    expected_version: "0.5.9"
    layer_ids: [-1, 2, 30]
    patches: "{{ rendered_patches }}"
    draft_config: /models/DeepSeek-V3-EAGLE3/config.json
    files:
      unit: {path: /etc/systemd/system/sglang.service, sha256: "{{ unit_text | hash('sha256') }}"}
    fingerprint_file: /var/lib/sglang-remediation/running.json
    fingerprint_components: {draft_config: /models/DeepSeek-V3-EAGLE3/config.json}
    service: sglang
  register: probe
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_eagle3 import (
    DEEPSEEK_FILE,
    DEFAULT_LAYER_IDS,
    Request,
    audit_memoized,
    fingerprint_value,
    store_audit_memo,
    validate_layer_ids,
)
from ansible.module_utils.sglang_runstate import current_fingerprint, decide, load_recorded, service_active
from ansible.module_utils.sglang_speculative import get_layer_ids, load_json_object, same_ids

SHORT = os.path.basename(DEEPSEEK_FILE)


def eagle3_reasons(audit):
    """Why the installed files are not as the role would leave them."""
    if audit["failed"]:
        return [audit["msg"]]
    if audit["compliant"]:
        return []
    state = audit["file_state_before"]
    if audit["decision"] == "refuse":
        return ["refused: %s" % audit["msg"]]
    if audit["decision"] == "native":
        return ["%s %s on a native release: restore needed" % (SHORT, state)]
    detail = audit["msg"][len("not compliant: "):] if audit["msg"].startswith("not compliant: ") else audit["msg"]
    return ["%s %s: patch needed (%s)" % (SHORT, state, detail)]


def draft_reasons(path, wanted):
    """Compare the draft config's ids with those the release needs; (reasons, ids found)."""
    try:
        config = load_json_object(path)
    except (OSError, ValueError) as exc:
        return ["draft config unreadable: %s" % exc], None
    if config is None:
        return ["draft config %s does not exist" % path], None
    found = get_layer_ids(config)
    if wanted is not None and not same_ids(found, wanted):
        return ["draft ids %s != %s" % (found, wanted)], found
    return [], found


def file_reasons(files):
    reasons = []
    for name in sorted(files):
        spec = files[name] or {}
        path, want = spec.get("path"), str(spec.get("sha256") or "").lower()
        if not path or not want:
            reasons.append("%s: files entries need path and sha256" % name)
            continue
        try:
            with open(path, "rb") as fh:
                have = hashlib.sha256(fh.read()).hexdigest()
        except FileNotFoundError:
            reasons.append("%s %s does not exist" % (name, path))
            continue
        except OSError as exc:
            reasons.append("%s unreadable: %s" % (name, exc))
            continue
        if have != want:
            reasons.append("%s differs from the rendered one" % name)
    return reasons


def fingerprint_reasons(components, state_file, audit, style):
    """(reasons, {current, recorded}) for the running fingerprint, without the service state."""
    specs = dict(components)
    if specs.get("sglang") in (None, "", "auto") and not audit["failed"]:
        specs["sglang"] = "value:" + fingerprint_value(audit, style)
    elif specs.get("sglang") in (None, "", "auto"):
        specs.pop("sglang", None)  # no install: the fingerprint differs on the other components or anyway
    try:
        current = current_fingerprint(specs)
    except OSError as exc:
        return ["fingerprint: %s" % exc], {"current": {}, "recorded": {}}
    recorded = load_recorded(state_file) if state_file else {}
    changed = decide(current, recorded, True)
    info = {"current": current, "recorded": recorded.get("components", {})}
    if not changed:
        return [], info
    if not recorded.get("components"):
        return ["no healthy start recorded: restart needed"], info
    names = [r[: -len(" changed since the last healthy start")] for r in changed]
    return ["fingerprint differs (%s): restart needed" % ", ".join(names)], info


def probe(p):
    result = dict(changed=False, compliant=False, reasons=[], release=None, decision=None,
                  draft_layer_ids=None, draft_layer_ids_found=None, eagle3=None,
                  fingerprint={"current": {}, "recorded": {}}, active=None, restart_needed=False)
    reasons = result["reasons"]
    audit = audit_memoized(Request(
        venv=p["venv"], layer_ids=p["layer_ids"], patches=p["patches"] or {}, state="audit",
        backup_dir=p["backup_dir"], pipeline_parallel_size=p["pipeline_parallel_size"], check_mode=True,
    ), p["memo_file"], write=False)
    audit.pop("diff", None)
    result.update(eagle3=audit, release=audit["release"], decision=audit["decision"],
                  draft_layer_ids=audit["draft_layer_ids"])
    if audit["release"] is None:
        reasons.append("sglang %s not installed in %s (%s)" % (p["expected_version"], p["venv"], audit["msg"]))
    elif audit["release"] != p["expected_version"]:
        # What to patch is decided on the pinned release once it is installed.
        reasons.append("sglang %s installed, %s pinned" % (audit["release"], p["expected_version"]))
    else:
        reasons += eagle3_reasons(audit)
        draft, found = draft_reasons(p["draft_config"], audit["draft_layer_ids"])
        reasons += draft
        result["draft_layer_ids_found"] = found
    if p["service_manage"]:
        reasons += file_reasons(p["files"] or {})
        fp_reasons, result["fingerprint"] = fingerprint_reasons(
            p["fingerprint_components"] or {}, p["fingerprint_file"], audit, p["fingerprint_style"])
        reasons += fp_reasons
        result["active"] = service_active(p["service"])
        if not result["active"]:
            reasons.append("service %s not active" % p["service"])
        # Every finding changes a fingerprint component (or starts the service).
        result["restart_needed"] = bool(reasons)
    result["compliant"] = not reasons
    # Only a verdict the run ends on is stored: a host that goes on to be changed or
    # refused leaves the memo as it was (the patching module stores its own).
    if p["memo_write"] and result["compliant"] and p["memo_file"]:
        store_audit_memo(p["memo_file"], audit)
    audit.pop("memo_key", None)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            expected_version=dict(type="str", required=True),
            layer_ids=dict(type="list", elements="raw", default=list(DEFAULT_LAYER_IDS)),
            patches=dict(type="dict", default={}),
            pipeline_parallel_size=dict(type="int", default=1),
            backup_dir=dict(type="path", default="/var/lib/sglang-remediation/backup"),
            draft_config=dict(type="path", required=True),
            files=dict(type="dict", default={}),
            fingerprint_file=dict(type="path"),
            fingerprint_components=dict(type="dict", default={}),
            fingerprint_style=dict(type="str", choices=["role", "canonical"], default="role"),
            service=dict(type="str", default="sglang"),
            service_manage=dict(type="bool", default=True),
            memo_file=dict(type="path"),
            memo_write=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        validate_layer_ids(module.params["layer_ids"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**probe(module.params))


if __name__ == "__main__":
    main()
