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
from ansible_collections.fleetops.sglang.plugins.plugin_utils._rollout import NEXT_STAGE_GROUP, STAGE_ALL, estimate
from ansible_collections.fleetops.sglang.plugins.plugin_utils._rows import MAINTENANCE_GROUP, skip_host_names
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _hostpattern
from ansible_collections.fleetops.sglang.plugins.plugin_utils._prefork import warm_up
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import AUDIT, REMEDIATE, run_mode
from ansible_collections.fleetops.sglang.plugins.plugin_utils._report import (
    FACT, NEXT_STAGE, SKIPPED, SOAK_FACT, action_of, as_bool, counts, live_columns, new_row, plain,
    render_markdown, run_result, unreachable_reason,
)


# The row's columns the callback sets itself (the error and failed task it takes below, by its rule).
CALLBACK_COLUMNS = frozenset(("host", "status", "batch", "action", "soak", "stats", "error", "failed_task"))


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
        # The rollout's sliding window (plugins/strategy/window.py calls window_started): its state.
        self.window_state: Any = None
        self.window_estimate: Optional[Dict[str, Any]] = None
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
                "window": self._window_doc(),
            },
            "counts": counts(rows),
            "hosts": rows,
        }

    # --- the sliding window -------------------------------------------------------
    def previous_times(self) -> Dict[str, float]:
        """Each host's newest time out of rotation in the earlier runs this report directory keeps."""
        times: Dict[str, Tuple[str, float]] = {}
        runs = os.path.join(self.base_dir, "runs")
        try:
            names = sorted(n for n in os.listdir(runs) if os.path.join(runs, n) != self.run_dir)
        except OSError:
            return {}
        for name in names:
            try:
                with open(os.path.join(runs, name, "fleet.json"), encoding="utf-8") as handle:
                    doc = json.load(handle)
            except (OSError, ValueError):
                continue
            for row in doc.get("hosts") or []:
                value = row.get("out_of_rotation_s") if isinstance(row, dict) else None
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    times[str(row.get("host"))] = (name, float(value))
        return {host: newest[1] for host, newest in times.items()}

    def stop_file(self) -> str:
        """The rollout's default stop file (sglang_rollout_stop_file unset): STOP in the report directory,
        wherever the reports go (reports/, SGLANG_REPORT_DIR, a job's artifacts)."""
        return os.path.join(self.base_dir, "STOP") if self.base_dir else ""

    def window_started(self, state: Any) -> None:
        """The strategy's window, once per play: the estimate from earlier runs, said and reported."""
        self.window_state = state
        doc = state.doc
        times = self.previous_times()
        self.window_estimate = estimate(list(times.values()), int(doc.get("hosts") or 0), int(doc.get("size") or 1),
                                        len(doc.get("canaries") or []))
        if self.window_estimate is None:
            self._display.display("window: no earlier run in %s recorded a time out of rotation: no estimate of the "
                                  "rollout's duration yet" % os.path.join(self.base_dir, "runs"))
        else:
            self._display.display("window: about %.0f min for %s host(s) (%d rounds of the median %.0f s out of "
                                  "rotation, from %d host(s) of earlier runs)" % (
                                      self.window_estimate["seconds"] / 60.0, doc.get("hosts"),
                                      self.window_estimate["rounds"], self.window_estimate["median_s"],
                                      self.window_estimate["samples"]))
        self._write()

    def _window_doc(self) -> Optional[Dict[str, Any]]:
        state = self.window_state
        if state is None:
            return None
        doc, rule = state.doc, state.rule
        return {"size": rule.size, "budget": doc.get("budget"), "forks": doc.get("forks"),
                "lookahead": rule.lookahead, "canaries": list(doc.get("canaries") or []),
                "not_serving": list(doc.get("kept_out") or []),
                "max_failures": rule.max_failures, "peak_out_of_rotation": rule.peak, "in_use": rule.in_use(),
                "failed": sorted(rule.failed), "stopped": rule.stopped, "estimate": self.window_estimate,
                "stop_file": state.stop_file or None}

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
        # The row is built typed by plugins/plugin_utils/_rows.py: taken as it is.
        fact = plain(fact)
        row = self._row(host)
        # Every column of the row builder's, but the callback's own (and the error, below); not a
        # list of them here, which a new column would miss. The run's mode comes with the row too.
        for key, value in fact.items():
            if key not in CALLBACK_COLUMNS and (key in row or key == "mode"):
                row[key] = value
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
        # Under the window each host soaks after its own gate (tasks/soak_host.yml).
        after = "its gate" if fact.get("after") == "gate" else "batch %d" % self.batches
        self.soaks[-1]["after"] = after
        for host, verdict in verdicts.items():
            row = self._row(host)
            row["soak"] = "after %s: %s" % (after, verdict)
            if verdict != "passed":
                row["status"] = "failed"
                row["error"] = row["error"] or "soak after %s: %s" % (after, verdict)
                row["failed_task"] = row["failed_task"] or "soak"

    # --- callbacks -----------------------------------------------------------------
    def v2_playbook_on_start(self, playbook: Any) -> None:
        # The name only labels the report and its run folder: the mode is the plays' (play_mode).
        self.playbook = os.path.basename(getattr(playbook, "_file_name", "") or "")
        self._setup_dirs()
        # Before the first worker forks: what each would load again for itself (plugin_utils/_prefork.py).
        warm_up()

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
        window_task = (getattr(result.task, "vars", None) or {}).get("_sglang_window")
        if window_task == "sleep":
            # A soak's read (tasks/soak_host.yml): its block's rescue records the verdict (sglang_soak),
            # which gives the row its account, and fails the host.
            return
        if window_task == "admit":
            # The rollout's window stopped before this host started (plugins/strategy/window.py): untouched.
            row["status"] = "not reached"
            row["error"] = str(msg).strip()
            self._write()
            return
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
