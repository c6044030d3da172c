#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Set the aux hidden-state layer ids in an EAGLE-3 draft model's config.json."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_draft_config
short_description: Set and verify the EAGLE-3 aux layer ids SGLang reads from a draft model
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
description:
  - SGLang reads the layer ids whose hidden states feed an EAGLE-3 draft only from the
    draft's C(config.json), key C(eagle_config.eagle_aux_hidden_state_layer_ids), inside a
    bare try/except that silently falls back to its defaults on any mistake.
  - This module validates the ids (against the target's layer count and the draft's fc
    weight shape), writes them atomically keeping every other key, key order and indent,
    then re-reads the file and fails (restoring it) unless SGLang would
    read exactly the requested list.
  - With O(view), the draft's directory O(path) is only read, never written (model storage may be read-only,
    or shared by hosts whose releases need other ids). The module keeps O(view), a directory of its own,
    as the draft the server is started on. It holds the draft's C(config.json) with the ids, and beside it
    a link to each of the draft's other entries (weights, tokenizer). A new export of the draft (its
    C(config.json) or its entries) is followed on the next run, and links to entries the draft no longer
    has are removed. An entry of O(view) that is not a link is never removed, and refuses the write.
  - Without O(view), the ids are written into O(path)'s own C(config.json). If it is a symlink (Hugging
    Face cache snapshots) the link is replaced by a regular file, so the shared content-addressed blob is
    never edited.
  - Other C(eagle_config) keys that mention layers are ignored by SGLang; they are left in place with a warning.
attributes:
  check_mode:
    support: full
    details:
      - Validates and reports C(changed=true) and the would-be RV(sha256_after) without writing the file.
  diff_mode:
    support: full
    details:
      - Returns the whole C(config.json) before and after the change (also with O(state=audit)).
