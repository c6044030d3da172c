#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test double: record a fingerprint as sglang_gate's ``record`` does, without a server to gate.

Only for tests (ANSIBLE_LIBRARY=tests/modules): the role records through sglang_gate once a
restart passed its gates; both write with module_utils/_fingerprint.record.
"""
from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._fingerprint import current_fingerprint, record


def main() -> None:
    module = AnsibleModule(argument_spec=dict(components=dict(type="dict", required=True),
                                              state_file=dict(type="path", required=True)),
                           supports_check_mode=True)
    p = module.params
    changed = record(p["state_file"], p["components"], module.check_mode)
    module.exit_json(changed=changed, current=current_fingerprint(p["components"]))


if __name__ == "__main__":
    main()
