# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side filters that reuse the role's own validation code.

The rules live once, in plugins/module_utils/_speculative.py (flags, layer ids)
and plugins/module_utils/_service.py (the unit's sandbox paths and extra
directives), where they are unit tested; preflight asserts and the unit template
call them through these filters so that a bad value is refused on the
controller, before any host is touched.
"""
from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import jinja2

from ansible.errors import AnsibleFilterError
from ansible_collections.fleetops.sglang.plugins.module_utils import _inputs
from ansible_collections.fleetops.sglang.plugins.module_utils import _inputs_values as _values
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rows
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rollout
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _replicas
from ansible_collections.fleetops.sglang.plugins.module_utils import _speculative as _rules
from ansible_collections.fleetops.sglang.plugins.module_utils import _service
from ansible_collections.fleetops.sglang.plugins.module_utils import _releases
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _hostpattern


def variable_errors(values: Any, live_prompts: int = _inputs.LIVE_PROMPTS, replicas_read: Any = False) -> list[str]:
    """Every reason the role's variables cannot work, each naming the variable, its
    value and what is accepted; the one preflight task refuses the run on any. ``replicas_read``:
    the playbook read the inventory's replicas (tasks/replicas.yml), which the role then serves."""
    return _inputs.variable_errors(dict(values or {}), live_prompts=int(live_prompts), replicas_read=bool(replicas_read))


def release_id(version: Any, lock: Any = "") -> str:
    """The identity of the release a host deploys: ``<version>-<lock sha256[:12]>-<patch set sha256[:12]>``
    (plugins/module_utils/_releases.py, the one rule the host's module and the probe use too)."""
    return _releases.release_id(str(version), str(lock or ""))


def noncompliant_hosts(hosts: Any, rows: Any) -> list[str]:
    """One line per host of ``hosts`` whose report row (same order in ``rows``) is not compliant."""
    return _rows.noncompliant(_rows.by_host(list(hosts or []), list(rows or [])))


def remediation_row(results: Any) -> dict[str, Any]:
    """The host's fleet report row from its run record (tasks/report.yml), less the record's own
    fields (_rows.RECORD_ONLY)."""
    results = {key: value for key, value in dict(results or {}).items() if key not in _rows.RECORD_ONLY}
    return _rows.remediation_row(results.pop("host"), results.pop("wanted_release"), **results)


def pending_changes(results: Any, check_mode: Any = False, audit: Any = False) -> list[str]:
    """What a check-mode run would change, by the results of the tasks that would have written it
    (tasks/service.yml's "would restart" reasons; the row names the same ones, from the same list)."""
    return _rows.pending_changes(dict(results or {}), bool(check_mode), bool(audit))


def _as_int(value: Any) -> Any:
    """-e on the command line gives strings: accept "15" as 15, leave anything else to the checks."""
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return value


def server_args(_input: Any = None, **kwargs: Any) -> list[str]:
    """The launch flags, one list item per argument, in a stable order."""
    ints = ("num_steps", "eagle_topk", "num_draft_tokens", "tp_size", "pp_size", "port", "nnodes", "node_rank")
    args = {k: _as_int(v) if k in ints else v for k, v in kwargs.items()}
    # -e sglang_mem_fraction_static=0.8 gives text; preflight has judged it a number in (0, 1).
    if args.get("mem_fraction_static") is not None:
        number = _values.as_number(args["mem_fraction_static"])
        args["mem_fraction_static"] = number if number is not None else args["mem_fraction_static"]
    return _rules.render_server_args(**args)


def flag_lines(args: list[str]) -> list[list[str]]:
    """Group argv into one flag and its values per line, for a unit a human can read."""
    lines: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    return lines


def directive_lines(value: Any, section: str) -> list[str]:
    """``Key=value`` lines of sglang_service_extra_directives for one unit section."""
    return _service.directive_lines(value, section)


def service_paths(home: str, model_paths: list[Any], environment: Any = None) -> dict[str, Any]:
    """ReadWritePaths, ReadOnlyPaths and ProtectHome for the unit's sandbox."""
    return _service.service_paths(home, model_paths, environment)


def fleet_pattern(target: Any, skip_hosts: Any = None) -> str:
    """The playbooks' host pattern: ``target`` (any pattern Ansible accepts: a comma or colon list,
    ``&``, ``!``, ranges, a YAML list) without the known-out hosts (the group sglang_maintenance and
    ``skip_hosts``, sglang_skip_hosts: a list of inventory names or a comma-separated string), which
    the rollout neither touches nor counts (plugins/plugin_utils/_hostpattern.py)."""
    try:
        names = _rows.skip_host_names(skip_hosts)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))
    return _hostpattern.fleet_pattern(target, names)


