# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's plan: which hosts go first and how many leave rotation at once.

One rule, used by playbooks/remediate.yml (the probe pass refuses a bad plan before any
host is touched; the rollout play takes its host order and ``serial`` from it) and by
playbooks/rollback.yml (its ``serial``), through the ``rollout_plan`` filter:

- ``sglang_max_unavailable`` (a count, or ``N%`` of the whole group ``sglang``, rounded
  down, at least 1) bounds the hosts out of rotation at once: draining, restarting, or
  rolled back and kept drained. Hosts already lost (unreachable in the probe pass) use
  up that budget before the rollout starts.
- Canaries first: one per distinct value of ``sglang_canary_by`` (or the one first host),
  in batches of at most the budget, then the rest in inventory order, in batches of
  the budget.
- ``sglang_serial`` is the expert override of the batch sizes. Given together with
  ``sglang_max_unavailable``, any batch it would make bigger than the budget is refused.
- ``sglang_rollout_stage`` splits the rollout over jobs (AWX's job slicing runs each slice as
  its own job, sharing nothing): ``canaries`` rolls out the canaries only and leaves the rest
  for the next stage; ``after_canaries`` has no canary of its own (the canary stage passed in
  an earlier job) and starts with batches of the budget; ``all`` (the default) does both.

Standard library only.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import texts

# Without sglang_max_unavailable or sglang_serial: a tenth of the fleet out at a time.
DEFAULT_MAX_UNAVAILABLE = "10%"
_COUNT = re.compile(r"^\s*(\d+)\s*(%?)\s*$")
# The value a host without the sglang_canary_by variable is grouped under.
UNSET = "(unset)"
# Names of sglang_canary_by that are not host variables: what the host will run.
CANARY_ALIASES = {"release": "sglang_version"}

# The plan between plays (playbooks/remediate.yml). A play's hosts and serial are templated without
# hostvars, so the probe pass hands its plan to the rollout play in inventory groups: each list of
# the plan below goes to its group (handover(), tasks/rollout_plan.yml's one add_host), and the
# rollout play builds the same plan back from them (handed_over(), the rollout_plan filter with
# handed_over=true). These names are written here and nowhere else.
HANDOVER = (("order", "sglang_rollout_order"), ("canaries", "sglang_canaries"),
            ("unavailable", "sglang_probe_lost"), ("next_stage", "sglang_next_stage"))
NEXT_STAGE_GROUP = dict(HANDOVER)["next_stage"]
# Also read at play level, and set by the tasks that stop a rollout (the probe pass's limit or a
# refused plan, a batch's limit, a failed soak) and by the probe (the hosts that need work): the
# rollout play runs no host once STOPPED exists; the last play fails the hosts of SOAK_FAILED.
NEEDS_WORK_GROUP = "sglang_needs_work"
STOPPED_GROUP = "sglang_rollout_stopped"
SOAK_FAILED_GROUP = "sglang_soak_failed"


def handover(doc: Mapping[str, Any]) -> Dict[str, List[str]]:
    """Each host of the plan ``doc`` with the groups that carry it to the rollout play, the hosts in
    the plan's order (the rollout play's order is the group's); nothing for a refused plan."""
    out: Dict[str, List[str]] = {}
    if doc.get("errors"):
        return out
    for key, group in HANDOVER:
        for host in doc.get(key) or []:
            out.setdefault(str(host), []).append(group)
    return out


def handed_over(groups: Mapping[str, Any]) -> Dict[str, List[str]]:
    """The plan's lists back from the inventory's groups (the rollout play's side of handover())."""
    return {key: [str(h) for h in (groups.get(group) or [])] for key, group in HANDOVER}


