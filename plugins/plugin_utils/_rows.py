# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's rows: built here, once, and read as data (plain dicts).

Each host's row is the ``sglang_remediation`` fact. It is built by
:func:`remediation_row` from the structured results of the run (the engine's,
the draft config's, the unit and environment templates', the fingerprint's, the
gate's), both for a host that ends at its probe (the probe's action plugin,
:func:`probe_row`) and at the end of the role (tasks/report.yml, through the
``remediation_row`` filter). Its flags are bools and its numbers floats or None
from here on, its drift findings ({code, text}, _reasons): the callback, the textfile
and audit.yml read them as they are.
Standard library only.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import (
    PROBE_ONLY, finding, release_not_pinned, texts,
)
# A row's mode is the run's, in the one vocabulary of _runmode.
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import run_mode

# The file the engine patches, as the change set's lines name it (by its path's end).
DEEPSEEK_NAME = "deepseek_v2.py"


# The run record's fields that are not the row's (tasks/report.yml assembles the record, fact
# _sglang_run): whether the host is out of rotation now (the batch end counts it) and what the
# rollout's soak re-reads (tasks/soak.yml).
RECORD_ONLY = ("drained", "soak")


def _result(value: Any) -> Mapping[str, Any]:
    """A registered result as a mapping ({} when the task did not run, was skipped or registered nothing)."""
    return value if isinstance(value, Mapping) and not value.get("skipped") else {}


