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
            ("unavailable", "sglang_probe_lost"), ("next_stage", "sglang_next_stage"),
            ("not_serving", "sglang_not_serving"))
NEXT_STAGE_GROUP = dict(HANDOVER)["next_stage"]
# The nodes of each multi-node replica of the plan, in a group of its own (the window's units).
UNIT_GROUP_PREFIX = "sglang_replica__"
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
    for unit, hosts in unit_members((doc.get("window") or {}).get("units")).items():
        for host in hosts:
            out.setdefault(str(host), []).append(unit_group(unit))
    return out


def unit_group(unit: str) -> str:
    """The group that hands a replica's nodes over: its name with every character but a letter or a digit
    written as _XX (its code), so that group names stay valid and two replica names never share one."""
    return UNIT_GROUP_PREFIX + re.sub(r"[^A-Za-z0-9]", lambda m: "_%02x" % ord(m.group()), unit)


def _unit_name(group: str) -> str:
    return re.sub(r"_([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), group[len(UNIT_GROUP_PREFIX):])


def handed_over(groups: Mapping[str, Any]) -> Dict[str, Any]:
    """The plan's lists back from the inventory's groups (the rollout play's side of handover()), and
    ``units`` (host -> replica) from the replicas' groups."""
    lists: Dict[str, Any] = {key: [str(h) for h in (groups.get(group) or [])] for key, group in HANDOVER}
    lists["units"] = {str(h): _unit_name(g) for g in sorted(groups) if str(g).startswith(UNIT_GROUP_PREFIX)
                      for h in groups.get(g) or []}
    return lists


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


def lookahead_errors(value: Any) -> List[str]:
    if value is None:
        return []
    parsed = _count(value)
    if parsed is None or parsed[1]:
        return ["sglang_rollout_lookahead=%r is not a number of hosts; accepted: a whole number from 0 (no host "
                "prepares before a slot is free) up, e.g. 4 (the default is the window's size)" % (value,)]
    return []


def fail_errors(value: Any) -> List[str]:
    if value is None:
        return []
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not 0 <= number <= 100:
        return ["sglang_max_fail_percentage=%r is not a percentage; accepted: a number from 0 (the first failed "
                "host stops the rollout; the default) to 100, e.g. 10" % (value,)]
    return []


def max_failures(max_fail_percentage: Any, hosts: int) -> int:
    """How many hosts of a rollout of ``hosts`` may fail before it stops, as Ansible reads
    max_fail_percentage: the rollout stops once more than that percentage failed."""
    return int(float(max_fail_percentage or 0) * hosts / 100.0)


def plan(needs_work: Sequence[str], fleet_size: int, max_unavailable: Any = None, serial: Any = None,
         canary_values: Optional[Mapping[str, str]] = None, unavailable: Sequence[str] = (),
         soak_seconds: Any = None, on_soak_failure: Any = None,
         canaries: Optional[Sequence[str]] = None, stage: Any = None, forks: Any = None,
         max_fail_percentage: Any = None, lookahead: Any = None,
         not_serving: Sequence[str] = (), mode: Any = None,
         units: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """The rollout of ``needs_work`` (inventory order): the host order, the ``serial`` list, and errors
    (each naming the variable, its value and the fix) that refuse the rollout before it starts.

    ``stage`` (``sglang_rollout_stage``) keeps one part of it: ``canaries`` plans the canaries alone
    and lists the others in ``next_stage``; ``after_canaries`` plans no canary.

    ``mode`` is ``window`` (the default: the sliding window of plugins/strategy/window.py, ``window``
    says its size, the forks that bound it and its failure limit) or ``batches`` (``sglang_serial``
    given, or ``mode`` says so: playbooks/rollback.yml's, which has no window).

    ``not_serving``: hosts whose server the probe found not running. Out of rotation already, they
    hold slots of the window from the start (``window.kept_out``); one that needs work keeps its own
    slot through its remediation instead of taking another.

    ``units`` (host -> unit over the fleet, plugin_utils/_replicas.py): the nodes of a multi-node
    replica are one unit. The plan is then made over units (``fleet_size`` counts units): the budget,
    the canaries, the batches and the failure limit count replicas; a unit any node of which needs
    work goes whole, and the lists come back as hosts, each unit's nodes together
    (``window.units`` gives the strategy the units)."""
    members = unit_members(units)
    if members:
        return _plan_units(members, dict(units or {}), needs_work, fleet_size, max_unavailable=max_unavailable,
                           serial=serial, canary_values=canary_values, unavailable=unavailable,
                           soak_seconds=soak_seconds, on_soak_failure=on_soak_failure, canaries=canaries,
                           stage=stage, forks=forks, max_fail_percentage=max_fail_percentage, lookahead=lookahead,
                           not_serving=not_serving, mode=mode)
    doc = _plan(needs_work, fleet_size, max_unavailable, serial, canary_values, unavailable, soak_seconds,
                on_soak_failure, canaries, stage, max_fail_percentage, lookahead)
    doc["mode"] = "batches" if serial is not None or mode == "batches" else "window"
    budget = doc["budget"] or 1
    usable = resolve(forks, 1) if _count(forks) is not None and not _count(forks)[1] else budget
    size = max(min(budget, usable), 1)
    total = len(doc["order"])
    doc["window"] = {
        "size": size, "budget": budget, "forks": usable if forks is not None else None,
        # The canaries in batches of at most the window (each a serial batch: the rest starts once
        # they passed, their soak included), then everyone else in one.
        "serial": [min(size, len(doc["canaries"]) - i) for i in range(0, len(doc["canaries"]), size)]
        + ([max(total - len(doc["canaries"]), 1)] if total > len(doc["canaries"]) else []),
        "hosts": total, "canaries": list(doc["canaries"]),
        "max_fail_percentage": float(max_fail_percentage or 0) if not fail_errors(max_fail_percentage) else 0.0,
        "max_failures": max_failures(max_fail_percentage, total) if not fail_errors(max_fail_percentage) else 0,
        "lookahead": size if lookahead is None or lookahead_errors(lookahead) else _count(lookahead)[0],
    }
    if not doc["window"]["serial"]:
        doc["window"]["serial"] = [1]
    lost = set(doc["unavailable"])
    kept = [str(h) for h in (not_serving or []) if str(h) not in lost]
    doc["not_serving"] = kept
    doc["window"]["kept_out"] = kept
    idle = [h for h in kept if h not in set(doc["order"]) | set(doc["next_stage"])]
    if doc["mode"] == "window" and not doc["errors"] and doc["order"] and len(idle) >= size:
        doc["errors"] = ["the window of %d (sglang_max_unavailable, bounded by the forks) leaves no host to take out "
                         "of rotation: %d hosts that need no work are out of rotation already (their server not "
                         "running at the probe: %s); start them, list them in sglang_skip_hosts or the group "
                         "sglang_maintenance, or raise sglang_max_unavailable" % (size, len(idle), ", ".join(idle))]
    return doc


def unit_members(units: Optional[Mapping[str, str]]) -> Dict[str, List[str]]:
    """The units of more than one host, each with its hosts in the mapping's (inventory) order."""
    found: Dict[str, List[str]] = {}
    for host, unit in (units or {}).items():
        found.setdefault(str(unit), []).append(str(host))
    return {u: hs for u, hs in found.items() if len(hs) > 1}


def _plan_units(members: Mapping[str, List[str]], units: Mapping[str, str], needs_work: Sequence[str],
                fleet_size: int, serial: Any = None, canary_values: Optional[Mapping[str, str]] = None,
                unavailable: Sequence[str] = (), canaries: Optional[Sequence[str]] = None,
                not_serving: Sequence[str] = (), **kw: Any) -> Dict[str, Any]:
    """plan() over units, its lists given back as hosts."""
    def unit(host: str) -> str:
        return str(units.get(host, host))

    def of(hosts: Sequence[str]) -> List[str]:
        seen: List[str] = []
        for host in hosts:
            if unit(host) not in seen:
                seen.append(unit(host))
        return seen

    def hosts(unit_names: Sequence[str]) -> List[str]:
        return [h for u in unit_names for h in members.get(u, [u])]

    values = None
    if canary_values is not None:
        values = {}
        for host in needs_work:
            values.setdefault(unit(host), canary_values.get(host, UNSET))
    doc = plan(of(needs_work), fleet_size, serial=None if serial is None else serial, canary_values=values,
               unavailable=of(unavailable), canaries=None if canaries is None else of(canaries),
               not_serving=of(not_serving), **kw)
    if serial is not None and not doc["errors"]:
        doc["errors"] = ["sglang_serial=%r counts hosts, and a batch boundary would split a replica (%s); leave "
                         "sglang_serial unset: sglang_max_unavailable then sizes the batches in replicas"
                         % (serial, ", ".join(sorted(members)))]
    sizes = {u: len(members.get(u, [u])) for u in doc["order"]}
    unit_batches = _batches(doc["order"], doc["serial"]) if not doc["errors"] else []
    for key in ("order", "canaries", "unavailable", "next_stage", "not_serving"):
        doc[key] = hosts(doc[key])
    doc["serial"] = [sum(sizes[u] for u in batch) for batch in unit_batches] or [1]
    doc["batch_max"] = max(doc["serial"])
    window = doc["window"]
    canary_units = of(doc["canaries"])
    size = window["size"]
    window["serial"] = [sum(sizes.get(u, 1) for u in canary_units[i:i + size])
                        for i in range(0, len(canary_units), size)]
    rest = len(doc["order"]) - len(doc["canaries"])
    window["serial"] = (window["serial"] + ([rest] if rest > 0 else [])) or [1]
    window["canaries"] = list(doc["canaries"])
    window["kept_out"] = list(doc["not_serving"])
    window["units"] = {h: u for u, hs in members.items() for h in hs}
    return doc


def _batches(order: Sequence[str], serial: Sequence[Any]) -> List[List[str]]:
    """``order`` cut as Ansible cuts a play's hosts by ``serial`` (the last size repeats)."""
    out: List[List[str]] = []
    left = list(order)
    sizes = [resolve(s, len(order) or 1) for s in serial] or [len(left)]
    i = 0
    while left:
        n = max(sizes[min(i, len(sizes) - 1)], 1)
        out.append(left[:n])
        left = left[n:]
        i += 1
    return out


def _plan(needs_work: Sequence[str], fleet_size: int, max_unavailable: Any, serial: Any,
          canary_values: Optional[Mapping[str, str]], unavailable: Sequence[str],
          soak_seconds: Any, on_soak_failure: Any, canaries: Optional[Sequence[str]], stage: Any,
          max_fail_percentage: Any, lookahead: Any) -> Dict[str, Any]:
    needs = list(needs_work or [])
    lost = [h for h in (unavailable or []) if h not in needs]
    errors = (max_unavailable_errors(max_unavailable) + serial_errors(serial)
              + soak_errors(soak_seconds, on_soak_failure) + stage_errors(stage)
              + fail_errors(max_fail_percentage) + lookahead_errors(lookahead))
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


class Window:
    """The sliding window's rule (plugins/strategy/window.py hands out its slots): at most ``size``
    rollout units out of rotation at once, a unit leaving as soon as another is back.

    A unit is what leaves rotation together: a host, or the nodes of one multi-node replica
    (``units``: host -> unit, plugin_utils/_replicas.py; a host not in it is its own unit). The
    budget, the lookahead and the failure limit count units; the first node of a unit to leave
    rotation takes its slot, and the slot frees when the last is back. A unit holds its slot from the moment it
    leaves rotation (the transaction's first step) until it is back and healthy; one failed and kept
    out of rotation keeps it (``keep_out``): the budget counts it as it counts a host lost in the
    probe pass. ``lookahead`` hosts may prepare (install, patch, verify) while every slot is taken,
    so that a freed slot is taken at once without bringing the whole fleet's preparation forward.

    The rollout stops (``stop``: no host starts preparing, none leaves rotation) when more than
    ``max_failures`` hosts failed, when a canary failed, on a failed soak, or when asked to. Hosts
    already out of rotation finish or are put back; a put-back (``putback``) still takes a slot
    when one is free, whatever stopped the rollout: putting back is not new work."""

    def __init__(self, size: int, max_failures: int = 0, lookahead: Optional[int] = None,
                 canaries: Sequence[str] = (), kept_out: Sequence[str] = (),
                 units: Optional[Mapping[str, str]] = None) -> None:
        self.units = dict(units or {})
        self.size = max(int(size), 1)
        self.max_failures = max(int(max_failures), 0)
        self.lookahead = self.size if lookahead is None else max(int(lookahead), 0)
        self.canaries = {self.unit_of(h) for h in canaries}
        self.holding: Dict[str, set] = {}
        # Out of rotation before the rollout (their server not running at the probe) or left out by it.
        self.kept_out: set = {self.unit_of(h) for h in kept_out}
        self.ahead: set = set()
        self.failed: set = set()
        self.stopped: Optional[str] = None
        self.peak = 0

    def unit_of(self, host: str) -> str:
        return self.units.get(host, host)

    def in_use(self) -> int:
        return len(set(self.holding) | self.kept_out)

    def free(self) -> int:
        return self.size - self.in_use()

    def holds(self, host: str) -> bool:
        return host in self.holding.get(self.unit_of(host), ())

    def may_admit(self, host: Optional[str] = None) -> bool:
        """Whether one more host may start preparing: a stopped rollout admits (to tell it so), and so
        does a host whose unit is out of rotation already (it has its slot)."""
        if self.stopped is not None or (host is not None and self.unit_of(host) in self.kept_out):
            return True
        if host is not None and self.unit_of(host) in {self.unit_of(h) for h in self.ahead} | set(self.holding):
            return True
        return len({self.unit_of(h) for h in self.ahead}) < max(self.free(), 0) + self.lookahead

    def admit(self, host: str) -> None:
        if self.stopped is None:
            self.ahead.add(host)

    def may_take(self, host: str, putback: bool = False) -> bool:
        """Whether ``host`` may leave rotation now (take returns whether it got a slot)."""
        unit = self.unit_of(host)
        if unit in self.holding or unit in self.kept_out:
            return True
        if self.stopped is not None and not putback:
            return True
        return self.free() > 0

    def take(self, host: str, putback: bool = False) -> bool:
        self.ahead.discard(host)
        unit = self.unit_of(host)
        if unit in self.kept_out:
            self.kept_out.discard(unit)
        elif unit not in self.holding and self.stopped is not None and not putback:
            return False
        self.holding.setdefault(unit, set()).add(host)
        self.peak = max(self.peak, self.in_use())
        return True

    def skip(self, host: str) -> None:
        """``host`` passed where it would leave rotation without needing to (its take skipped: an undo,
        which keeps the slot its run took, or a change that restarts nothing): a slot it holds stays."""
        self.ahead.discard(host)

    def back(self, host: str) -> None:
        """``host`` is back in rotation and healthy (or never left it): its slot frees."""
        self.ahead.discard(host)
        unit = self.unit_of(host)
        members = self.holding.get(unit)
        if members is not None:
            members.discard(host)
            if not members:
                del self.holding[unit]

    def keep_out(self, host: str) -> None:
        """``host`` stays out of rotation (failed and kept drained, or its undrain failed)."""
        self.back(host)
        self.kept_out.add(self.unit_of(host))
        if len(self.kept_out) >= self.size:
            self.stop("%d host(s) kept out of rotation (%s) fill the window of %d: no room left for another"
                      % (len(self.kept_out), ", ".join(sorted(self.kept_out)), self.size))

    def fail(self, host: str) -> None:
        """``host`` failed: its unit counts once against the failure limit, whichever of its nodes failed."""
        self.ahead.discard(host)
        unit = self.unit_of(host)
        if unit in self.failed:
            return
        self.failed.add(unit)
        if unit in self.canaries:
            self.stop("the canary %s failed" % unit)
        elif len(self.failed) > self.max_failures:
            self.stop("%d hosts failed (%s), more than sglang_max_fail_percentage allows (%d)"
                      % (len(self.failed), ", ".join(sorted(self.failed)), self.max_failures))

    def stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
        self.ahead.clear()


def estimate(times: Sequence[float], hosts: int, size: int, canaries: int = 1) -> Optional[Dict[str, Any]]:
    """The rollout's duration from earlier runs' times out of rotation (seconds, one per host that
    had one): the canaries one after the other in their slots, then the rest ``size`` at a time,
    each taking the median time. None without a time to go on."""
    known = sorted(float(t) for t in times if t is not None and float(t) >= 0)
    if not known or hosts < 1:
        return None
    median = known[len(known) // 2] if len(known) % 2 else (known[len(known) // 2 - 1] + known[len(known) // 2]) / 2
    canaries = min(max(int(canaries), 0), hosts)
    size = max(int(size), 1)
    rounds = (-(-canaries // size) if canaries else 0) + -(-(hosts - canaries) // size)
    return {"seconds": round(rounds * median, 1), "median_s": round(median, 1), "samples": len(known),
            "rounds": rounds}
