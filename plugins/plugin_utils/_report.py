# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's model, controller-side: a host's row and how it moves through the statuses,
the run's counts and result, fleet.md, and the merge of one rollout's reports (the report_merge
filter). The callback (plugins/callback/sglang_report.py) feeds it Ansible's events and writes
the files; the row of one host's run is plugin_utils/_rows.py's (the probe's action and the role's
end build it there)."""
from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import is_live, texts
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import AUDIT
from ansible_collections.fleetops.sglang.plugins.plugin_utils._rollout import STAGE_ALL, STAGES

FACT = "sglang_remediation"
SOAK_FACT = "sglang_soak"
# Statuses a row moves through; the first four are outcomes that need a reader's attention.
ATTENTION = ("failed", "unreachable", "aborted", "not reached")
# A host known to be out (group sglang_maintenance, or -e sglang_skip_hosts): the playbooks' host
# patterns leave it out, it counts against no limit, and its row says so.
SKIPPED = "skipped (maintenance)"
# A host that needs work, left by a canary stage's run (sglang_rollout_stage=canaries) for the job after
# it: the playbook hands them to a group (_rollout.NEXT_STAGE_GROUP, tasks/rollout_plan.yml).
NEXT_STAGE = "next stage"
STATUS_ORDER = ATTENTION + ("running", "noncompliant", "would change", "changed", "adopted", "would adopt", "ok",
                            NEXT_STAGE, SKIPPED)


def plain(value: Any) -> Any:
    """Strip Ansible's tagged/lazy container and string types so json and repr stay plain."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def as_bool(value: Any) -> bool:
    """A play variable as Ansible's bool filter reads it (V(yes), V("true") and V(true) alike)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def unreachable_reason(result: Mapping) -> Optional[str]:
    """The error of a task that failed because the host could not be reached, else None.

    Over SSH Ansible itself reports such a host unreachable. The docker connection
    does not: a stopped container fails the task with "Module result
    deserialization failed" and the daemon's "is not running" on stderr. The
    operator needs to read that the host is down, not that a module broke.
    """
    stderr = str(result.get("module_stderr") or "")
    if "Error response from daemon" in stderr and ("is not running" in stderr or "No such container" in stderr):
        return "unreachable: the container is not running (docker: %s)" % stderr.strip().splitlines()[0]
    return None


def new_row(host: str) -> Dict[str, Any]:
    return {
        "host": host, "status": "not reached", "batch": None, "release": "", "decision": "",
        "action": "", "family": "", "compliant": None, "file_state_before": "", "sha256_before": "",
        "sha256_after": "", "evidence": [], "forward": "", "companion": "", "draft_layer_ids": [],
        "speculative_flags": {}, "drift": [], "server_args_warnings": [], "restart_needed": None, "restarted": False,
        "restart_reasons": [], "adopted": False, "rolled_back": False, "rollback": [], "health": "", "accept_length": None,
        "tokens_per_s": None, "out_of_rotation_s": None, "left_rotation_at": None,
        "back_in_rotation_at": None, "restart_to_healthy_s": None, "live_accept_length": None, "live_source": "", "live_settings": {},
        "live_notes": [], "left": [], "changes": [], "restarts": 0, "soak": "", "error": "", "failed_task": "",
        "stats": {}, "replica": None,
    }


def live_columns(live: Any) -> Dict[str, Any]:
    """The row's live fields from the role's reading (_live.judge); empty when not read."""
    if not isinstance(live, Mapping) or not live.get("read"):
        note = "not read" if live is None else "server info unavailable"
        return {"live_accept_length": None, "live_source": note, "live_settings": {}, "live_notes": []}
    return {
        "live_accept_length": live.get("accept_length"),
        "live_source": live.get("accept_length_source") or "not reported by this release",
        "live_settings": dict(live.get("settings") or {}),
        "live_notes": list(live.get("notes") or []),
    }


def action_of(row: Dict[str, Any], check_mode: bool) -> str:
    """What the run did (or, in check/audit mode, would do) to the SGLang source."""
    decision = row.get("decision") or ""
    would = check_mode or row.get("mode") == AUDIT
    if row.get("rolled_back"):
        # After a failed gate what is in place is what the rollback put back, not the patch.
        return "rolled back: " + ("; ".join(row.get("rollback") or []) or "nothing this run had changed")
    if decision == "patch":
        if row.get("sha256_before") and row.get("sha256_before") != row.get("sha256_after"):
            return "would patch" if would else "patched"
        if row.get("file_state_before") == "pristine" and row.get("mode") == AUDIT:
            return "would patch"
        return "nothing (already patched)"
    if decision == "native":
        return "native ids %s" % (row.get("draft_layer_ids") or [])
    if decision == "refuse":
        return "refuse"
    if decision == "restore":
        return "restore pristine"
    return decision or ""


# How many host names a status line of the summary shows before "and N more".
SUMMARY_HOSTS = 8
SUMMARY_BAR = 20


def status_summary(rows: List[Dict[str, Any]], running: bool) -> List[str]:
    """One line per status, in the table's order: its count, its share of the fleet as a bar, its first hosts."""
    if not rows:
        return []
    lines = ["## By status", ""]
    statuses = sorted({r["status"] for r in rows},
                      key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else len(STATUS_ORDER))
    for status in statuses:
        hosts = [r["host"] for r in rows if r["status"] == status]
        filled = max(1, round(SUMMARY_BAR * len(hosts) / len(rows)))
        shown = ", ".join(hosts[:SUMMARY_HOSTS])
        if len(hosts) > SUMMARY_HOSTS:
            shown += " and %d more" % (len(hosts) - SUMMARY_HOSTS)
        name = "pending" if running and status == "not reached" else status
        lines.append("- `%s` **%s** %d of %d: %s" % (
            "#" * filled + "." * (SUMMARY_BAR - filled), name, len(hosts), len(rows), shown))
    lines.append("")
    return lines


