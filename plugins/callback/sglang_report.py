# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet report for the SGLang remediation playbooks, written as the run goes."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_report
type: aggregate
short_description: Write the fleet report (JSON + Markdown) as each host finishes, and at the end
version_added: "1.0.0"
description:
  - Collects, per host, the C(sglang_remediation) fact the role sets (release, decision, grep
    evidence, hashes, draft ids, flags, restart, health, accept length, tokens/s, error),
    failures and unreachability, and the serial batch each host ran in.
  - Rewrites C(<report_dir>/latest/fleet.json) and C(fleet.md) plus a timestamped copy in
    C(<report_dir>/runs/<UTC time>-<playbook>-<pid>/) after every event that changes a row, so the
    report exists even when the run aborts (failed canary, max_fail_percentage tripped,
    any_errors_fatal, Ctrl-C). Hosts of the play that no batch reached appear as C(not reached).
  - The report names every host, its release, hashes and errors, so it is private. Its files are 0600, and the folders
    the callback makes (the report directory, C(runs/), each run's folder, C(latest/)) are 0700; a folder that
    already exists keeps its mode.
  - Which plays take part is said by one play variable, C(sglang_fleet_report), which the collection's playbooks set
    on every play they report on. V(true) (or V(batch)) - the play's hosts are a batch (remediate.yml's rollout,
    rollback.yml). V(pass) - a pass over the whole fleet that is not a batch (the probe pass of remediate.yml and
    audit.yml, remediate.yml's last play), which adds its hosts; a host it leaves for the rollout stays
    C(not reached) until its batch starts.
  - A play that does not set it takes part as a batch when it runs the C(sglang) role (C(fleetops.sglang.sglang) or
    C(sglang), in C(roles) or imported), as a site playbook's own play does; other plays (test bed preparation,
    compliance asserts) add no hosts.
  - The fact C(sglang_soak) (tasks/soak.yml, after a rollout step) is the soak's verdict. The run gets one entry in
    C(run.soaks) per step (batch, seconds, passed, action, verdict per host) and each host re-read gets its step's
    verdict in its row's C(soak); a host that failed it gets the status C(failed).
  - A run of the canary stage only (C(sglang_rollout_stage=canaries)) leaves the other hosts that need work for the
    next job; they get the status C(next stage), which needs no attention.
  - The run records the extra variable C(sglang_rollout_id) (else AWX's C(awx_workflow_job_id), which the slices
    of one sliced job share) as C(run.rollout_id), and C(awx_job_id) as C(run.job_id);
    C(playbooks/report_merge.yml) joins the reports of one rollout's jobs by it.
  - Hosts the playbooks leave out because they are known to be out (the group C(sglang_maintenance), the extra
    variable C(sglang_skip_hosts)) get the status C(skipped (maintenance)); they need no attention.
  - The run's mode (C(remediate), C(audit) or C(rollback), the vocabulary of C(plugins/module_utils/_runmode.py)) is
    what the fleet plays' variables say, as for the rows' C(mode); C(audit) where C(sglang_audit) is true
    (C(playbooks/audit.yml)), C(rollback) where C(_sglang_rollback_run) is (C(playbooks/rollback.yml)), else
    C(remediate); an extra variable wins over the play's. The playbook's file name plays no part.
  - C(fleet.md) has one line per status (its count, its share of the fleet as a bar of C(#), its first hosts), the
    hosts that need attention, then one row per host. At the end the Markdown summary (failures first, counts per
    decision) is printed too.
  - A host that could not be reached (sshd down, a connection that dropped mid-run, a stopped container over the
    docker connection, whose task fails with C(Module result deserialization failed)) gets the status
    C(unreachable) with the connection's message, distinct from C(failed), and is listed under "Needs attention".
  - The report's C(run.id) is the run id the per-host lease (M(fleetops.sglang.sglang_lease)) names its holder by;
    both are C(<UTC start>-<pid>) of the C(ansible-playbook) process, computed on each side from that process
    (nothing passes between them). The run's folder under C(runs/) is C(<UTC start>-<playbook>-<pid>), and
    C(<UTC start>-<playbook>@job<id>-<pid>) for an AWX job (C(awx_job_id)).
author:
  - SGLang remediation maintainers (@fleetops)
options:
  report_dir:
    description:
      - Directory that receives C(latest/) and C(runs/). Relative paths are taken from
        the directory of the ansible.cfg in use (the project root), else the working directory.
      - Under ansible-runner (AWX's jobs), when neither C(SGLANG_REPORT_DIR) nor another value is set, the report
        goes into the job's artifacts, C(<artifacts>/<ident>/sglang/), beside the job's events.
    type: str
    default: reports
    env:
      - name: SGLANG_REPORT_DIR
    ini:
      - section: sglang_report
        key: report_dir
  print_rows_max:
    description:
      - Print the whole host table at the end for fleets up to this size; larger fleets
        get the counts and the failures only (the files always hold every row).
    type: int
    default: 50
    env:
      - name: SGLANG_REPORT_PRINT_ROWS_MAX
    ini:
      - section: sglang_report
        key: print_rows_max
  keep:
    description:
      - How many run folders C(runs/) keeps after each run, newest first; a count (V(200)), or an age in days
        (V(30d)); V(0) keeps them all. C(latest/) and this run's folder are never pruned, nor anything in
        C(runs/) that is not a run folder of this callback (C(<UTC time>-<playbook>-<pid>)).
      - An audit every 15 minutes writes 96 folders a day.
    type: str
    default: "200"
    env:
      - name: SGLANG_REPORT_KEEP
    ini:
      - section: sglang_report
        key: keep
requirements:
  - Enable it with C(callbacks_enabled = fleetops.sglang.sglang_report) in the C([defaults]) section of C(ansible.cfg),
    or with C(ANSIBLE_CALLBACKS_ENABLED=fleetops.sglang.sglang_report) in the environment.
notes:
  - It works beside any stdout callback; it only writes files and prints the summary at the end.
seealso:
  - module: fleetops.sglang.sglang_probe
"""

import atexit
import datetime
import json
import os
import re
import shutil
import time
from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

from ansible import constants as C
from ansible import context
from ansible.plugins.callback import CallbackBase
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import process_started, run_id_of
from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import is_live, texts
from ansible_collections.fleetops.sglang.plugins.module_utils._rollout import STAGE_ALL, STAGES
from ansible_collections.fleetops.sglang.plugins.module_utils._rows import MAINTENANCE_GROUP, skip_host_names
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _hostpattern
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import AUDIT, REMEDIATE, run_mode

FACT = "sglang_remediation"
SOAK_FACT = "sglang_soak"
# Statuses a row moves through; the first four are outcomes that need a reader's attention.
ATTENTION = ("failed", "unreachable", "aborted", "not reached")
# A host known to be out (group sglang_maintenance, or -e sglang_skip_hosts): the playbooks' host
# patterns leave it out, it counts against no limit, and its row says so.
SKIPPED = "skipped (maintenance)"
# A host that needs work, left by a canary stage's run (sglang_rollout_stage=canaries) for the job after
# it: the playbook hands them to this group (tasks/rollout_plan.yml).
NEXT_STAGE = "next stage"
NEXT_STAGE_GROUP = "sglang_next_stage"
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


def play_mode(play: Any) -> str:
    """The run's mode as a fleet play's variables say it (extra variables win, as in Ansible):
    the same two variables, read by the same function, as the mode of the rows the role sets."""
    values = dict(play.vars or {})
    values.update(getattr(getattr(play, "_variable_manager", None), "extra_vars", None) or {})
    return run_mode(as_bool(values.get("sglang_audit", False)), as_bool(values.get("_sglang_rollback_run", False)))


def rollout_ids(play: Any) -> Tuple[Any, Any, str]:
    """(rollout id, job id, stage) from the extra variables: sglang_rollout_id, else AWX's awx_workflow_job_id
    (the slices of a sliced job are the jobs of one workflow job); awx_job_id; sglang_rollout_stage."""
    extra = getattr(getattr(play, "_variable_manager", None), "extra_vars", None) or {}
    rollout = extra.get("sglang_rollout_id")
    if rollout in (None, ""):
        rollout = extra.get("awx_workflow_job_id")
    job = extra.get("awx_job_id")
    stage = str(extra.get("sglang_rollout_stage") or STAGE_ALL)
    return (None if rollout in (None, "") else str(rollout)), (None if job in (None, "") else str(job)), stage


# How a play takes part in the report: the play variable sglang_fleet_report.
FLEET_REPORT_VAR = "sglang_fleet_report"
BATCH = "batch"
PASS = "pass"


def fleet_part(play: Any) -> Optional[str]:
    """BATCH, PASS or None (not reported) for one play: its sglang_fleet_report, else whether it runs the role."""
    value = (play.vars or {}).get(FLEET_REPORT_VAR)
    if isinstance(value, str) and value.strip().lower() in (BATCH, PASS):
        return value.strip().lower()
    if value is not None:
        return BATCH if as_bool(value) else None
    # The role by its FQCN (fleetops.sglang.sglang) or by a roles_path name (sglang).
    roles = {r.get_name().rsplit(".", 1)[-1] for r in play.get_roles()}
    return BATCH if "sglang" in roles else None


# The report directory's default, and the variable ansible-runner gives the playbook: its artifacts directory.
DEFAULT_REPORT_DIR = "reports"
# The report's files and the folders the callback makes: the operator's alone.
REPORT_FILE_MODE = 0o600
REPORT_DIR_MODE = 0o700
RUNNER_ARTIFACTS_ENV = "AWX_ISOLATED_DATA_DIR"
# A run folder's name: <UTC start>-<playbook>[@job<AWX job id>]-<pid> (_setup_dirs).
RUN_DIR = re.compile(r"^\d{8}T\d{6}Z-[^/]+-\d+$")


def parse_keep(text: str) -> Tuple[int, Optional[datetime.timedelta]]:
    """(count, max age) of the ``keep`` option: "200" keeps 200 runs, "30d" those of 30 days, "0" all."""
    text = text.strip().lower()
    if re.match(r"^\d+d$", text):
        return 0, datetime.timedelta(days=int(text[:-1])) if int(text[:-1]) else None
    if re.match(r"^\d+$", text):
        return int(text), None
    raise ValueError("keep=%r is neither a count of runs (200) nor days (30d)" % text)


# The lease (fleetops.sglang.sglang_lease) names its holder by this run's report directory.


def known_out(play: Any, inventory: Any, pattern: Any, targeted: List[str]) -> List[str]:
    """The hosts of the play's pattern, without its exclusions, that it leaves out because they are known
    to be out: in the group sglang_maintenance or in the extra var sglang_skip_hosts."""
    if not isinstance(pattern, (str, list, tuple)) or "!" + MAINTENANCE_GROUP not in _hostpattern.terms(pattern):
        return []
    group = (getattr(inventory, "groups", None) or {}).get(MAINTENANCE_GROUP)
    out = {h.get_name() for h in group.get_hosts()} if group is not None else set()
    extra = getattr(getattr(play, "_variable_manager", None), "extra_vars", None) or {}
    try:
        skip = skip_host_names(extra.get("sglang_skip_hosts"))
    except ValueError:
        skip = []  # the play's host pattern refused it already (fleetops.sglang.fleet_pattern)
    out |= set(skip)
    # What the user targeted, their own exclusions kept: the pattern less the terms fleet_pattern added.
    targets = _hostpattern.without_exclusions(pattern, skip)
    return [h.get_name() for h in inventory.get_hosts(targets, ignore_restrictions=True)
            if h.get_name() in out and h.get_name() not in targeted]


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
        "tokens_per_s": None, "live_accept_length": None, "live_source": "", "live_settings": {},
        "live_notes": [], "left": [], "changes": [], "restarts": 0, "soak": "", "error": "", "failed_task": "",
        "stats": {},
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
    for soak in run.get("soaks") or []:
        failed = sorted(h for h, v in soak["hosts"].items() if v != "passed")
        lines.append("- soak after batch %s (%s s, %d hosts re-read): %s%s" % (
            soak["batch"], soak["seconds"], len(soak["hosts"]), "passed" if soak["passed"] else "FAILED",
            ", %s" % soak["action"] if soak["action"] else "") + (" (failed: %s)" % ", ".join(failed) if failed else ""))
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


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows: Dict[str, Dict[str, Any]] = {}
        self.playbook = ""
        # The run's id, as the lease's holder names this run (_lease.run_id_of, from this process).
        started = process_started(os.getpid())
        self.run_id = run_id_of(os.getpid(), started)
        self.started = datetime.datetime.fromtimestamp(started if started is not None else time.time(),
                                                       datetime.timezone.utc)
        self.batches = 0
        self.soaks: List[Dict[str, Any]] = []
        self.result = "running"
        self.finished = False
        self.base_dir = ""
        self.run_dir = ""
        self.mode = REMEDIATE
        self.check_mode = bool((context.CLIARGS or {}).get("check", False))
        self.in_fleet_play = False
        self.active = False
        self.inventory: Any = None
        self.rollout_id: Any = None
        self.job_id: Any = None
        self.stage = STAGE_ALL
        atexit.register(self._at_exit)

    # --- where the files go ------------------------------------------------------
    def _setup_dirs(self) -> None:
        report_dir = os.path.expanduser(str(self.get_option("report_dir")))
        runner_dir = os.environ.get(RUNNER_ARTIFACTS_ENV)
        if report_dir == DEFAULT_REPORT_DIR and runner_dir and not os.environ.get("SGLANG_REPORT_DIR"):
            # Under ansible-runner (AWX's jobs, or ansible-runner by hand), beside the job's events.
            report_dir = os.path.join(runner_dir, "sglang")
        if not os.path.isabs(report_dir):
            root = os.path.dirname(C.CONFIG_FILE) if C.CONFIG_FILE else os.getcwd()
            report_dir = os.path.join(root, report_dir)
        stamp, pid = self.run_id.rsplit("-", 1)
        name = os.path.splitext(os.path.basename(self.playbook))[0] or "run"
        if self.job_id:
            # AWX's slices start together in containers whose PIDs may be equal: the job's id keeps their
            # folders apart in a report directory they share.
            name = "%s@job%s" % (name, re.sub(r"[^A-Za-z0-9_.-]", "_", self.job_id))
        self.base_dir = report_dir
        # <the run id's start>-<playbook>-<the run id's pid>: the folder of the run a lease names.
        self.run_dir = os.path.join(report_dir, "runs", "%s-%s-%s" % (stamp, name, pid))

    def _document(self) -> Dict[str, Any]:
        rows = list(self.rows.values())
        for r in rows:
            r["action"] = action_of(r, self.check_mode)
        return {
            "run": {
                "playbook": self.playbook, "mode": self.mode, "check_mode": self.check_mode,
                "id": self.run_id, "result": self.result, "started": self.started.isoformat(timespec="seconds"),
                "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "batches": self.batches, "soaks": self.soaks, "pid": os.getpid(),
                "rollout_id": self.rollout_id, "job_id": self.job_id, "stage": self.stage,
            },
            "counts": counts(rows),
            "hosts": rows,
        }

    def _write(self) -> Optional[str]:
        if not self.active:
            return None
        doc = self._document()
        text_json = json.dumps(plain(doc), indent=2, sort_keys=False) + "\n"
        text_md = render_markdown(doc)
        try:
            # Private (REPORT_*_MODE; a folder that exists keeps its mode).
            for d in (self.base_dir, os.path.join(self.base_dir, "runs")):
                os.makedirs(d, mode=REPORT_DIR_MODE, exist_ok=True)
            for d in (self.run_dir, os.path.join(self.base_dir, "latest")):
                atomic_write(os.path.join(d, "fleet.json"), text_json, mode=REPORT_FILE_MODE, dir_mode=REPORT_DIR_MODE)
                atomic_write(os.path.join(d, "fleet.md"), text_md, mode=REPORT_FILE_MODE, dir_mode=REPORT_DIR_MODE)
        except OSError as exc:
            self._display.warning("sglang_report: could not write the fleet report: %s" % exc)
        return text_md

    # --- rows ----------------------------------------------------------------------
    def _row(self, host: str) -> Dict[str, Any]:
        if host not in self.rows:
            self.rows[host] = new_row(host)
        return self.rows[host]

    def _absorb_fact(self, host: str, fact: Mapping) -> None:
        # The row is built typed by plugins/module_utils/_rows.py: taken as it is.
        fact = plain(fact)
        row = self._row(host)
        for key in ("release", "decision", "family", "file_state_before", "sha256_before", "sha256_after",
                    "companion", "health", "mode", "forward", "evidence", "draft_layer_ids", "restart_reasons",
                    "drift", "server_args_warnings", "rollback", "left", "changes", "speculative_flags", "compliant",
                    "restart_needed", "restarted", "restarts", "adopted", "rolled_back", "accept_length",
                    "tokens_per_s"):
            if key in fact:
                row[key] = fact[key]
        if "live" in fact:
            row.update(live_columns(fact["live"]))
        if fact.get("error"):
            row["error"] = fact["error"]
            row["status"] = "failed"
            if fact.get("failed_task"):
                row["failed_task"] = fact["failed_task"]
        elif row["status"] in ("running", "not reached"):
            row["status"] = "ok"
        if row["status"] == "ok" and row["compliant"] is not False and row.get("adopted"):
            # Recorded as it runs, no restart (an audit or --check only finds it adoptable).
            row["status"] = "would adopt" if self.check_mode or self.mode == AUDIT else "adopted"
        if row["status"] == "ok" and row["compliant"] is False:
            # Audit: a finding. Check mode: what a real run would change.
            if self.mode == AUDIT:
                row["status"] = "noncompliant"
            elif self.check_mode:
                row["status"] = "would change"
            elif self.mode == REMEDIATE:
                # Left non-compliant by a run that changed what it could (a live finding:
                # a swapped draft or a server started with other flags needs a person).
                row["status"] = "noncompliant"

    def _absorb_soak(self, fact: Mapping) -> None:
        # One step's soak (run once, after the batch this callback counted last).
        fact = plain(fact)
        verdicts = dict(fact.get("hosts") or {})
        self.soaks.append({"batch": self.batches, "seconds": int(fact.get("seconds") or 0),
                           "passed": as_bool(fact.get("passed")), "action": str(fact.get("action") or ""),
                           "hosts": verdicts})
        for host, verdict in verdicts.items():
            row = self._row(host)
            row["soak"] = "after batch %d: %s" % (self.batches, verdict)
            if verdict != "passed":
                row["status"] = "failed"
                row["error"] = row["error"] or "soak after batch %d: %s" % (self.batches, verdict)
                row["failed_task"] = row["failed_task"] or "soak"

    # --- callbacks -----------------------------------------------------------------
    def v2_playbook_on_start(self, playbook: Any) -> None:
        # The name only labels the report and its run folder: the mode is the plays' (play_mode).
        self.playbook = os.path.basename(getattr(playbook, "_file_name", "") or "")
        self._setup_dirs()

    def v2_playbook_on_play_start(self, play: Any) -> None:
        part = fleet_part(play)
        probe_pass = part == PASS
        self.in_fleet_play = part is not None
        if not self.in_fleet_play:
            return
        self.mode = play_mode(play)
        self.active = True
        job_id = self.job_id
        self.rollout_id, self.job_id, self.stage = rollout_ids(play)
        if self.job_id != job_id:
            self._setup_dirs()
        inventory = play._variable_manager._inventory
        self.inventory = inventory
        pattern = play.hosts
        everyone = [h.get_name() for h in inventory.get_hosts(pattern, ignore_restrictions=True)]
        batch = [h.get_name() for h in inventory.get_hosts(pattern)]
        for host in everyone:
            self._row(host)
        for host in known_out(play, inventory, pattern, everyone):
            if host not in self.rows:
                self._row(host)["status"] = SKIPPED
        if probe_pass or not batch:
            # The fleet's probe pass (every host at once) is not a batch: a compliant host
            # ends there, the others stay "not reached" until their batch starts. Nor is
            # the rollout play when every host ended at its probe (no host left).
            self._write()
            return
        self.batches += 1
        for host in batch:
            row = self._row(host)
            if row["batch"] is None:
                row["batch"] = self.batches
            if row["status"] == "not reached":
                row["status"] = "running"
        self._write()

    def v2_runner_on_ok(self, result: Any) -> None:
        if not self.in_fleet_play:
            return
        facts = result.result.get("ansible_facts") or {}
        if FACT in facts:
            self._absorb_fact(result.host.get_name(), facts[FACT])
            self._write()
        if SOAK_FACT in facts:
            self._absorb_soak(facts[SOAK_FACT])
            self._write()

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not self.in_fleet_play or ignore_errors:
            return
        row = self._row(result.host.get_name())
        res = result.result
        down = unreachable_reason(res)
        if down:
            row["status"] = "unreachable"
            row["error"] = down
            row["failed_task"] = result.task.get_name()
            self._write()
            return
        msg = res.get("msg") or res.get("stderr") or res.get("reason") or "failed"
        # A failure inside the role is rescued (its change put back) and the role's row then
        # names the step and what was done; the task that fails the host at the end repeats
        # it. Keep the first cause, and the role's own account once it has given one.
        if not row.get("error") or row["status"] != "failed":
            row["error"] = str(msg).strip()
            row["failed_task"] = result.task.get_name()
        row["status"] = "failed"
        self._write()

    def v2_runner_on_unreachable(self, result: Any) -> None:
        if not self.in_fleet_play:
            return
        row = self._row(result.host.get_name())
        row["status"] = "unreachable"
        row["error"] = "unreachable: %s" % str(result.result.get("msg", "")).strip()
        row["failed_task"] = result.task.get_name()
        self._write()

    def v2_playbook_on_stats(self, stats: Any) -> None:
        if not self.active:
            return
        group = (getattr(self.inventory, "groups", None) or {}).get(NEXT_STAGE_GROUP)
        next_stage = {h.get_name() for h in group.get_hosts()} if group is not None else set()
        for host, row in self.rows.items():
            summary = stats.summarize(host)
            row["stats"] = {k: int(v) for k, v in summary.items()}
            if row["status"] == "not reached" and host in next_stage:
                row["status"] = NEXT_STAGE
            elif row["status"] == "running":
                # In a batch that any_errors_fatal or max_fail_percentage cut short.
                row["status"] = "aborted"
                row["error"] = row["error"] or "the run stopped before this host finished"
            elif row["status"] == "ok" and summary.get("changed", 0) and not self.check_mode and self.mode != AUDIT:
                row["status"] = "changed"
        self.result = run_result(r["status"] for r in self.rows.values())
        self.finished = True
        md = self._write() or ""
        self._prune()
        limit = int(self.get_option("print_rows_max"))
        if len(self.rows) > limit:
            md = md.split("\n## Hosts\n", 1)[0]
        self._display.banner("SGLANG FLEET REPORT")
        self._display.display(md)
        self._display.display("report: %s/{fleet.json,fleet.md} (copy in %s)" % (
            os.path.join(self.base_dir, "latest"), self.run_dir))

    def _prune(self) -> List[str]:
        """Remove the run folders that ``keep`` no longer keeps; the removed names."""
        try:
            count, max_age = parse_keep(str(self.get_option("keep")))
        except ValueError as exc:
            self._display.warning("sglang_report: %s; nothing pruned" % exc)
            return []
        runs = os.path.join(self.base_dir, "runs")
        try:
            names = sorted((n for n in os.listdir(runs) if RUN_DIR.match(n)), reverse=True)
        except OSError:
            return []
        now = datetime.datetime.now(datetime.timezone.utc)
        removed = []
        for pos, name in enumerate(names):
            path = os.path.join(runs, name)
            if path == self.run_dir:
                continue
            started = datetime.datetime.strptime(name[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
            if (count and pos >= count) or (max_age is not None and now - started > max_age):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(name)
        return removed

    def _at_exit(self) -> None:
        """Ctrl-C or a crash: leave a report that says so rather than one that says running."""
        if self.active and not self.finished:
            self.result = "interrupted"
            for row in self.rows.values():
                if row["status"] == "running":
                    row["status"] = "aborted"
                    row["error"] = row["error"] or "the run was interrupted before this host finished"
            self._write()