def rollout_plan(needs_work: Any, fleet_size: Any = 0, max_unavailable: Any = None, serial: Any = None,
                 canary_by: Any = None, hostvars: Any = None, groups: Any = None, unavailable: Any = None,
                 soak_seconds: Any = None, on_soak_failure: Any = None, canaries: Any = None,
                 stage: Any = None, handed_over: Any = False, forks: Any = None,
                 max_fail_percentage: Any = None, lookahead: Any = None, not_serving: Any = None,
                 mode: Any = None, replicas: Any = None) -> dict[str, Any]:
    """The rollout's host order, its serial list and the errors that refuse it
    (plugins/plugin_utils/_rollout.py), and ``handover``: each host with the groups that carry the
    plan to the next play. The canaries come from ``canary_by`` (read from ``hostvars``/``groups``,
    where tasks can see them) or, at play level where hostvars cannot be read, as the ``canaries``
    the probe pass chose (each its own value).

    With ``handed_over`` true the input is the inventory's ``groups``, and the host order, the
    canaries and the lost hosts are the plan the probe pass handed over in them.

    ``replicas`` (the replicas filter's result): its errors refuse the plan, and the plan counts
    replicas (its units), the whole fleet's among them for the budget."""
    units = dict((replicas or {}).get("units") or {}) if isinstance(replicas, dict) else {}
    errors = list((replicas or {}).get("errors") or []) if isinstance(replicas, dict) else []
    if handed_over:
        lists = _rollout.handed_over(needs_work or {})
        needs_work, canaries, unavailable = lists["order"], lists["canaries"], lists["unavailable"]
        not_serving = lists["not_serving"]
        units = lists["units"]
    needs = [str(h) for h in (needs_work or [])]
    values = None
    if canaries is None and canary_by not in (None, ""):
        values = {h: _rollout.canary_value(h, str(canary_by), hostvars or {}, groups or {}) for h in needs}
    size = fleet_size if isinstance(fleet_size, int) else len({units.get(str(h), str(h)) for h in fleet_size or []})
    doc = _rollout.plan(needs, size, max_unavailable=max_unavailable, serial=serial, canary_values=values,
                        unavailable=[str(h) for h in (unavailable or [])], soak_seconds=soak_seconds,
                        on_soak_failure=on_soak_failure,
                        canaries=None if canaries is None else [str(h) for h in canaries], stage=stage,
                        forks=forks, max_fail_percentage=max_fail_percentage, lookahead=lookahead,
                        not_serving=[str(h) for h in (not_serving or [])], mode=mode,
                        units=units if _rollout.unit_members(units) else None)
    if _rollout.unit_members(units) and on_soak_failure == "rollback" and not handed_over:
        errors.append("sglang_on_soak_failure=rollback: a failed soak rolls back the host it read, and the replicas "
                      "of this inventory (%s) would need every node rolled back together, which the soak does not do "
                      "yet; use sglang_on_soak_failure=stop (the default); rolling a replica back is not served yet "
                      "(playbooks/rollback.yml refuses its nodes)"
                      % ", ".join(sorted(_rollout.unit_members(units))))
    doc["errors"] = errors + list(doc["errors"])
    doc["handover"] = _rollout.handover(doc)
    return doc


def replicas(run_hosts: Any, hostvars: Any = None, fleet: Any = None) -> dict[str, Any]:
    """The inventory's multi-node replicas (plugins/plugin_utils/_replicas.py): ``nodes`` (each node's replica,
    rank, node count, rendezvous address, nodes and leader: what the role renders and gates it with),
    ``units`` (host -> replica) and ``errors`` (a replica this run cannot roll out: each names the variable,
    the hosts, the value and the fix). ``fleet``: the inventory's hosts (groups['all']); ``run_hosts`` the
    run's (a limit or a job slice holding part of a replica is refused)."""
    run = [str(h) for h in (run_hosts or [])]
    return _replicas.replicas([str(h) for h in (fleet if fleet is not None else run)], _Resolved(hostvars or {}),
                              run=run)


