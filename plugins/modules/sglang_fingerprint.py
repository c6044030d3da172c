#!/usr/bin/python
"""Decide whether the SGLang service must restart, from what runs vs what should run."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_fingerprint
short_description: Compare the files an SGLang server runs from with those recorded at its last healthy start
description:
  - Hashes the components that define what an SGLang server runs (installed release, patched
    model file, draft config, systemd unit, environment file, command) and compares them with
    the fingerprint recorded after the last healthy start.
  - A restart is needed when any component differs, when nothing was ever recorded, or when
    the service is not active. Whether an earlier task reported "changed" plays no part, so an
    interrupted run (patched but not restarted) is restarted by the rerun, and a compliant host
    is never restarted.
  - C(state=record) writes the current fingerprint; the role calls it only after the health
    gates pass.
options:
  components:
    description: Name to file path (hashed) or to C(value:<text>) (hashed as text).
    type: dict
    required: true
  state_file:
    description: Where the fingerprint of the last healthy start is kept.
    type: path
    required: true
  service:
    description: systemd unit name whose activity is part of the decision.
    type: str
    required: true
  state:
    description: C(compare) only reads; C(record) writes the current fingerprint.
    type: str
    choices: [compare, record]
    default: compare
author: SGLang remediation maintainers
"""

RETURN = r"""
restart_needed: {description: Whether the service must restart., type: bool, returned: always}
reasons: {description: Why, one line per differing component., type: list, returned: always}
current: {description: Component name to sha256 now., type: dict, returned: always}
recorded: {description: Component name to sha256 at the last healthy start., type: dict, returned: always}
active: {description: Whether the service is active., type: bool, returned: always}
"""

import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils.sglang_runstate import current_fingerprint, decide, load_recorded, service_active


def write_atomic(path: str, data: dict) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fingerprint.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            components=dict(type="dict", required=True),
            state_file=dict(type="path", required=True),
            service=dict(type="str", required=True),
            state=dict(type="str", choices=["compare", "record"], default="compare"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    current = current_fingerprint(p["components"])
    recorded = load_recorded(p["state_file"])
    active = service_active(p["service"])
    reasons = decide(current, recorded, active)
    result = dict(changed=False, current=current, recorded=recorded.get("components", {}),
                  active=active, reasons=reasons, restart_needed=bool(reasons))
    if p["state"] == "record":
        if recorded.get("components") != current:
            result["changed"] = True
            if not module.check_mode:
                write_atomic(p["state_file"], {"components": current, "recorded_at": int(time.time())})
        result["restart_needed"] = False
        result["reasons"] = []
    module.exit_json(**result)


if __name__ == "__main__":
    main()
