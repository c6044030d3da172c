#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staged SGLang releases: plan, adopt, seal, switch and prune the release directories of a host."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release
short_description: Build SGLang releases beside the one that serves, and switch between them
version_added: "3.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
  - fleetops.sglang._common.anchors
description:
  - Each release the role installs is a virtualenv of its own under O(root), named by its identity
    (O(id), C(<version>-<lock>-<patch>)); the server runs C(<venv>/bin/python), where O(venv) is a symbolic link
    to one release (the switch). A release is built, patched and verified while the current one serves, then
    sealed (C(.fleetops-release.json) - its identity, the sha256 of the files the role patches, and every
    distribution of its closure with its version and the sha256 of its RECORD) and never written again.
  - O(state=planned) only reads, and returns which release this run deploys (RV(dir)), whether it must be built
    (RV(build)), sealed (RV(seal)) or switched to (RV(switch)), and why (RV(reason)).
  - O(state=adopted) moves an in-place virtualenv at O(venv) (collection 2.x) under O(root) as it is, and puts
    the link in its place - no reinstall and no restart, since every path the server uses resolves to the same
    files; O(state=prepared) records in O(changeset) the release this run is about to build (an undo removes
    it) and removes what an unfinished build left there; O(state=sealed) seals a release once verified; O(state=switched) points O(venv) at O(dir) in one
    rename; O(state=pruned) keeps the newest O(keep) releases, never the one that serves nor one a kept change
    set would switch back to, and removes unfinished builds.
  - With O(changeset), the run's open change set (M(fleetops.sglang.sglang_changeset)) records the release a
    2.x venv became and the release this run builds, so that an undo switches back and removes it.
attributes:
  check_mode:
    support: full
    details:
      - Every state reports what it would do and writes nothing.