def _count(value: Any) -> Optional[tuple]:
    """(number, is_percent) for 3, "3", "25%"; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (value, False) if value >= 0 else None
    match = _COUNT.match(str(value)) if isinstance(value, str) else None
    return (int(match.group(1)), bool(match.group(2))) if match else None


def resolve(value: Any, total: int) -> int:
    """A count or percentage of ``total`` as Ansible resolves serial: rounded down, at least 1."""
    number, percent = _count(value)
    return max(int(number * total / 100.0) if percent else number, 1)


def max_unavailable_errors(value: Any) -> List[str]:
    if value is None:
        return []
    parsed = _count(value)
    if parsed is None or parsed[0] == 0 or (parsed[1] and parsed[0] > 100):
        return ["sglang_max_unavailable=%r is not a count or a percentage of the group sglang; accepted: a whole "
                "number from 1 (e.g. 2) or a percentage from 1%% to 100%% (e.g. \"10%%\")" % (value,)]
    return []


def serial_errors(value: Any) -> List[str]:
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    bad = [i for i in items if _count(i) is None or _count(i)[0] == 0]
    if not items or bad:
        return ["sglang_serial=%r is not a list of batch sizes; accepted: counts from 1 or percentages of the hosts "
                "that need work, e.g. [1, 5, \"25%%\"]" % (value,)]
    return []


SOAK_ACTIONS = ("stop", "rollback")
# sglang_rollout_stage: both stages in one run, the canaries only, or the rest after them.
STAGE_ALL = "all"
STAGE_CANARIES = "canaries"
STAGE_AFTER_CANARIES = "after_canaries"
STAGES = (STAGE_ALL, STAGE_CANARIES, STAGE_AFTER_CANARIES)


def stage_errors(value: Any) -> List[str]:
    if value in (None, "") or (isinstance(value, str) and value in STAGES):
        return []
    return ["sglang_rollout_stage=%r is not a stage of the rollout; accepted: all (canaries, then the rest; the "
            "default), canaries (the canaries only: the canary job of a workflow) or after_canaries (no canary: "
            "the sliced job that a passed canary job starts)" % (value,)]


def soak_errors(seconds: Any, action: Any) -> List[str]:
    errors = []
    parsed = _count(seconds) if seconds is not None else (0, False)
    if parsed is None or parsed[1]:
        errors.append("sglang_soak_seconds=%r is not a number of seconds; accepted: a whole number from 0 (no soak), "
                      "e.g. 300" % (seconds,))
    if action is not None and action not in SOAK_ACTIONS:
        errors.append("sglang_on_soak_failure=%r is not an action; accepted: stop (stop the rollout) or rollback "
                      "(roll the batch back, then stop)" % (action,))
    return errors


# Host patterns that select every host: refused by playbooks/lease_break.yml whatever the count.
_EVERY_HOST = re.compile(r"^&?(all|\*)$")


def lease_break_errors(limit_terms: Sequence[str], limit: Any, target_terms: Sequence[str], target: Any,
                       hosts: Sequence[str], confirmed: Any = 1) -> List[str]:
    """Why playbooks/lease_break.yml must not break the leases of ``hosts`` (none: it may).

    A lease break frees hosts for any run, whoever holds them: it names its hosts. ``all`` or
    ``*`` in --limit (``limit``) or sglang_target_hosts (``target``), each given with its terms as
    Ansible splits them (plugins/plugin_utils/_hostpattern.py), is refused, and so is a
    selection of more hosts than the operator confirms with sglang_lease_break_hosts
    (``confirmed``, default 1)."""
    errors: List[str] = []
    for var, items, value in (("--limit", limit_terms, limit), ("sglang_target_hosts", target_terms, target)):
        wild = [str(i).strip() for i in items if _EVERY_HOST.match(str(i).strip())]
        if wild:
            shown = value if isinstance(value, str) else list(value)
            errors.append("%s=%s selects every host (%s): a lease break names the hosts whose run is known to be "
                          "gone (--limit gpu-17,gpu-18)" % (var, shown, ", ".join(wild)))
    number = _count(confirmed)
    if isinstance(confirmed, bool) or number is None or number[1] or number[0] < 1:
        errors.append("sglang_lease_break_hosts=%r: the number of hosts whose leases to break, a whole number of at "
                      "least 1 (default 1)" % (confirmed,))
    elif len(hosts) > number[0]:
        shown = ", ".join(list(hosts)[:5]) + (", ..." if len(hosts) > 5 else "")
        errors.append("the selection matches %d hosts (%s), more than sglang_lease_break_hosts=%d confirms: narrow "
                      "--limit, or confirm the count with -e sglang_lease_break_hosts=%d"
                      % (len(hosts), shown, number[0], len(hosts)))
    return errors


def soak_verdict(result: Mapping[str, Any]) -> str:
    """One host's soak read (a loop result of sglang_gate): "passed", or "failed: <why>"."""
    result = result if isinstance(result, Mapping) else {}
    if result.get("unreachable"):
        return "failed: unreachable: %s" % str(result.get("msg") or "").strip()
    failures = list(result.get("failures") or [])
    if result.get("failed") or not result.get("ready") or failures:
        why = " ".join(texts(failures)) or str(result.get("msg") or result.get("last_error") or "not healthy").strip()
        return "failed: %s" % why
    return "passed"


def canary_value(host: str, canary_by: str, hostvars: Mapping, groups: Mapping) -> str:
    """The value of ``canary_by`` for ``host``: membership of a group of that name, else the host variable."""
    if canary_by in groups and canary_by not in CANARY_ALIASES:
        return "in %s" % canary_by if host in list(groups[canary_by] or []) else "not in %s" % canary_by
    variables = hostvars[host] if host in hostvars else {}
    name = CANARY_ALIASES.get(canary_by, canary_by)
    try:
        value = variables[name] if name in variables else None
    except Exception:  # an undefined template inside the variable: grouped as unset
        value = None
    return UNSET if value is None else str(value)