def _unresolved(value: Any) -> bool:
    """Whether ``value`` holds what its templating could not resolve (Ansible's markers are jinja2 Undefined)."""
    if isinstance(value, jinja2.Undefined):
        return True
    if isinstance(value, dict):
        return any(_unresolved(k) or _unresolved(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_unresolved(v) for v in value)
    return False


class _Resolved(Mapping):
    """hostvars as the replicas' rules read them: each value templated, or, where it needs what only the role
    defines (sglang_server_command's "{{ sglang_venv }}"), as the inventory wrote it."""

    def __init__(self, hostvars: Any) -> None:
        self._hostvars = hostvars
        # One lookup of a host's variables per filter call (each is a pass over every source of the host's vars).
        self._hosts: dict[str, Mapping] = {}

    def __getitem__(self, host: str) -> Mapping:
        if host not in self._hosts:
            self._hosts[host] = _ResolvedHost(self._hostvars, host, self._hostvars[host])
        return self._hosts[host]

    def __iter__(self):
        return iter(self._hostvars)

    def __len__(self) -> int:
        return len(self._hostvars)


class _ResolvedHost(Mapping):
    def __init__(self, hostvars: Any, host: str, variables: Any) -> None:
        self._hostvars, self._host, self._vars = hostvars, host, variables

    def __getitem__(self, name: str) -> Any:
        value = self._vars[name]
        if _unresolved(value):
            raw_get = getattr(self._hostvars, "raw_get", None)
            raw = raw_get(self._host) if callable(raw_get) else {}
            return raw.get(name) if isinstance(raw, Mapping) else None
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._vars

    def __iter__(self):
        return iter(self._vars)

    def __len__(self) -> int:
        return len(self._vars)


def lease_break_errors(hosts: Any, limit: Any = None, target: Any = None, confirmed: Any = 1) -> list[str]:
    """Why playbooks/lease_break.yml refuses to break the leases of ``hosts`` (plugins/plugin_utils/_rollout.py)."""
    return _rollout.lease_break_errors(_hostpattern.terms(limit), limit, _hostpattern.terms(target), target,
                                       [str(h) for h in (hosts or [])], confirmed)


def soak_verdict(result: Any) -> str:
    """One host's soak read: "passed" or "failed: <why>" (tasks/soak.yml)."""
    return _rollout.soak_verdict(dict(result or {}))


def failure_message(result: Any, task: Any = None) -> str:
    """Why a task failed, as a rescue may keep it for the run record and the report: its result's ``msg``,
    trimmed; never the message of a task that handles secrets (``no_log``), whose raw result a rescue still
    sees (Ansible hides it from the output, not from ``ansible_failed_result``)."""
    task = task if isinstance(task, dict) else {}
    if task.get("no_log") in (True, "true", "True", "yes"):
        return "its message is not shown: the task handles secrets (no_log)"
    result = result if isinstance(result, dict) else {}
    return str(result.get("msg") or "failed").strip()


def report_merge(parts: Any, expect_hosts: Any = None, rollout_id: Any = None) -> dict[str, Any]:
    """The fleet reports of one rollout's jobs as one (plugin_utils/_report.py's merge_reports, the callback's model):
    ``report`` (the fleet.json document), ``markdown`` (fleet.md), ``attention`` (the hosts that need it) and
    ``errors`` (a refused merge).

    Each part is a path or a glob of fleet.json files on the controller (expanded and read here), a pair
    [path, fleet.json text], or {path, report} with the parsed document."""
    from ansible_collections.fleetops.sglang.plugins.plugin_utils import _report as sglang_report

    pairs, errors = [], []
    for part in list(parts or []):
        if isinstance(part, str):
            found = sorted(glob.glob(os.path.expanduser(part)))
            if not found:
                errors.append("no file matches %s: give the fleet.json of each job of the rollout (a path or a glob)"
                              % part)
            for path in found:
                try:
                    with open(path, encoding="utf-8") as fh:
                        pairs.append((path, fh.read()))
                except OSError as exc:
                    errors.append("%s cannot be read: %s" % (path, exc))
            continue
        if isinstance(part, dict) and "path" in part:
            pairs.append((str(part["path"]), part.get("report")))
        elif isinstance(part, (list, tuple)) and len(part) == 2:
            pairs.append((str(part[0]), part[1]))
        else:
            raise AnsibleFilterError("report_merge takes paths or globs, [path, fleet.json text] pairs or "
                                     "{path, report}; got %r" % (part,))
    seen, docs = set(), []
    for path, report in pairs:
        if path in seen:
            continue  # two globs that match one file: the file once
        seen.add(path)
        if isinstance(report, str):
            try:
                report = json.loads(report)
            except ValueError as exc:
                errors.append("%s is not JSON (%s): not a fleet.json of fleetops.sglang.sglang_report" % (path, exc))
                continue
        docs.append((path, report))
    if errors:
        return {"report": {}, "errors": errors, "attention": [], "markdown": ""}
    doc, errors = sglang_report.merge_reports(docs, [str(h) for h in (expect_hosts or [])], rollout_id=rollout_id)
    attention = [r["host"] for r in doc.get("hosts", []) if r["status"] in sglang_report.ATTENTION] if doc else []
    return {"report": sglang_report.plain(doc) if doc else {}, "errors": errors, "attention": attention,
            "markdown": sglang_report.render_markdown(doc) if doc else ""}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "variable_errors": variable_errors,
            "fleet_pattern": fleet_pattern,
            "rollout_plan": rollout_plan,
            "replicas": replicas,
            "report_merge": report_merge,
            "soak_verdict": soak_verdict,
            "failure_message": failure_message,
            "lease_break_errors": lease_break_errors,
            "noncompliant_hosts": noncompliant_hosts,
            "remediation_row": remediation_row,
            "pending_changes": pending_changes,
            "server_args": server_args,
            "flag_lines": flag_lines,
            "service_directive_lines": directive_lines,
            "service_paths": service_paths,
            "release_id": release_id,
        }