options:
  path:
    description: Draft model directory holding C(config.json).
    type: path
    required: true
  view:
    description:
      - The draft's view, a directory of the caller's own (the role's is C(/etc/sglang/<service>.draft)),
        made C(0755) where missing, its C(config.json) C(0644). The server is started on it; O(path) is
        then only read.
    type: path
  layer_ids:
    description:
      - Ids to write, in the form the installed SGLang release needs (decided by the caller,
        e.g. V([-1, 2, 30]) on patched releases or V([0, 3, 31]) from 0.5.14).
      - Each must be a real int; strings and booleans are refused, not converted (hence C(type=raw)).
    type: raw
    required: true
  user_layer_ids:
    description:
      - The ids as the user wrote them in C(sglang_eagle3_layer_ids); validated so that
        errors name the user's variable. Not written.
    type: raw
  target_model_path:
    description:
      - Target model directory. Its C(config.json) must name an architecture SGLang serves with
        C(deepseek_v2.py) (C(DeepseekV2ForCausalLM), C(DeepseekV3ForCausalLM), C(DeepseekV32ForCausalLM))
        and bounds the ids by C(num_hidden_layers) - 2 (the last layer's output is never captured).
      - The draft directory O(path) must be another one, neither inside nor around it (symlinks followed),
        and its C(config.json) must be an EAGLE-3 draft's (an architecture named C(*Eagle3*), or an
        C(eagle_config)); checked before the file is read, with both states.
    type: path
  state:
    description:
      - V(present) writes; V(audit) never writes and reports RV(compliant).
      - The previous file is kept by the run's change set (M(fleetops.sglang.sglang_changeset)), which also puts
        it back; O(state=restored) and the backups of 1.x are gone.
    type: str
    choices: [present, audit]
    default: present
notes:
  - Keeping the owner of C(config.json) may need privilege escalation; without it the write fails and the file is left as it was.
seealso:
  - module: fleetops.sglang.sglang_eagle3
"""

EXAMPLES = r"""
- name: Point the draft at the embedding output and layers 2 and 30
  fleetops.sglang.sglang_draft_config:
    path: /models/deepseek-v3-eagle3
    layer_ids: [-1, 2, 30]
    user_layer_ids: "{{ sglang_eagle3_layer_ids }}"
    target_model_path: /models/DeepSeek-V3
  become: true
  register: draft

- name: Write the ids a native release (0.5.14+) reports, as sglang_eagle3 returned them
  fleetops.sglang.sglang_draft_config:
    path: /models/deepseek-v3-eagle3
    layer_ids: "{{ eagle3.draft_layer_ids }}"
    user_layer_ids: "{{ sglang_eagle3_layer_ids }}"
    target_model_path: /models/DeepSeek-V3

- name: Only check the draft config
  fleetops.sglang.sglang_draft_config:
    path: /models/deepseek-v3-eagle3
    layer_ids: [-1, 2, 30]
    state: audit
  register: draft_audit

- name: Fail when the draft lists other ids
  ansible.builtin.assert:
    that: draft_audit.compliant
    fail_msg: "{{ draft_audit.msg }}"
"""

RETURN = r"""
path:
  description: The C(config.json) path the server reads (O(view)'s with O(view)).
  type: str
  returned: when the file was read and the ids are valid
  sample: /models/deepseek-v3-eagle3/config.json
layer_ids_before:
  description: What SGLang read before (any JSON value); V(null) when the key was absent.
  type: raw
  returned: when the file was read and the ids are valid
  sample: [1, 29, 57]
layer_ids_after:
  description:
    - What SGLang reads after this run, or would in check mode.
    - With O(state=audit), what it reads now (same as RV(layer_ids_before)).
  type: raw
  returned: when the file was read and the ids are valid
  sample: [-1, 2, 30]
sha256_before:
  description: sha256 of C(config.json) before.
  type: str
  returned: when the file was read and the ids are valid
  sample: 252f10c83610ebca1a059c0bae8255eba2f95be4d1d7bcfa89d7248a82d9f111
sha256_after:
  description: sha256 of C(config.json) after, or what it would be in check mode; with O(state=audit) the current one.
  type: str
  returned: when the file was read and the ids are valid
  sample: cd0aa9856147b6c5b4ff2b7dfee5da20aa38253099ef1b4a64aced233c9afe29
expected_count:
  description: Hidden states the draft fc layer fuses, from its safetensors header; V(null) if unknown.
  type: int
  returned: when the file was read
  sample: 3
num_hidden_layers:
  description: Decoder layers of the target (O(target_model_path)); V(null) if unknown.
  type: int
  returned: when the file was read
  sample: 61
compliant:
  description: The file already held exactly O(layer_ids) (int for int, same order).
  type: bool
  returned: when the file was read and the ids are valid
  sample: false
errors:
  description: Every validation error, when the module refused to write.
  type: list
  elements: str
  returned: failure
  sample:
    - "sglang_eagle3_layer_ids[1] is '2' (str); every id must be an int (a layer index, or -1 first for the embedding output), e.g. [-1, 2, 30]"
view:
  description: With O(view), its links to the draft's entries, and those this run made or removed.
  type: dict
  returned: with O(view), when the file was read and the ids are valid
  sample: {path: /etc/sglang/sglang.draft, links: 3, added: [model.safetensors], removed: []}
msg:
  description: What was done, would be done or found, in one line.
  type: str
  returned: always
  sample: "set [-1, 2, 30] (was [1, 29, 57]) in /models/deepseek-v3-eagle3/config.json"
diff:
  description: The whole C(config.json) before and after.
  type: dict
  returned: when diff mode is on and the file was read and the ids are valid
  sample:
    before_header: /models/deepseek-v3-eagle3/config.json
    after_header: /models/deepseek-v3-eagle3/config.json
    before: "{\n  \"architectures\": [\"LlamaForCausalLMEagle3\"],\n  ...\n}\n"
    after: "{\n  \"architectures\": [\"LlamaForCausalLMEagle3\"],\n  ...\n}\n"
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write, sha256_hex
from ansible_collections.fleetops.sglang.plugins.module_utils._families import capture_errors
from ansible_collections.fleetops.sglang.plugins.module_utils._draftconfig import (
    CONFIG_NAME,
    apply_view_links,
    get_layer_ids,
    ignored_layer_keys,
    read_bytes,
    render_config,
    same_ids,
    view_config_text,
    view_link_changes,
    view_links,
    with_layer_ids,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._modeldirs import (
    draft_model_errors,
    expected_id_count_from_draft,
    open_model_file,
    read_num_hidden_layers,
    target_model_errors,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._speculative import validate_layer_ids


def _write(dest: str, data: bytes, like: os.stat_result) -> None:
    """Replace ``dest`` atomically and durably with the mode and owner of ``like``: SGLang never
    sees a half-written config, a crash never brings back the old ids, and a config the
    service user reads never silently becomes root's."""
    atomic_write(dest, data, like=like, owner="strict", durable=True)


def read_config(module: AnsibleModule, config_path: str):
    """Load the draft config or fail naming the file; never touch a file we cannot parse."""
    if not os.path.isfile(config_path):
        module.fail_json(msg="%s does not exist: is path the draft model directory?" % config_path)
    try:
        # Judged on the file opened: a link swapped to a file outside the draft's tree is refused.
        with open_model_file(config_path) as handle:
            data = handle.read()
    except ValueError as exc:
        module.fail_json(msg="%s; left untouched" % exc)
    try:
        text = data.decode("utf-8")
        config = json.loads(text)
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        module.fail_json(msg="%s is not valid JSON (%s); left untouched" % (config_path, exc))
    if not isinstance(config, dict):
        module.fail_json(
            msg="%s must hold a JSON object, found %s; left untouched"
            % (config_path, type(config).__name__)
        )
    return data, text, config


def _ids_in(data):
    """The ids SGLang reads from config.json bytes; None where it would fall back to its defaults."""
    try:
        config = json.loads((data or b"").decode("utf-8"))
    except ValueError:
        return None
    return get_layer_ids(config) if isinstance(config, dict) else None


def keep_view(module, p, source_text, source_config, layer_ids, expected_count, num_hidden_layers) -> None:
    """The draft's view (O(view)): its config.json the draft's own with ``layer_ids``, beside a link
    to each other entry of the draft. The draft's directory is only read. Exits the module."""
    view = p["view"]
    config_path = os.path.join(view, CONFIG_NAME)
    links = view_links(p["path"])
    add, remove, foreign = view_link_changes(view, links)
    if foreign:
        module.fail_json(msg="refusing to write the draft view %s: it holds what is not a link to the draft's "
                         "files, which the module never removes: %s (the view is the role's own: move it away)"
                         % (view, ", ".join(foreign)))
    have = read_bytes(config_path)
    text = have.decode("utf-8", "replace") if have is not None else ""
    # What the server reads now: the view's ids, or (no view yet) the draft's own.
    before = _ids_in(have) if have is not None else get_layer_ids(source_config)
    new_text = view_config_text(source_text, source_config, layer_ids)
    new_data = new_text.encode("utf-8")
    compliant = have == new_data and not add and not remove
    result = dict(changed=False, compliant=compliant, path=config_path, layer_ids_before=before,
                  layer_ids_after=layer_ids, sha256_before=sha256_hex(have) if have is not None else "",
                  sha256_after=sha256_hex(new_data), expected_count=expected_count,
                  num_hidden_layers=num_hidden_layers,
                  view=dict(path=view, links=len(links), added=add, removed=remove))
    if module._diff:
        result["diff"] = [dict(before_header=config_path, after_header=config_path, before=text, after=new_text)]
        if add or remove:
            result["diff"].append(dict(
                before_header="%s (links)" % view, after_header="%s (links)" % view,
                before="".join("%s -> %s\n" % (n, os.readlink(os.path.join(view, n)))
                               for n in sorted(set(add) | set(remove)) if os.path.islink(os.path.join(view, n))),
                after="".join("%s -> %s\n" % (n, links[n]) for n in add)))
    what = "the draft view %s (the draft's %s with %r; %d links)" % (view, CONFIG_NAME, layer_ids, len(links))
    if p["state"] == "audit":
        result["layer_ids_after"], result["sha256_after"] = before, result["sha256_before"]
        result["msg"] = "%s %s" % (what, "is in place" if compliant else "differs")
        module.exit_json(**result)
    if compliant:
        result["msg"] = "%s is in place" % what
        module.exit_json(**result)
    result["changed"] = True
    if module.check_mode:
        result["msg"] = "would write %s" % what
        module.exit_json(**result)
    try:
        apply_view_links(view, links, add, remove)
        if have != new_data:
            atomic_write(config_path, new_data, mode=0o644, durable=True)
    except OSError as exc:
        module.fail_json(msg="could not write the draft view %s: %s" % (view, exc), **result)
    # Re-read as SGLang will: anything but the exact list means its try/except would silently use
    # the defaults.
    seen = _ids_in(read_bytes(config_path))
    if not same_ids(seen, layer_ids):
        module.fail_json(msg="%s re-read gives %r, not %r" % (config_path, seen, layer_ids), **result)
    result["msg"] = "wrote %s (was %r)" % (what, before)
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            # raw, not list/int: Ansible would turn "2" into 2 and hide the user's mistake.
            layer_ids=dict(type="raw", required=True),
            user_layer_ids=dict(type="raw"),
            target_model_path=dict(type="path"),
            view=dict(type="path"),
            state=dict(type="str", choices=["present", "audit"], default="present"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    config_path = os.path.join(p["path"], "config.json")
    target = p["target_model_path"]
    # Before the file is even read: the draft's directory must be a draft's, and its own.
    dir_errors = draft_model_errors(p["path"], target)
    if dir_errors:
        module.fail_json(msg="refusing to write %s: %s" % (config_path, "; ".join(dir_errors)), errors=dir_errors)
    data, text, config = read_config(module, config_path)

    num_hidden_layers = None
    if target:
        # The target must be a model deepseek_v2.py serves, or the ids mean nothing.
        target_errors = target_model_errors(target)
        if target_errors:
            module.fail_json(msg="refusing to write %s: %s" % (config_path, "; ".join(target_errors)),
                             errors=target_errors)
    try:
        if target:
            num_hidden_layers = read_num_hidden_layers(target)
        expected_count = expected_id_count_from_draft(p["path"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))

    errors = []
    if p["user_layer_ids"] is not None:
        # The user's ids are bounded by what SGLang can capture (the last layer's output
        # never is), before the install with the range every supported release shares.
        errors += validate_layer_ids(p["user_layer_ids"], None, expected_count, var="sglang_eagle3_layer_ids")
        if not errors:
            errors += capture_errors(p["user_layer_ids"], num_hidden_layers)
    # The same list under a second name would only repeat every error.
    if p["user_layer_ids"] is None or p["layer_ids"] != p["user_layer_ids"]:
        errors += validate_layer_ids(p["layer_ids"], num_hidden_layers, expected_count, var="layer_ids")
    if errors:
        module.fail_json(
            msg="refusing to write %s: %s" % (config_path, "; ".join(errors)),
            errors=errors,
            expected_count=expected_count,
            num_hidden_layers=num_hidden_layers,
        )

    layer_ids = list(p["layer_ids"])
    for key in ignored_layer_keys(config):
        module.warn(
            "%s: eagle_config.%s is ignored by SGLang, which reads only "
            "eagle_config.eagle_aux_hidden_state_layer_ids; left in place" % (config_path, key)
        )
    if p["view"]:
        keep_view(module, p, text, config, layer_ids, expected_count, num_hidden_layers)
    before = get_layer_ids(config)
    compliant = same_ids(before, layer_ids)
    new_text = text if compliant else render_config(with_layer_ids(config, layer_ids), text)
    new_data = new_text.encode("utf-8")

    result = dict(
        changed=False,
        compliant=compliant,
        path=config_path,
        layer_ids_before=before,
        layer_ids_after=layer_ids,
        sha256_before=sha256_hex(data),
        sha256_after=sha256_hex(new_data),
        expected_count=expected_count,
        num_hidden_layers=num_hidden_layers,
    )
    if module._diff:
        result["diff"] = dict(
            before_header=config_path, after_header=config_path, before=text, after=new_text
        )

    if p["state"] == "audit":
        result["layer_ids_after"] = before
        result["sha256_after"] = result["sha256_before"]
        result["msg"] = "%s %s" % (
            config_path,
            "holds the requested layer ids" if compliant else "holds %r, not %r" % (before, layer_ids),
        )
        module.exit_json(**result)
    if compliant:
        result["msg"] = "%s already holds %r" % (config_path, layer_ids)
        module.exit_json(**result)
    result["changed"] = True
    if module.check_mode:
        result["msg"] = "would set %r (was %r) in %s" % (layer_ids, before, config_path)
        module.exit_json(**result)

    like = os.stat(config_path)
    was_link = os.path.islink(config_path)
    try:
        _write(config_path, new_data, like)
    except OSError as exc:
        module.fail_json(msg="could not write %s: %s" % (config_path, exc), **result)

    # Re-read as SGLang will: anything but the exact list means its try/except
    # would silently use the defaults, so put the old file back and fail.
    try:
        with open(config_path, "rb") as handle:
            reread = json.loads(handle.read().decode("utf-8"))
        seen = get_layer_ids(reread) if isinstance(reread, dict) else None
    except ValueError as exc:
        seen = "unparseable: %s" % exc
    if not same_ids(seen, layer_ids):
        _write(config_path, data, like)
        module.fail_json(
            msg="%s re-read gives %r, not %r; previous file restored" % (config_path, seen, layer_ids),
            **result
        )

    result["msg"] = "set %r (was %r) in %s%s" % (
        layer_ids, before, config_path,
        "; replaced the symlink with a regular file" if was_link else "",
    )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