def seconds_between(start: Any, end: Any) -> Optional[float]:
    """Seconds from ``start`` to ``end`` (ISO 8601 timestamps), to 0.1; None when either is missing."""
    try:
        return round((datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds(), 1)
    except (TypeError, ValueError):
        return None


def _number(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def server_args_warnings(parse: Any) -> List[str]:
    """What SGLang itself logged while resolving the rendered flags (sglang_server_flags' resolution,
    also when it refused them: the failed task's result carries it too)."""
    return [str(w) for w in _result(_result(parse).get("resolution")).get("warnings") or []]


# What a check-mode run would change, each by the result that says so: the one list of these
# restart reasons (the row's, and tasks/service.yml's through the pending_changes filter).
PENDING_CHANGES = (
    ("fix", "SGLang source would change"),
    ("draft", "draft config would change"),
    ("unit", "unit would change"),
    ("environment", "environment would change"),
    ("api_keys", "API key file would change"),
)


def pending_changes(results: Any, check_mode: bool, audit: bool = False) -> List[str]:
    """What a check-mode run would change, in PENDING_CHANGES order.

    Nothing was written in check mode, so the fingerprint still matches the disk: the
    results of the tasks that would have written (``results``, by PENDING_CHANGES's
    names; one that did not run is missing or None) say what a restart would follow.
    A real run has written them already, and an audit reports them as drift instead.
    """
    if not check_mode or audit:
        return []
    results = _result(results)
    return [text for name, text in PENDING_CHANGES if _result(results.get(name)).get("changed")]


def remediation_row(
    host: str,
    wanted_release: str,
    *,
    fix: Any = None,
    draft: Any = None,
    unit: Any = None,
    environment: Any = None,
    api_keys: Any = None,
    fingerprint: Any = None,
    gate: Any = None,
    live_metrics: Any = None,
    probe_live: Any = None,
    probe_reasons: Any = None,
    parse: Any = None,
    speculative_flags: Optional[Mapping[str, Any]] = None,
    restarted: bool = False,
    closed: Any = None,
    undo: Any = None,
    error: str = "",
    failed_task: str = "",
    audit: bool = False,
    check_mode: bool = False,
    rollback_run: bool = False,
    service_manage: bool = True,
    textfile: Any = None,
    out_at: Any = None,
    back_at: Any = None,
    replica: Any = None,
) -> Dict[str, Any]:
    """A host's fleet report row from the run's structured results.

    ``fix``: sglang_eagle3's result (or the probe's, for a host that ends there);
    ``draft``, ``unit``, ``environment``, ``api_keys``: sglang_draft_config's and the
    template tasks' results (the unit, the environment, the --config file of the keys); ``fingerprint``: sglang_fingerprint's compare; ``gate``: sglang_gate's
    result after a restart this run; ``live_metrics``: the gate's accept length and
    throughput; ``probe_live``: the probe's reading of the server that ran before
    this run; ``probe_reasons``: the probe's findings, whose staged-release ones (the link, the seal,
    drift of the closure) and audit timer's an audit or check-mode row carries, no later task re-reading them;
    ``parse``: sglang_server_flags' result (its resolution). A task that did not run passes
    None (or its skipped result). ``restarted``: the one "restart needed" fact the
    restart transaction acted on. ``out_at``, ``back_at``: when the host left rotation and came
    back (ISO 8601, the controller's clock; None: it did not leave, or is still out).
    """
    fix, draft, unit, environment = _result(fix), _result(draft), _result(unit), _result(environment)
    api_keys = _result(api_keys)
    fingerprint, gate, live_metrics = _result(fingerprint), _result(gate), _result(live_metrics)
    closed, undo = _result(closed), _result(undo)
    restarted, dry = bool(restarted), bool(audit) or bool(check_mode)
    restored = list(undo.get("restored") or [])
    # A putting-back that stopped part-way (its module failed): what it put back is listed, but
    # the host is not rolled back, and nothing was restarted on it.
    undo_complete = bool(restored) and not undo.get("failed")
    # A restart on what a failed run put back (tasks/transaction.yml, action undo), or the rollback playbook's own.
    undo_restarted = bool(restarted and undo_complete and _result(undo.get("service")).get("active"))

    # In check mode nothing was written, so the fingerprint still matches: name what would change.
    pending = pending_changes(dict(fix=fix, draft=draft, unit=unit, environment=environment, api_keys=api_keys),
                              check_mode, audit) if service_manage else []

    # The freshest live reading: the gate's after a restart this run, else the probe's
    # (taken before this run changed anything, of the server that still runs).
    if "reading" in gate:
        live = gate["reading"]
    else:
        live = None if restarted else probe_live

    # What is not yet as it should be (after this run; in check/audit mode, now): findings
    # (_reasons), whose codes the textfile's failure classes are read from.
    drift: List[Dict[str, str]] = []
    if fix.get("release", "") != wanted_release:
        drift.append(release_not_pinned(fix.get("release", "?"), wanted_release))
    if not fix.get("compliant", False):
        drift.append(finding("source.unpatched", "SGLang source not remediated"))
    if "compliant" in draft and not draft["compliant"] and dry:
        drift.append(finding("draft.ids_differ", "draft config layer ids"))
    if dry and unit.get("changed"):
        drift.append(finding("unit.differs", "unit file"))
    if dry and environment.get("changed"):
        drift.append(finding("environment.differs", "service environment"))
    if dry and api_keys.get("changed"):
        drift.append(finding("api_keys.differs", "api_keys file (sglang_api_key, sglang_admin_api_key)"))
    if fingerprint.get("restart_needed") and not restarted:
        drift.append(finding("server.differs", "running server differs from the files"))
    drift += list(_result(live).get("reasons") or [])
    if dry:
        drift += [r for r in (probe_reasons or []) if _result(r).get("code") in PROBE_ONLY]
    if rollback_run:
        # The rollback is held to nothing but what it put back: its own error is the finding.
        drift = []

    if gate:
        health = "ok" if gate.get("status", 0) == 200 else "failed"
    else:
        health = "not checked"
    forward = fix.get("forward")
    companion = fix.get("companion")
    if rollback_run:
        release, decision = undo.get("release") or "", "rollback" if undo.get("id") else "nothing to roll back"
    else:
        release = fix.get("release", wanted_release)
        decision = fix.get("decision", "pending-install" if check_mode else "unknown")
    row = {
        "host": host,
        "release": release,
        "decision": decision,
        "family": fix.get("family") or "",
        "compliant": not drift and not error,
        "file_state_before": fix.get("file_state_before") or "",
        "sha256_before": fix.get("sha256_before") or "",
        "sha256_after": fix.get("sha256_after") or "",
        "evidence": [e.get("line") for e in fix.get("evidence") or [] if isinstance(e, Mapping)],
        # The forward-capture check's line: "forward: embedding, L2, L30 (executed)" or why it did not run.
        "forward": (forward.get("summary") or "") if isinstance(forward, Mapping) else "",
        "companion": (companion.get("template") or "") if isinstance(companion, Mapping) else "",
        "draft_layer_ids": list(draft.get("layer_ids_after", fix.get("draft_layer_ids")) or []),
        "speculative_flags": dict(speculative_flags or {}),
        "restart_needed": bool(fingerprint.get("restart_needed")) or bool(pending),
        "restart_reasons": list(fingerprint.get("reasons") or []) + pending,
        "restarted": restarted,
        # A running server recorded as it runs, not restarted (_adopt; the probe's rows only).
        "adopted": False,
        # Restarts of the service this run made: the remediation's, and one on files put back.
        "restarts": (1 if restarted else 0) + (1 if undo_restarted and not rollback_run else 0),
        "rolled_back": undo_complete,
        "rollback": restored,
        "left": list(undo.get("left") or []),
        "changes": list(closed.get("changes") or []),
        "health": health,
        "accept_length": _number(live_metrics.get("accept_length")),
        # From the drain (or the stop or restart, without a drain hook) to the undrain (or healthy);
        # None when the host did not leave rotation or is still out.
        "out_of_rotation_s": seconds_between(out_at, back_at),
        # The moments themselves (what the rollout's budget is held to at every moment: the fleet
        # scenario's check_rollout.py); back none while the host is still out.
        "left_rotation_at": str(out_at) if out_at else None,
        "back_in_rotation_at": str(back_at) if out_at and back_at else None,
        # From the restarted server's start to its first healthy answer: a real host's model load.
        "restart_to_healthy_s": _number(gate.get("healthy_after")),
        "tokens_per_s": _number(live_metrics.get("tokens_per_s")),
        "check_mode": bool(check_mode),
        "mode": run_mode(audit, rollback_run),
        "drift": drift,
        "server_args_warnings": server_args_warnings(parse),
        "live": live,
        # The multi-node replica this host is a node of (plugin_utils/_replicas.py); None for a host of one node.
        "replica": str(replica) if replica else None,
        "error": error or "",
        "failed_task": failed_task or "",
    }
    if restored and not rollback_run:
        # What is in place now is what the undo put back, not what the engine wrote.
        put_back = [f["sha256"] for f in undo.get("restored_files") or []
                    if f.get("sha256") and f["path"].endswith("/" + DEEPSEEK_NAME)]
        if put_back:
            row["sha256_after"] = put_back[-1]
    if textfile is not None:
        row["textfile"] = textfile
    return row


def probe_row(host: str, wanted_release: str, probe: Mapping[str, Any], speculative_flags: Mapping[str, Any],
              audit: bool = False, check_mode: bool = False, replica: Any = None) -> Dict[str, Any]:
    """The row of a host that ends at its probe (the probe's action plugin sets it).

    Its files are as they should be (the run ends here): the probe's engine result
    stands for the remediation's, and what the running server shows (the live
    reading's reasons) decides whether it is compliant.
    """
    fix = dict(_result(probe.get("eagle3")), release=probe.get("release"), decision=probe.get("decision"),
               draft_layer_ids=probe.get("draft_layer_ids"), compliant=True)
    row = remediation_row(host, wanted_release, fix=fix, probe_live=probe.get("live"),
                          speculative_flags=speculative_flags, audit=audit, check_mode=check_mode,
                          textfile=probe.get("textfile"), replica=replica)
    row["adopted"] = bool(_result(probe.get("adoption")).get("adopted"))
    return row


def noncompliant(rows: Mapping[str, Optional[Mapping[str, Any]]]) -> List[str]:
    """One line per host whose row is not compliant (or that has no row): what drifted and the error.

    ``rows`` maps each host of the play, in play order, to its row (None or {} when
    the host never set one). playbooks/audit.yml fails the run on any line.
    """
    out: List[str] = []
    for host, row in rows.items():
        row = row or {}
        if row.get("compliant") is True:
            continue
        drift = "; ".join(texts(row.get("drift") or []))
        out.append("%s is not compliant: %s %s" % (host, drift, row.get("error") or ""))
    return out


def by_host(hosts: List[str], rows: List[Optional[Mapping[str, Any]]]) -> Dict[str, Any]:
    """Hosts and their rows zipped, in play order (the filter's two inputs)."""
    return dict(zip(hosts, rows))


# Hosts known to be out: this inventory group, and the playbooks' sglang_skip_hosts.
MAINTENANCE_GROUP = "sglang_maintenance"
_HOST_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+$")


def skip_host_names(value: Any) -> List[str]:
    """sglang_skip_hosts as host names: a list of them, or one comma-separated string; ValueError else."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [h.strip() for h in value.split(",") if h.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(h, str) and _HOST_NAME.match(h) for h in value):
        raise ValueError("sglang_skip_hosts=%r is not a list of inventory host names; accepted: a list (or a "
                         "comma-separated string) of host names, e.g. [\"gpu-17\"]" % (value,))
    return list(value)
