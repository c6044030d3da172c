#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decide whether the SGLang service must restart, from what runs vs what should run."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_fingerprint
short_description: Compare the files an SGLang server runs from with those recorded at its last healthy start
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
description:
  - Hashes the components that define what an SGLang server runs (installed release, patched
    model file, draft config, systemd unit, environment file, command) and compares them with
    the fingerprint recorded after the last healthy start.
  - A restart is needed when any component differs, when nothing was ever recorded, or when
    the service is not active. Whether an earlier task reported "changed" plays no part, so an
    interrupted run (patched but not restarted) is restarted by the rerun, and a compliant host
    is never restarted.
  - It only reads. The fingerprint is recorded by M(fleetops.sglang.sglang_gate)'s
    O(fleetops.sglang.sglang_gate#module:record), in the gate's own call, once a restart passed it (the
    C(state=record) of 1.x was removed in 2.0.0).
attributes:
  check_mode:
    support: full
options:
  components:
    description:
      - Name to file path (hashed), to C(value:<text>) (hashed as text), or to C(tree:<directory>) (its entries'
        names, sizes and modification times hashed, links followed; a model's weights are not read).
      - A file or directory that does not exist hashes as C(missing).
    type: dict
    required: true
  state_file:
    description: Where the fingerprint of the last healthy start is kept (JSON, as M(fleetops.sglang.sglang_gate) records it).
    type: path
    required: true
  service:
    description: systemd unit name whose activity (C(systemctl is-active)) is part of the decision.
    type: str
    required: true
  state:
    description: V(compare), the only state since 2.0.0.
    type: str
    choices: [compare]
    default: compare
seealso:
  - module: fleetops.sglang.sglang_probe
"""

EXAMPLES = r"""
- name: Compare what runs with what should run
  fleetops.sglang.sglang_fingerprint:
    components: &components
      sglang: "value:0.5.9 ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
      draft_config: /models/DeepSeek-V3-EAGLE3/config.json
      unit: /etc/systemd/system/sglang.service
      environment: /etc/sglang/sglang.env
    state_file: /var/lib/sglang-remediation/running.json
    service: sglang
  register: fingerprint

- name: Restart SGLang when what runs is not what should run
  ansible.builtin.systemd_service:
    name: sglang
    state: restarted
  when: fingerprint.restart_needed
"""

RETURN = r"""
restart_needed:
  description: Whether the service must restart.
  type: bool
  returned: always
  sample: true
changed_components:
  description:
    - Names of the components that differ from the last healthy start, sorted; V(null) when none was recorded.
      The data behind RV(reasons), which only says it in prose.
  type: list
  elements: str
  returned: always
  sample: [draft_config]
reasons:
  description: Why, one line per differing component (plus one when nothing was recorded or the service is not active).
  type: list
  elements: str
  returned: always
  sample:
    - draft_config changed since the last healthy start
    - the service is not active
current:
  description: Component name to sha256 now (C(missing) for an absent file).
  type: dict
  returned: always
  sample:
    sglang: 2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6
    draft_config: 18ac3e7343f016890c510e93f935261169d9e3f565436429830faf0934f4f8e4
    unit: aaa9402664f1a41f40ebbc52c9993eb66aeb366602958fdfaa283b71e64db123
recorded:
  description: Component name to sha256 at the last healthy start, as read before this call; empty when none was recorded.
  type: dict
  returned: always
  sample:
    sglang: 2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6
    draft_config: 3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea
    unit: aaa9402664f1a41f40ebbc52c9993eb66aeb366602958fdfaa283b71e64db123
active:
  description: Whether the service is active (V(false) also when C(systemctl) is absent).
  type: bool
  returned: always
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._fingerprint import (
    changed_components,
    current_fingerprint,
    shown,
    describe,
    load_recorded,
    service_active,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            components=dict(type="dict", required=True),
            state_file=dict(type="path", required=True),
            service=dict(type="str", required=True),
            state=dict(type="str", choices=["compare"], default="compare"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    current = current_fingerprint(p["components"])
    recorded = load_recorded(p["state_file"])
    active = service_active(p["service"], module.run_command, module.get_bin_path)
    changed = changed_components(current, recorded)
    reasons = describe(changed, active)
    result = dict(changed=False, current=shown(current), recorded=shown(recorded.get("components", {})),
                  active=active, changed_components=changed, reasons=reasons, restart_needed=bool(reasons))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