def plan(needs_work: Sequence[str], fleet_size: int, max_unavailable: Any = None, serial: Any = None,
         canary_values: Optional[Mapping[str, str]] = None, unavailable: Sequence[str] = (),
         soak_seconds: Any = None, on_soak_failure: Any = None,
         canaries: Optional[Sequence[str]] = None, stage: Any = None) -> Dict[str, Any]:
    """The rollout of ``needs_work`` (inventory order): the host order, the ``serial`` list, and errors
    (each naming the variable, its value and the fix) that refuse the rollout before it starts.

    ``stage`` (``sglang_rollout_stage``) keeps one part of it: ``canaries`` plans the canaries alone
    and lists the others in ``next_stage``; ``after_canaries`` plans no canary."""
    needs = list(needs_work or [])
    lost = [h for h in (unavailable or []) if h not in needs]
    errors = (max_unavailable_errors(max_unavailable) + serial_errors(serial)
              + soak_errors(soak_seconds, on_soak_failure) + stage_errors(stage))
    stage = stage or STAGE_ALL
    # bounded: the batches are held to max_unavailable (it sized them, or it was given with serial);
    # batch_max: the biggest batch, what the room left out of rotation must fit after each batch.
    doc: Dict[str, Any] = {"order": needs, "serial": [1], "canaries": needs[:1], "max_unavailable": None,
                           "budget": None, "unavailable": lost, "errors": errors, "bounded": False,
                           "batch_max": 1, "stage": stage, "next_stage": []}
    if errors:
        return doc
    bound = DEFAULT_MAX_UNAVAILABLE if max_unavailable is None else max_unavailable
    limit = resolve(bound, max(int(fleet_size or 0), len(needs), 1))
    budget = limit - len(lost)
    doc.update(max_unavailable=limit, budget=budget)
    of = ("sglang_max_unavailable=%s (%d of the %d hosts of the group sglang)"
          % (bound, limit, max(int(fleet_size or 0), len(needs))) if max_unavailable is not None
          else "the default sglang_max_unavailable=%s (%d of the %d hosts of the group sglang)"
          % (bound, limit, max(int(fleet_size or 0), len(needs))))
    if needs and budget < 1:
        doc["errors"] = ["%s leaves no host to take out of rotation: %d already out (unreachable in the probe "
                         "pass: %s); bring them back, list them in sglang_skip_hosts or the group "
                         "sglang_maintenance, or raise sglang_max_unavailable" % (of, len(lost), ", ".join(lost))]
        return doc
    # One canary per value, in inventory order of their first host (or the canaries the probe pass
    # chose, given back at play level); then the rest.
    if stage == STAGE_AFTER_CANARIES:
        canaries = []
    elif canaries is not None:
        canaries = [h for h in needs if h in set(canaries)] or needs[:1]
    else:
        canaries, seen = [], set()
        for host in needs:
            value = (canary_values or {}).get(host, UNSET) if canary_values is not None else None
            if value not in seen:
                seen.add(value)
                canaries.append(host)
    doc["canaries"] = canaries
    doc["order"] = canaries + [h for h in needs if h not in canaries]
    if stage == STAGE_CANARIES:
        # The rest waits for the next job (the workflow's sliced job, sglang_rollout_stage=after_canaries).
        doc["next_stage"] = doc["order"][len(canaries):]
        doc["order"] = list(canaries)
        needs = list(canaries)
    if serial is not None:
        items = list(serial) if isinstance(serial, (list, tuple)) else [serial]
        sizes = [resolve(i, len(needs) or 1) for i in items]
        doc.update(serial=items, bounded=max_unavailable is not None, batch_max=max(sizes))
        if max_unavailable is not None and max(sizes) > budget:
            worst = items[sizes.index(max(sizes))]
            doc["errors"] = ["sglang_serial=%s would take %d hosts out of rotation at once (its batch %r of the %d "
                             "hosts that need work), more than %s allows%s; lower that batch, or leave "
                             "sglang_serial unset and let sglang_max_unavailable size the batches"
                             % (list(items), max(sizes), worst, len(needs), of,
                                " with %d already out (%s)" % (len(lost), ", ".join(lost)) if lost else "")]
        return doc
    batches = [min(budget, len(canaries) - i) for i in range(0, len(canaries), budget)]
    doc["serial"] = batches + [budget] if len(needs) > len(canaries) else (batches or [1])
    doc.update(bounded=True, batch_max=max(doc["serial"]))
    return doc
