#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: write the host's node_exporter textfile from the run's result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_metrics
short_description: Write the SGLang remediation result as a node_exporter textfile-collector file
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
description:
  - Writes, atomically (temporary file in the same directory, then rename), the Prometheus text
    file that node_exporter's textfile collector exports, with what this run found on the host,
    C(sglang_remediation_compliant), C(sglang_remediation_info{release,decision,family,draft_ids,mode}),
    C(sglang_remediation_live_accept_length{source}), C(sglang_remediation_live_info),
    C(sglang_remediation_failure{class}), C(sglang_remediation_restarts_total),
    C(sglang_remediation_last_run_timestamp_seconds), C(sglang_remediation_last_success_timestamp_seconds)
    and C(sglang_remediation_accept_length_min).
  - The restart counter persists in O(state_file), which is written only when O(restarts) is above 0.
    The last-success time is carried from the previous textfile when this run is not a success
    (not compliant, or an O(error)), so it keeps its old value on a failed run.
  - The role calls it at the end of every run that went past M(fleetops.sglang.sglang_probe);
    a run that ends at the probe has the probe write the same file.
  - Always reports C(changed=false). The file is a record of the run, rewritten on every run like
    the fleet report on the controller, not configuration of the host.
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is written; RV(text) shows what would be.
options:
  path:
    description: The textfile, in node_exporter's textfile directory; its name must end in C(.prom).
    type: path
    required: true
  state_file:
    description: JSON file holding C(restarts_total) between runs (under C(sglang_state_dir)).
    type: path
    required: true
  compliant:
    description: The host ended this run compliant (files, running server and live state).
    type: bool
    required: true
  release:
    description: Installed SGLang release.
    type: str
    default: ""
  decision:
    description: The engine's decision (V(patch), V(native), V(refuse)), or what the role recorded instead.
    type: str
    default: ""
  family:
    description: Patch template or native family chosen from the code's shape.
    type: str
    default: ""
  draft_ids:
    description: The layer ids the draft config lists for the installed release.
    type: list
    elements: raw
    default: []
  mode:
    description: Which run wrote the file (the report row's C(sglang_remediation.mode)).
    type: str
    choices: [remediate, audit, rollback]
    default: remediate
  replica:
    description:
      - The multi-node replica the host is a node of (the report row's C(sglang_remediation.replica)), a label of
        C(sglang_remediation_info); empty for a host of one node.
    type: str
    default: ""
  drift:
    description:
      - What is not as it should be, the findings of the role's report row (C(sglang_remediation.drift)).
      - Each finding's O(drift[].code) sets its class of C(sglang_remediation_failure) (the table in
        C(plugins/module_utils/_reasons.py)); its text is not read. An unknown code fails the module.
    type: list
    elements: dict
    default: []
    suboptions:
      code:
        description: The finding's reason code, for example V(unit.differs) or V(live.accept_length_low).
        type: str
        required: true
      text:
        description: The finding in words (for the report; not read here).
        type: str
        default: ""
  error:
    description:
      - Why the run failed on this host (a failed gate, a refusal); empty when it did not.
      - Any error sets the class C(error), whatever its words.
    type: str
    default: ""
  live:
    description: The live reading (RV(fleetops.sglang.sglang_probe#module:live) or the gate's RV(fleetops.sglang.sglang_gate#module:reading)).
    type: dict
  accept_length_min:
    description: The role's C(sglang_accept_length_min), exported so that alert rules can use it.
    type: float
    default: 0
  restarts:
    description: Restarts of the service this run performed (gated restart, rollback restart).
    type: int
    default: 0
  audit_timer:
    description:
      - The host's audit timer, as M(fleetops.sglang.sglang_probe) returned it in its RV(fleetops.sglang.sglang_probe#module:audit_spec)
        (the spec built from that run's arguments).
      - Installed or updated (or removed, its C(state) being V(absent)) only at the end of a remediation run
        (O(mode=remediate)) that left the host compliant with no error; another run leaves the timer as it was.
        Check mode only says what would change. Its state sets C(sglang_remediation_audit_timer).
    type: dict
seealso:
  - module: fleetops.sglang.sglang_probe
  - module: fleetops.sglang.sglang_gate
"""

EXAMPLES = r"""
- name: Write the node_exporter textfile for this run
  fleetops.sglang.sglang_metrics:
    path: /var/lib/prometheus/node-exporter/sglang_remediation.prom
    state_file: /var/lib/sglang-remediation/metrics-state.json
    compliant: "{{ sglang_remediation.compliant }}"
    release: "{{ sglang_remediation.release }}"
    decision: "{{ sglang_remediation.decision }}"
    family: "{{ sglang_remediation.family }}"
    draft_ids: "{{ sglang_remediation.draft_layer_ids }}"
    drift: "{{ sglang_remediation.drift }}"
    error: "{{ sglang_remediation.error }}"
    live: "{{ sglang_remediation.live }}"
    accept_length_min: 2.5
    restarts: 1
"""

RETURN = r"""
audit_timer:
  description: What O(audit_timer) changed (C(changed), C(changes)); V(null) when it was left alone.
  type: dict
  returned: always
  sample: {changed: false, changes: []}
path:
  description: The textfile written (or that would be, in check mode).
  type: str
  returned: always
  sample: /var/lib/prometheus/node-exporter/sglang_remediation.prom
written:
  description: Whether the file was written (V(false) in check mode).
  type: bool
  returned: always
  sample: true
restarts_total:
  description: The restart counter after this run.
  type: int
  returned: always
  sample: 3
last_run:
  description: This run's timestamp, epoch seconds.
  type: float
  returned: always
  sample: 1764583200.5
last_success:
  description: The last-success timestamp now in the file; V(null) when no run has succeeded.
  type: float
  returned: always
  sample: 1764583200.5
classes:
  description: Failure classes set to 1.
  type: list
  elements: str
  returned: always
  sample: [live_accept_length]
text:
  description: The file's content.
  type: str
  returned: always
  sample: "# HELP sglang_remediation_compliant ...\n"
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._hostaudit import install
from ansible_collections.fleetops.sglang.plugins.module_utils._metrics import (
    classify,
    load_restarts,
    previous_last_success,
    render,
    update,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import REMEDIATE, RUN_MODES


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state_file=dict(type="path", required=True),
            compliant=dict(type="bool", required=True),
            release=dict(type="str", default=""),
            decision=dict(type="str", default=""),
            family=dict(type="str", default=""),
            draft_ids=dict(type="list", elements="raw", default=[]),
            mode=dict(type="str", default=REMEDIATE, choices=list(RUN_MODES)),
            replica=dict(type="str", default=""),
            drift=dict(type="list", elements="dict", default=[], options=dict(
                code=dict(type="str", required=True),
                text=dict(type="str", default=""),
            )),
            error=dict(type="str", default=""),
            live=dict(type="dict"),
            accept_length_min=dict(type="float", default=0),
            restarts=dict(type="int", default=0),
            audit_timer=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not p["path"].endswith(".prom"):
        module.fail_json(msg="path=%s: node_exporter's textfile collector reads only *.prom files" % p["path"])
    try:
        classes = classify([d["code"] for d in p["drift"]], p["error"])
    except ValueError as exc:
        module.fail_json(msg="drift: %s" % exc)
    success = bool(p["compliant"]) and not p["error"]
    values = dict(compliant=success, release=p["release"], decision=p["decision"], family=p["family"],
                  draft_ids=p["draft_ids"], mode=p["mode"], live=p["live"], classes=classes,
                  accept_length_min=p["accept_length_min"], replica=p["replica"],
                  audit_timer=bool(p["audit_timer"]) and p["audit_timer"].get("state", "present") == "present")
    timer = None
    if p["audit_timer"] and p["audit_timer"].get("spec") and p["mode"] == REMEDIATE and success:
        # After the textfile (written below): the run's verdict is kept even when the timer cannot be installed.
        timer = p["audit_timer"]
    now = time.time()
    if module.check_mode:
        timer = timer and install(timer, True, module.run_command)
        total = load_restarts(p["state_file"]) + max(p["restarts"], 0)
        last = now if success else previous_last_success(p["path"])
        text = render(dict(values, restarts_total=total, last_run=now, last_success=last))
        module.exit_json(changed=bool(timer and timer["changed"]), audit_timer=timer, path=p["path"], written=False,
                         restarts_total=total, last_run=now,
                         last_success=last, classes=classes, text=text)
    try:
        out = update(p["path"], p["state_file"], values, max(p["restarts"], 0), now, success)
    except OSError as exc:
        module.fail_json(msg="the textfile %s could not be written: %s" % (p["path"], exc))
    try:
        timer = timer and install(timer, False, module.run_command)
    except OSError as exc:
        module.fail_json(msg="the textfile %s was written; the audit timer could not be installed: %s" % (p["path"], exc),
                         path=out["path"], written=True)
    module.exit_json(changed=bool(timer and timer["changed"]), audit_timer=timer, path=out["path"], written=True,
                     restarts_total=out["restarts_total"],
                     last_run=out["last_run"], last_success=out["last_success"], classes=classes,
                     text=out["text"])


if __name__ == "__main__":
    main()
