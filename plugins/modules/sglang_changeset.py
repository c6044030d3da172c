#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Open, close and restore the change set of a remediating run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_changeset
short_description: Record what a run replaces on an SGLang host, and put it back
version_added: "2.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
description:
  - A remediating run opens one change set before its first write (O(state=opened)). The set, under
    C(<state_dir>/changes/<id>/), keeps what the run may replace, each as it was, with its bytes, owner, mode
    and sha256, or the fact that it did not exist - the release that serves (C(sglang_venv), a link to one of
    the staged release directories, M(fleetops.sglang.sglang_release)), the draft's C(config.json), the unit,
    the environment file, the fingerprint of what runs (C(running.json)) and the pinned requirement - and
    whether the service was active and enabled, the directories and the service account it may create.
  - M(fleetops.sglang.sglang_release) adds the release directory the run builds, and the one an in-place venv
    becomes when it is adopted.
  - O(state=closed) ends a run whose change stands (it passed its gates, or needed no restart), with the list of
    what changed; a set that changed nothing is discarded.
  - Opening a set, and closing one that changed nothing, report no change (the set is the run's bookkeeping in
    the state directory), so that a run that changes nothing reports C(changed=0) with the fast path off too.
  - O(state=kept) ends a failed run whose change is left in place for a person to look at
    (C(sglang_rollback_on_failure=false)) the same way, as V(kept), which C(playbooks/rollback.yml) puts back
    as it puts back a closed one.
  - O(state=restored) puts a set back - every configuration file byte for byte with its owner and mode (a
    file that did not exist is removed), newest first, then the link switched back to the release that served
    before the run (no package index, wheelhouse or network - that release is on the host, and is refused if it
    no longer matches its seal) and the releases the run built removed - and returns what it restored (with
    sha256) and what it left (a release, directories or the account the run created on a host that served
    nothing). The role's undo after a failed run restores that run's set; C(playbooks/rollback.yml) restores
    the newest set whose change stands (O(changeset=newest)).
  - The sets are root's (0700 directories and 0600 files, since the environment file holds secrets); the
    newest O(keep) are kept.
attributes:
  check_mode:
    support: full
    details:
      - O(state=opened), O(state=closed) and O(state=kept) write nothing and report what they would;
        O(state=restored) reports what it would put back.