def counts(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, int]]:
    """The report's counts: hosts per status (in the table's order) and per decision."""
    by_status: Dict[str, int] = {}
    for status in STATUS_ORDER:
        n = sum(1 for r in rows if r["status"] == status)
        if n:
            by_status[status] = n
    by_decision: Dict[str, int] = {}
    for r in rows:
        key = r.get("decision") or ("(%s)" % r["status"])
        by_decision[key] = by_decision.get(key, 0) + 1
    return {"status": by_status, "decision": by_decision}


def run_result(statuses: Any) -> str:
    """The run's result from its rows' statuses: the worst outcome first."""
    statuses = set(statuses)
    if statuses & {"not reached", "aborted"}:
        return "aborted"
    if statuses & set(ATTENTION):
        return "failed"
    if "noncompliant" in statuses:
        return "noncompliant"
    if "would change" in statuses:
        return "would change"
    return "complete"


def soak_lines(soaks: List[Mapping[str, Any]]) -> List[str]:
    """The report's soak lines: one per rollout step soaked (batches), and one for all the hosts that soaked
    after their own gate (the window's soak, one entry per host in run.soaks)."""
    steps = [s for s in soaks if s.get("after") != "its gate"]
    own = [s for s in soaks if s.get("after") == "its gate"]
    if own:
        hosts = {h: v for s in own for h, v in s["hosts"].items()}
        steps.append({"after": "each host's gate", "seconds": "/".join(sorted({str(s["seconds"]) for s in own})),
                      "hosts": hosts, "passed": all(s["passed"] for s in own),
                      "action": ", ".join(sorted({s["action"] for s in own if not s["passed"] and s["action"]}))})
    lines = []
    for soak in steps:
        failed = sorted(h for h, v in soak["hosts"].items() if v != "passed")
        lines.append("- soak after %s (%s s, %d hosts re-read): %s%s" % (
            soak.get("after") or "batch %s" % soak["batch"], soak["seconds"], len(soak["hosts"]),
            "passed" if soak["passed"] else "FAILED",
            ", %s" % soak["action"] if soak["action"] and soak["action"] != "passed" else "")
            + (" (failed: %s)" % ", ".join(failed) if failed else ""))
    return lines


