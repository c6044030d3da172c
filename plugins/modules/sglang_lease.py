#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take, give back or read the per-host lease that keeps two runs off one host."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_lease
short_description: One run per host at a time, through a lease file on the host
version_added: "1.1.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
description:
  - A writing run takes the host's lease once its probe found work to do and gives it back after
    the report, so that a cron audit, a second operator or a rerun cannot back up, patch and restart
    the same host at the same time.
  - The lease is a JSON file naming its holder (run id, controller host, user, controller pid, when
    the run started and when the lease was taken). Changes to it are serialised with C(flock) on
    a guard file next to it, so two runs that arrive together cannot both take it.
  - O(state=acquired) waits up to O(wait) seconds for a lease another run holds. A lease older than
    O(ttl), an unreadable one, or one whose run id is O(takeover) is taken over, and the module
    warns which holder it replaced.
  - A lease records a heartbeat that its holder refreshes while it runs (M(fleetops.sglang.sglang_gate) on every
    poll, M(fleetops.sglang.sglang_eagle3) after the install, through their O(fleetops.sglang.sglang_gate#module:lease)
    option). A lease whose heartbeat is older than O(stale) seconds is taken over from any controller, with a warning
    naming the old holder.
  - O(state=released) removes the lease when this run holds it, and leaves anyone else's alone.
  - O(state=broken) frees the host whoever holds the lease (playbooks/lease_break.yml) and appends who broke it, why
    (O(reason)) and whose lease it was to C(lease-breaks.jsonl) next to the lease file.
  - O(state=inspect) only reads it (audits and check mode never take or wait for the lease).
  - The action plugin of the same name fills O(holder) from the controller (run id, host name,
    user, pid, start of the run), turns O(wait) into a wait of up to O(timeout) seconds, takes over
    the lease of a run whose process no longer exists on this controller, and fails the host with
    a message naming the holder when the wait runs out.
  - The lease itself is bookkeeping, not host state, so it never makes a call report C(changed). Its directory
    is host state, so O(state=acquired) creates it (0700, root's when run as root) or fixes its mode and owner, and
    reports C(changed) when it did.
attributes:
  check_mode:
    support: full
    details:
      - In check mode every state only reads the lease (as O(state=inspect)).
options:
  path:
    description:
      - The lease file (the role uses C(<sglang_state_dir>/lease.json)); C(<path>.guard) is the flock
        guard. O(state=acquired) creates the directory (0700) when missing; the role needs no task of its own for
        it.
    type: path
    required: true
  state:
    description:
      - V(acquired) takes the lease (waiting as described), V(released) gives it back, V(inspect) only reads it,
        V(broken) removes it whoever holds it and records why.
    type: str
    choices: [acquired, released, inspect, broken]
    default: acquired
  holder:
    description:
      - Who asks, as C(run_id), C(controller), C(user), C(pid), C(started) (epoch seconds). The action
        plugin fills it; only C(run_id) is required.
    type: dict
  ttl:
    description:
      - Seconds after which a lease is considered abandoned and taken over with a warning; longer
        than the longest run holds one host.
    type: int
    default: 7200
  stale:
    description:
      - Seconds without a heartbeat after which a lease is taken over with a warning (C(sglang_lock_stale_seconds)).
        Longer than the longest step that sends none, the install.
    type: int
    default: 1800
  reason:
    description: Why the lease is broken (O(state=broken), required there); recorded with who broke it.
    type: str
  wait:
    description: Seconds this call waits for a held lease before it returns (C(acquired=false)).
    type: int
    default: 0
  timeout:
    description:
      - Seconds the action plugin waits in total for a held lease before it fails the host. Ignored by
        the module itself.
    type: int
    default: 300
  takeover:
    description:
      - Run id of a holder known to be gone; its lease is taken over (only while it still holds it).
    type: str
    default: ""
seealso:
  - module: fleetops.sglang.sglang_probe
"""

EXAMPLES = r"""
- name: Take this host's lease (wait up to five minutes for another run)
  fleetops.sglang.sglang_lease:
    path: /var/lib/sglang-remediation/lease.json
    timeout: 300

- name: Give the lease back after the report
  fleetops.sglang.sglang_lease:
    path: /var/lib/sglang-remediation/lease.json
    state: released

- name: Free a host whose run is known to be gone, saying why
  fleetops.sglang.sglang_lease:
    path: /var/lib/sglang-remediation/lease.json
    state: broken
    reason: "AWX job 4711 was cancelled mid-run (INC-2231)"

- name: Say whether another run holds the host (audits, check mode)
  fleetops.sglang.sglang_lease:
    path: /var/lib/sglang-remediation/lease.json
    state: inspect
"""

RETURN = r"""
acquired:
  description: Whether this run holds the lease after the call (V(false) for O(state=inspect) and O(state=released)).
  type: bool
  returned: always
  sample: true
released:
  description: Whether the call removed this run's lease.
  type: bool
  returned: always
  sample: false
holder:
  description: The holder of the lease after the call (this run after a successful acquire); null when free.
  type: dict
  returned: always
  sample:
    run_id: 20261201T122730Z-remediate-4242
    controller: ops-bastion-1
    user: alice
    pid: 4242
    started: 1796128050
    taken_at: 1796128062
    heartbeat: 1796128120
broken:
  description: Whether O(state=broken) removed a lease.
  type: bool
  returned: always
  sample: false
held_by_other:
  description: Whether another run holds the lease.
  type: bool
  returned: always
  sample: false
holder_text:
  description: The holder as one line (run id, user@controller, pid, run start, lease time); empty when free.
  type: str
  returned: always
  sample: >-
    run 20261201T122730Z-remediate-4242 by alice@ops-bastion-1 (controller pid 4242),
    run started 2026-12-01T12:27:30Z, lease taken 2026-12-01T12:27:42Z (12s ago)
previous:
  description: The holder this call took over (stale, unreadable or gone); null otherwise.
  type: dict
  returned: always
  sample: null
waited:
  description: Seconds this call waited.
  type: float
  returned: always
  sample: 0.0
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import DEFAULT_STALE, LeaseFile, describe


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["acquired", "released", "inspect", "broken"], default="acquired"),
            holder=dict(type="dict"),
            ttl=dict(type="int", default=7200),
            stale=dict(type="int", default=DEFAULT_STALE),
            reason=dict(type="str"),
            wait=dict(type="int", default=0),
            timeout=dict(type="int", default=300),
            takeover=dict(type="str", default=""),
        ),
        required_if=[("state", "acquired", ("holder",)), ("state", "released", ("holder",)),
                     ("state", "broken", ("holder", "reason"))],
        supports_check_mode=True,
    )
    p = module.params
    lease = LeaseFile(p["path"])
    me = dict(p["holder"] or {})
    if p["state"] in ("acquired", "released") and not me.get("run_id"):
        module.fail_json(msg="holder.run_id is required to take or give back the lease")
    started = time.time()
    result = dict(changed=False, acquired=False, released=False, broken=False, holder=None, previous=None,
                  waited=0.0)
    if p["state"] == "broken" and not (p["reason"] or "").strip():
        module.fail_json(msg="reason is required to break a lease: say why the holder is known to be gone")
    if p["state"] == "broken" and not module.check_mode:
        result.update(lease.break_lease(me, p["reason"].strip(), time.time()))
        result["changed"] = result["broken"]
        if result["previous"]:
            module.warn("broke the lease of %s: %s" % (describe(result["previous"], time.time()), p["reason"].strip()))
    elif p["state"] == "inspect" or module.check_mode:
        result["holder"], problem = lease.read()
        if problem:
            module.warn("the lease file %s is unreadable: %s" % (p["path"], problem))
    elif p["state"] == "released":
        result.update(lease.release(me))
    else:
        result.update(lease.acquire(me, ttl=p["ttl"], wait=p["wait"], takeover=p["takeover"], stale=p["stale"]))
        result["changed"] = lease.dir_changed
        why = result.pop("why", "")
        result["waited"] = round(time.time() - started, 1)
        if result["acquired"] and why:
            previous = describe(result["previous"], time.time()) if result["previous"] else "an unreadable lease"
            module.warn("took over the lease of %s: %s" % (previous, why))
    holder = result["holder"]
    result["held_by_other"] = bool(holder) and holder.get("run_id") != me.get("run_id")
    result["holder_text"] = describe(holder, time.time()) if holder else ""
    module.exit_json(**result)


if __name__ == "__main__":
    main()