options:
  state:
    description: What to do with the change set.
    type: str
    choices: [opened, closed, kept, restored]
    required: true
  state_dir:
    description: The role's state directory (C(sglang_state_dir)); the sets live under its C(changes/).
    type: path
    required: true
  changeset:
    description:
      - The set to close, keep or restore, as RV(dir) of O(state=opened) returned it, or V(newest) (O(state=restored)
        only) for the newest set whose change stands.
    type: str
  run_id:
    description: The run that opens the set (the lease's holder), recorded in it.
    type: str
    default: ""
  files:
    description: The configuration files the run may write, recorded with O(state=opened).
    type: list
    elements: path
    default: []
  forward:
    description:
      - Files among O(files) that go forward only (the API keys' file) - O(state=restored) leaves the bytes the run
        wrote in place, so that a key rotated away (perhaps because it leaked) never comes back with an undo or a
        rollback; the line in RV(left) says so. A file the run removed is put back (no newer one exists, and the
        unit put back names it).
    type: list
    elements: path
    default: []
  venv:
    description: The switch of staged releases (C(sglang_venv)); the release it points at is recorded.
    type: path
  dirs:
    description: Directories the run may create; a restore lists those it created as left.
    type: list
    elements: path
    default: []
  user:
    description: The service account the run may create; a restore lists it as left when it did.
    type: str
    default: sglang
  group:
    description: The service group the run may create.
    type: str
    default: sglang
  service:
    description: The systemd unit whose state (active, enabled) before the run is recorded.
    type: str
    default: sglang
  keep:
    description: How many sets to keep (the newest).
    type: int
    default: 5
notes:
  - Needs root (become), as the files it records are root's.
seealso:
  - module: fleetops.sglang.sglang_release
"""

EXAMPLES = r"""
- name: Open this run's change set before the first write
  fleetops.sglang.sglang_changeset:
    state: opened
    state_dir: /var/lib/sglang-remediation
    run_id: "{{ lease.holder.run_id }}"
    venv: /opt/sglang/venv
    files:
      - /models/DeepSeek-V3-EAGLE3/config.json
      - /etc/systemd/system/sglang.service
      - /etc/sglang/sglang.env
      - /var/lib/sglang-remediation/running.json
  register: changes

- name: Put back what the failed run changed
  fleetops.sglang.sglang_changeset:
    state: restored
    state_dir: /var/lib/sglang-remediation
    changeset: "{{ changes.dir }}"
  register: undo

- name: Roll the last remediation back (playbooks/rollback.yml)
  fleetops.sglang.sglang_changeset:
    state: restored
    state_dir: /var/lib/sglang-remediation
    changeset: newest
"""

RETURN = r"""
id:
  description: The set's id (a zero-padded sequence number); V(null) when O(changeset=newest) found none.
  type: str
  returned: always
  sample: "000007"
dir:
  description: Where the set lives; what O(changeset) takes.
  type: str
  returned: always
  sample: /var/lib/sglang-remediation/changes/000007
set_state:
  description: The set's state after this call - V(open), V(closed), V(kept), V(discarded) or V(restored).
  type: str
  returned: always
  sample: closed
service:
  description: Whether the service was active and enabled when the set was opened.
  type: dict
  returned: always
  sample: {active: true, enabled: true}
changes:
  description: With O(state=closed), what the run changed (path, sha256 before -> after; a release step).
  type: list
  elements: str
  returned: always
  sample: ["/etc/systemd/system/sglang.service 3f2a9c01aa8e -> 9bd1e0f2c4a7"]
restored:
  description: With O(state=restored), what was put back, each with the sha256 (and mode, owner) now in place.
  type: list
  elements: str
  returned: always
  sample: ["/etc/systemd/system/sglang.service restored to sha256 3f2a... (0644 root:root)"]
restored_files:
  description:
    - With O(state=restored), each file put back, in the order of RV(restored) - the record to read, where
      RV(restored) is the text for people.
    - RV(restored_files[].sha256), RV(restored_files[].mode) and RV(restored_files[].owner) are V(null) for a file
      the run had created, which the restore removed.
    - A switch back to the release that served adds the SGLang C(deepseek_v2.py) now in place, under the venv's
      path, with the sha256 its release was sealed with (mode and owner V(null)); a removed build adds none.
  type: list
  elements: dict
  returned: always
  sample: [{path: /etc/systemd/system/sglang.service, sha256: 3f2a..., mode: "0644", owner: "root:root"}]
  contains:
    path:
      description: The file's path.
      type: str
    sha256:
      description: The sha256 of the content now in place.
      type: str
    mode:
      description: Its mode, in octal.
      type: str
    owner:
      description: Its owner and group, as C(user:group).
      type: str
release:
  description:
    - With O(state=opened), the SGLang release installed in the venv as the set found it; V(null) where none is.
    - With O(state=restored), the release the set recorded (what runs once the set is put back); V(null) for a venv the run created.
  type: str
  returned: always
  sample: "0.5.9"
forward_kept:
  description: With O(state=restored), the O(forward) files the run wrote, left as they are (also named in RV(left)).
  type: list
  elements: path
  returned: always
  sample: ["/etc/sglang/sglang.keys.yaml"]
left:
  description: With O(state=restored), what the run created and the restore left in place, and the O(forward) files
    the run wrote.
  type: list
  elements: str
  returned: always
  sample: ["/opt/sglang/venv with sglang 0.5.9 (installed by this run)", "user sglang (created by this run)"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils import _changeset as changeset
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import EngineError


def service_state(module, name):
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return {"active": False, "enabled": False}
    active = module.run_command([systemctl, "is-active", "--quiet", name])[0] == 0
    enabled = module.run_command([systemctl, "is-enabled", "--quiet", name])[0] == 0
    return {"active": active, "enabled": enabled}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["opened", "closed", "kept", "restored"]),
            state_dir=dict(type="path", required=True),
            changeset=dict(type="str"),
            run_id=dict(type="str", default=""),
            files=dict(type="list", elements="path", default=[]),
            forward=dict(type="list", elements="path", default=[]),
            venv=dict(type="path"),
            dirs=dict(type="list", elements="path", default=[]),
            user=dict(type="str", default="sglang"),
            group=dict(type="str", default="sglang"),
            service=dict(type="str", default="sglang"),
            keep=dict(type="int", default=5),
        ),
        required_if=[("state", "opened", ["venv"]), ("state", "closed", ["changeset"]), ("state", "kept", ["changeset"]),
                     ("state", "restored", ["changeset"])],
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, id=None, dir=None, set_state=None, service={}, changes=[], restored=[], restored_files=[], left=[], forward_kept=[],
                  release=None)
    try:
        if p["state"] == "opened":
            if module.check_mode:
                result.update(set_state="open (check mode: not written)", service=service_state(module, p["service"]))
                module.exit_json(**result)
            manifest = changeset.open_set(p["state_dir"], p["run_id"], p["files"], p["venv"], p["dirs"],
                                          p["user"], p["group"], service_state(module, p["service"]), p["keep"],
                                          forward=p["forward"])
            # Bookkeeping in the state directory, not a change of the host: a run that changes nothing reports
            # none (its set is discarded at the close).
            result.update(changed=False, id=manifest["id"], dir=manifest["dir"], set_state="open",
                          service=manifest["service"], release=manifest["release"])
        elif p["state"] in ("closed", "kept"):
            manifest = changeset.load(p["changeset"])
            result.update(id=manifest["id"], dir=p["changeset"], service=manifest.get("service", {}))
            if module.check_mode:
                result.update(changes=changeset.changes(manifest), set_state="%s (check mode)" % p["state"])
            else:
                closed = changeset.close_set(p["changeset"], state=p["state"])
                result.update(changed=closed["state"] != "discarded", set_state=closed["state"],
                              changes=closed["changes"])
        else:
            set_dir = p["changeset"]
            if set_dir == "newest":
                set_dir = changeset.newest_applied(p["state_dir"])
                if set_dir is None:
                    result["msg"] = "no change set to roll back under %s" % os.path.join(p["state_dir"], "changes")
                    module.exit_json(**result)
            restored = changeset.restore_set(set_dir, module.check_mode)
            result.update(changed=restored["changed"], id=restored["id"], dir=set_dir,
                          set_state="restored" if not module.check_mode else "restored (check mode)",
                          service=restored["service"], restored=restored["restored"], left=restored["left"],
                          forward_kept=restored["forward_kept"],
                          restored_files=restored["files"],
                          release=restored["release"])
    except changeset.RestoreError as exc:
        # What was put back before it stopped still goes to the report.
        result.update(restored=exc.restored, restored_files=exc.files, left=exc.left, changed=bool(exc.restored))
        module.fail_json(msg="change set under %s: %s" % (p["state_dir"], exc), **result)
    except (EngineError, OSError, ValueError, KeyError) as exc:
        module.fail_json(msg="change set under %s: %s" % (p["state_dir"], exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