def replica_lines(rows: List[Mapping[str, Any]]) -> List[str]:
    """One line per multi-node replica among the rows: its nodes and its verdict, the worst of its nodes'
    statuses (a replica is compliant only when every node is)."""
    nodes: Dict[str, List[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("replica"):
            nodes.setdefault(str(row["replica"]), []).append(row)
    lines = []
    for name, members in nodes.items():
        worst = min((r["status"] for r in members),
                    key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else len(STATUS_ORDER))
        bad = [r["host"] for r in members if r["status"] == worst] if worst in ATTENTION or worst == "noncompliant" else []
        shown = " (%s)" % ", ".join(bad) if bad else ""
        lines.append("- replica %s (%s): **%s**%s" % (name, ", ".join(r["host"] for r in members), worst, shown))
    return lines


def render_markdown(doc: Dict[str, Any]) -> str:
    """The human report: run line, counts, failures first, then one row per host."""
    run = doc["run"]
    rows: List[Dict[str, Any]] = doc["hosts"]
    lines = ["# SGLang fleet report: %s" % run["playbook"], ""]
    lines.append("- result: **%s**%s" % (run["result"], " (check mode: nothing was changed)" if run["check_mode"] else ""))
    lines.append("- mode: %s; started %s; updated %s; batches run: %s" % (
        run["mode"], run["started"], run["updated"], run["batches"]))
    counts = doc["counts"]
    lines.append("- hosts: %d; by status: %s" % (len(rows), ", ".join(
        "%s %d" % (k, v) for k, v in counts["status"].items()) or "none"))
    lines.append("- by decision: %s" % (", ".join("%s %d" % (k, v) for k, v in counts["decision"].items()) or "none"))
    window = run.get("window")
    if window:
        lines.append("- window: %s slot(s) out of rotation (budget %s, forks %s)%s; peak out of rotation %s; %s" % (
            window["size"], window["budget"], window["forks"],
            ", %d held from the start by hosts not serving" % len(window["not_serving"])
            if window.get("not_serving") else "", window["peak_out_of_rotation"],
            "stopped: %s" % window["stopped"] if window["stopped"] else "not stopped"))
    lines += soak_lines(run.get("soaks") or [])
    lines += replica_lines(rows)
    for part in run.get("parts") or []:
        lines.append("- part %s: %s, job %s, run %s, stage %s, %d hosts: **%s**%s" % (
            part["part"], part["path"], part.get("job_id") or "-", part["run_id"], part["stage"], part["hosts"],
            part["result"], " (needs attention: %s)" % ", ".join(part["attention"]) if part["attention"] else ""))
    lines.append("")
    running = run["result"] == "running"
    lines += status_summary(rows, running)
    # While the run goes on, hosts no batch has reached yet are pending, not a finding.
    attention = [r for r in rows if (r["status"] in ATTENTION or r.get("error") or r["status"] == "noncompliant")
                 and not (running and r["status"] == "not reached")]
    if attention:
        lines += ["## Needs attention", ""]
        for r in attention:
            lines.append("- **%s** (%s%s): %s" % (
                r["host"], r["status"], ", batch %s" % r["batch"] if r["batch"] else "",
                r.get("error") or ("; ".join(texts(r.get("drift") or [])) if r["status"] == "noncompliant"
                                   else "no batch reached it" if r["status"] == "not reached"
                                   else "stopped before it finished")))
        lines.append("")
    lines += ["## Hosts", "",
              "| host | batch | status | release | decision / action | evidence lines | forward capture"
              " | deepseek_v2.py sha256 before -> after"
              " | draft ids | steps/topk/draft | restart | health | accept len | tok/s | live accept len (source)"
              " | running steps/topk/draft | error |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def short(h: str) -> str:
        return h[:12] if h else "-"

    def cell(value: Any) -> str:
        text = "-" if value in (None, "", []) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    ordered = sorted(rows, key=lambda r: (STATUS_ORDER.index(r["status"]) if r["status"] in STATUS_ORDER else 99,
                                          rows.index(r)))
    for r in ordered:
        flags = r.get("speculative_flags") or {}
        flag_text = "%s/%s/%s" % (flags.get("num_steps", "?"), flags.get("eagle_topk", "?"),
                                  flags.get("num_draft_tokens", "?")) if flags else "-"
        if r.get("restarted"):
            restart = "restarted: " + "; ".join(r.get("restart_reasons") or [])
        elif r.get("restart_needed"):
            restart = "would restart: " + "; ".join(r.get("restart_reasons") or [])
        elif r.get("restart_needed") is None:
            restart = "-"
        else:
            restart = "no (what runs is what should run)"
        if r.get("rolled_back"):
            restart += "; rolled back"
        decision = r.get("decision") or "-"
        if r.get("action") and r.get("action") != decision:
            decision = "%s / %s" % (decision, r["action"])
        status = "pending" if running and r["status"] == "not reached" else r["status"]
        live = "%s (%s)" % (r["live_accept_length"] if r.get("live_accept_length") is not None else "-",
                            r.get("live_source") or "not read")
        running_flags = r.get("live_settings") or {}
        running_text = "%s/%s/%s" % tuple(
            "?" if running_flags.get(k) is None else running_flags.get(k)
            for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")) \
            if running_flags else "-"
        # The live findings (by their code) stand in the error column of a host that did not fail.
        error = r.get("error") or "; ".join(texts(d for d in r.get("drift") or [] if is_live(d)))
        # A merged report's batches are each job's own: "<part>.<batch>".
        batch = r["batch"] if "part" not in r else "%s.%s" % (r["part"], r["batch"] or "-")
        lines.append("| %s |" % " | ".join(cell(v) for v in (
            r["host"], batch, status, r["release"], decision,
            ", ".join(str(e) for e in r.get("evidence") or []), r.get("forward"),
            "%s -> %s" % (short(r.get("sha256_before", "")), short(r.get("sha256_after", ""))),
            r.get("draft_layer_ids"), flag_text, restart, r.get("health"), r.get("accept_length"),
            r.get("tokens_per_s"), live, running_text, error)))
    lines.append("")
    return "\n".join(lines)


# A row that did nothing to its host: in a merge, an earlier stage's row that did something wins over it.
IDLE = ("ok", NEXT_STAGE, "not reached", SKIPPED)


def merge_reports(parts: List[Tuple[str, Any]], expect_hosts: Any = None,
                  rollout_id: Any = None) -> Tuple[Dict[str, Any], List[str]]:
    """One fleet report from the reports of one rollout's jobs (a canary job, the slices of a sliced job):
    (document, errors). Refused (errors, each naming the file) when a part is no fleet report, when the parts
    are of different rollouts, modes or check modes, or when a host is in two jobs of the same stage. A host
    in the canary stage and in a later one keeps the later row, unless that row did nothing and the earlier
    did. A host of ``expect_hosts`` in no part is ``not reached``; a part's hosts keep their own status.
    Given ``rollout_id``, the reports of other rollouts are left out (a glob over a shared report directory
    matches every run's), and it is an error that none is of that rollout."""
    errors: List[str] = []
    docs = []
    for path, doc in parts:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("run"), Mapping) or not isinstance(
                doc.get("hosts"), list):
            errors.append("%s is not a fleet report of fleetops.sglang.sglang_report (no run and hosts)" % path)
        else:
            docs.append((path, doc))
    if not parts:
        errors.append("no report to merge; give sglang_report_merge_sources: the fleet.json of each job")
    if errors:
        return {}, errors
    if rollout_id not in (None, ""):
        docs = [(path, doc) for path, doc in docs if str(doc["run"].get("rollout_id")) == str(rollout_id)]
        if not docs:
            return {}, ["none of the %d reports is of the rollout sglang_rollout_id=%s (%s); give the reports of "
                        "that rollout's jobs, or leave sglang_rollout_id unset to merge the reports given"
                        % (len(parts), rollout_id, ", ".join(part[0] for part in parts))]

    def differ(key: str, what: str, fix: str) -> None:
        values = {}
        for path, doc in docs:
            values.setdefault(str(doc["run"].get(key)), []).append(path)
        if len(values) > 1:
            errors.append("the reports are of different %s (%s); %s" % (
                what, "; ".join("%s=%s: %s" % (key, v, ", ".join(p)) for v, p in sorted(values.items())), fix))
    differ("rollout_id", "rollouts", "merge only the jobs of one rollout (the slices of one sliced job share "
           "AWX's awx_workflow_job_id; else give each job the same -e sglang_rollout_id)")
    if not errors and all(doc["run"].get("rollout_id") in (None, "") for doc in dict(docs).values()) and len(docs) > 1:
        errors.append("no report names its rollout (%s), so nothing shows they are one run; run the jobs with the "
                      "same -e sglang_rollout_id (AWX's sliced jobs share awx_workflow_job_id)"
                      % ", ".join(dict(docs)))
    differ("mode", "modes", "merge an audit's reports with an audit's, a remediation's with a remediation's")
    differ("check_mode", "check modes", "merge a --check run's reports only with --check runs'")
    rank = {s: i for i, s in enumerate(STAGES)}
    seen: Dict[str, Tuple[str, str]] = {}
    for path, doc in docs:
        stage = str(doc["run"].get("stage") or STAGE_ALL)
        for row in doc["hosts"]:
            host = str(row.get("host"))
            if host in seen and seen[host][1] == stage:
                errors.append("%s is in two jobs of the stage %s: %s and %s; each host belongs to one slice (AWX "
                              "slices the inventory by host name: hosts[n-1::count]), so these are not slices of "
                              "one job" % (host, stage, seen[host][0], path))
            seen.setdefault(host, (path, stage))
    if errors:
        return {}, errors

    rows: Dict[str, Dict[str, Any]] = {}
    runs = []
    # The canary stage first, then the jobs after it; in the order given within a stage (a stable sort).
    ordered = sorted(docs, key=lambda part: rank.get(str(part[1]["run"].get("stage") or STAGE_ALL), 0))
    for number, (path, doc) in enumerate(ordered, 1):
        run = doc["run"]
        cut_short = run.get("result") in ("running", "interrupted")
        for row in doc["hosts"]:
            row = dict(row)
            row["part"] = number
            if cut_short and row.get("status") == "running":
                row["status"] = "aborted"
                row["error"] = row.get("error") or "its job ended before this host finished (result %s)" % run["result"]
            earlier = rows.get(row["host"])
            if earlier is not None and row["status"] in IDLE and earlier["status"] not in IDLE:
                continue
            rows[row["host"]] = row
        attention = [r["host"] for r in doc["hosts"] if r.get("status") in ATTENTION]
        runs.append({"part": number, "path": path, "run_id": run.get("id"), "job_id": run.get("job_id"),
                     "stage": str(run.get("stage") or STAGE_ALL), "result": run.get("result"),
                     "started": run.get("started"), "updated": run.get("updated"), "hosts": len(doc["hosts"]),
                     "attention": attention})
    for host in expect_hosts or []:
        if str(host) not in rows:
            row = new_row(str(host))
            row["error"] = "in no job's report: its slice did not run, or its report was not given"
            rows[str(host)] = row
    merged = list(rows.values())
    first = docs[0][1]["run"]
    soaks = [dict(soak, part=run["part"]) for run, (path, doc) in zip(runs, ordered)
             for soak in doc["run"].get("soaks") or []]
    doc = {
        "run": {
            "playbook": first.get("playbook"), "mode": first.get("mode"), "check_mode": first.get("check_mode"),
            "id": "merged-%s" % (first.get("rollout_id") or first.get("id")), "rollout_id": first.get("rollout_id"),
            "result": run_result(r["status"] for r in merged),
            "started": min(str(r["started"]) for r in runs),
            "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "batches": sum(int(d["run"].get("batches") or 0) for d in dict(docs).values()), "soaks": soaks,
            "stage": "merged", "parts": runs, "left_out": len(parts) - len(docs),
        },
        "counts": counts(merged),
        "hosts": merged,
    }
    return doc, []