options:
  state:
    description: What to do.
    type: str
    choices: [planned, adopted, prepared, sealed, switched, pruned]
    required: true
  venv:
    description: The switch (C(sglang_venv)), a symbolic link to the release that serves.
    type: path
    required: true
  root:
    description: The directory of the releases (C(sglang_releases_dir)), on the same file system as O(venv).
    type: path
    required: true
  id:
    description: The release's identity (O(state=planned) and O(state=sealed)).
    type: str
  version:
    description: The SGLang release pinned (C(sglang_version)).
    type: str
  lock:
    description: The text the release is installed from (the requirement with its hashes, or the lock of its closure).
    type: str
    default: ""
  dir:
    description: The release directory to seal, to switch to, or that this run builds (O(state=planned)'s RV(dir)).
    type: path
  layer_ids:
    description:
      - With O(state=planned), the draft's layer ids (C(sglang_eagle3_layer_ids)) the audit of an adopted release
        that serves is made with; a release that is not as the role would leave it is never patched while it serves.
    type: list
    elements: int
    default: [-1, 2, 30]
  pipeline_parallel_size:
    description: With O(state=planned), the server's pipeline parallel size, for the same audit.
    type: int
    default: 1
  changeset:
    description: The run's open change set, which records the adopted release and the release being built.
    type: path
  clean:
    description: With O(state=prepared), remove what an unfinished build left at O(dir) (O(state=planned)'s RV(clean)).
    type: bool
    default: false
  keep:
    description: With O(state=pruned), how many releases to keep, the one that serves counted.
    type: int
    default: 2
  state_dir:
    description: With O(state=pruned), the role's state directory, whose change sets name the releases a rollback needs.
    type: path
seealso:
  - module: fleetops.sglang.sglang_changeset
"""

EXAMPLES = r"""
- name: Find the release this run deploys
  fleetops.sglang.sglang_release:
    state: planned
    venv: /opt/sglang/venv
    root: /opt/sglang/releases
    id: 0.5.9-1b2c3d4e5f60-a1b2c3d4e5f6
    version: 0.5.9
  register: release

- name: Switch to it, after the drain and before the restart
  fleetops.sglang.sglang_release:
    state: switched
    venv: /opt/sglang/venv
    root: /opt/sglang/releases
    dir: "{{ release.dir }}"
"""

RETURN = r"""
dir:
  description: The release directory deployed (O(state=planned)), adopted, sealed or switched to.
  returned: always
  type: str
current:
  description: The release the link points at now (before a switch); V(null) where none.
  returned: always
  type: str
build:
  description: With O(state=planned), whether the release is to be built (a venv, pip, the patch, the seal).
  returned: always
  type: bool
seal:
  description: With O(state=planned), whether the release exists unsealed and is to be sealed once verified.
  returned: always
  type: bool
switch:
  description: With O(state=planned), whether the link must be switched to RV(dir).
  returned: always
  type: bool
clean:
  description: With O(state=planned), whether an unfinished build sits at RV(dir) and is removed first.
  returned: always
  type: bool
adopt:
  description: With O(state=planned), whether O(venv) is an in-place virtualenv (2.x) that the run adopts.
  returned: always
  type: bool
reason:
  description: Why, in words.
  returned: always
  type: str
removed:
  description: With O(state=pruned), the release directories removed.
  returned: always
  type: list
  elements: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.fleetops.sglang.plugins.module_utils import _changeset, _releases
from ansible_collections.fleetops.sglang.plugins.module_utils import _eagle3 as eagle3
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import EngineError


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["planned", "adopted", "prepared", "sealed", "switched", "pruned"]),
            venv=dict(type="path", required=True),
            root=dict(type="path", required=True),
            id=dict(type="str"),
            version=dict(type="str"),
            lock=dict(type="str", default=""),
            dir=dict(type="path"),
            layer_ids=dict(type="list", elements="int", default=[-1, 2, 30]),
            pipeline_parallel_size=dict(type="int", default=1),
            anchors=dict(type="dict", default={}),
            changeset=dict(type="path"),
            clean=dict(type="bool", default=False),
            keep=dict(type="int", default=2),
            state_dir=dict(type="path"),
        ),
        required_if=[("state", "planned", ["id", "version"]), ("state", "sealed", ["dir", "id", "version"]),
                     ("state", "switched", ["dir"]), ("state", "prepared", ["dir"])],
        supports_check_mode=True,
    )
    p = module.params
    current = _releases.switch_state(p["venv"])["target"]
    result = dict(changed=False, dir=p["dir"], current=current, build=False, seal=False, switch=False,
                  clean=False, adopt=False, reason="", removed=[])
    try:
        if p["state"] == "planned":
            def engine(release):
                # The same audit as the probe's and the patch step's, anchors included.
                return eagle3.run(eagle3.Request(venv=release, layer_ids=p["layer_ids"], state="audit",
                                                 pipeline_parallel_size=p["pipeline_parallel_size"], check_mode=True,
                                                 anchors=p["anchors"]))

            def audit(release):
                found = engine(release)
                return [] if found["compliant"] else (found["findings"] or [found["msg"]])

            def refuse(release):
                found = engine(release)
                return found["msg"] if found["decision"] == "refuse" else None

            result.update(_releases.plan(p["root"], p["venv"], p["id"], p["version"], audit=audit, refuse=refuse))
        elif p["state"] == "adopted":
            if _releases.switch_state(p["venv"])["kind"] == "dir":
                result.update(changed=True, reason="%s is an in-place venv: moved under %s as a release" % (
                    p["venv"], p["root"]))
                if not module.check_mode:
                    result["dir"] = _releases.adopt(p["root"], p["venv"])
                    if p["changeset"]:
                        _changeset.note_release(p["changeset"], adopted=result["dir"])
            else:
                result["reason"] = "%s is the switch of staged releases already" % p["venv"]
        elif p["state"] == "prepared":
            result.update(changed=True, reason="%s to be built%s" % (
                p["dir"], " (an unfinished build removed first)" if p["clean"] else ""))
            if not module.check_mode:
                if p["changeset"]:
                    _changeset.note_release(p["changeset"], built=p["dir"])
                if p["clean"] and os.path.lexists(p["dir"]):
                    if os.path.realpath(p["dir"]) == current:
                        raise EngineError("%s serves: it is never removed" % p["dir"])
                    shutil.rmtree(p["dir"])
        elif p["state"] == "sealed":
            marker = _releases.read_marker(p["dir"]) or {}
            if marker.get("id") == p["id"] and not _releases.problems(p["dir"], marker):
                result["reason"] = "%s is sealed as %s" % (p["dir"], p["id"])
            else:
                result.update(changed=True, reason="%s sealed as %s" % (p["dir"], p["id"]))
                if not module.check_mode:
                    _releases.seal(p["dir"], p["id"], p["version"], p["lock"])
        elif p["state"] == "switched":
            wanted = os.path.realpath(p["dir"])
            if current != wanted or not os.path.islink(p["venv"]):
                result.update(changed=True, reason="%s -> %s (was %s)" % (p["venv"], p["dir"], current or "(none)"))
                if not module.check_mode:
                    _releases.switch(p["venv"], p["dir"])
            else:
                result["reason"] = "%s points at %s already" % (p["venv"], p["dir"])
        else:
            protect = _changeset.rollback_targets(p["state_dir"]) if p["state_dir"] else []
            pruned = _releases.prune(p["root"], p["venv"], max(p["keep"], 1), protect, module.check_mode)
            result.update(changed=bool(pruned["removed"]), removed=pruned["removed"],
                          reason="kept %s" % (", ".join(pruned["kept"] + pruned["protected"]) or "nothing"))
    except (EngineError, OSError, ValueError) as exc:
        module.fail_json(msg="releases under %s: %s" % (p["root"], exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
