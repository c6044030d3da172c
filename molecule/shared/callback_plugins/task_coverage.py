# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which tasks ran, and which way their conditions went, for the suite's task coverage.

A test instrument, not part of the collection, loaded like run_stats.py from this
directory (no enabling needed), silent unless SGLANG_TEST_COVERAGE_DIR names a
directory. Then each ansible-playbook process writes one JSON file there, at its
end and as the run goes on (at most every 0.5 s, and before each task: a run killed mid-way keeps what it saw):

  {"tasks": {"<file>:<line>": {"name": ..., "action": ..., "ran": N, "ok": N, "failed": N, "skipped": N,
                                "checked": N, "checked_by": {"check_mode": N, "audit": N},
                                "failures": {"task": N, "conditional": N, "template": N},
                                "failure_messages": {"<kind>": ["<msg>", ...]},
                                "conditions": {"<when item>": {"true": N, "false": N}}}}}

A task "ran" on a host when it returned ok, changed or failed there (a loop's items
count one by one); "ok" counts the results that did not fail, "checked" those of them
that were only checked (below), "failed" the results that failed, by kind:
"conditional" when evaluating one of its conditions raised (a ``when``,
``until``, ``failed_when`` or ``changed_when`` on an undefined variable, or one whose
result is not a boolean, which ansible-core 2.19+ reports as a task failure),
"template" when templating its arguments, variables or loop hit an undefined
variable or attribute or a template syntax error, "task" for any other failure (the
module's, an assert's, a fail task's). Up to three messages per kind are kept.

Ansible evaluates a task's ``when`` items (its own, then those of its blocks,
includes and role) in order and stops at the first false one, which it reports as
``false_condition``: the items before it were true, it was false, and the rest were
not evaluated. A task that returned ok, or failed as a task, saw all of them true;
one whose condition or templating raised marks none (which item raised is not known,
and an error is neither true nor false).

Executed means executed: a result that did not fail is "checked", not run, when the
task's effective check mode was on (``--check``, or ``check_mode: true``, templated or
not: ``check_mode: false`` under ``--check`` is a real run) or when the run was an audit
(``sglang_audit`` true for the task), since a ``copy`` in check mode or a
module in its audit state wrote nothing. "checked_by" says which (a result can be
both). The check mode is the task's own, post-validated field on the result (the
worker templates ``check_mode`` and inherits it from blocks, the play and the command
line in ``Task.post_validate``, and the result's task is rebuilt from those fields);
``sglang_audit`` is read where the collection's playbooks and operators set it: the
play's variables (playbooks/audit.yml), the task's own and its blocks', and the extra
variables (``-e``), in Ansible's order of precedence. Not per host: asking the variable
manager for each host's variables of each task cost 1 to 1.5 ms of the controller's CPU
per task and host, in every run of the suite, for a case (an audit switched on per host
in the inventory) no playbook of the collection makes. An include (include_tasks, include_role) does the same in
check mode and audits, and always counts as run. Files written before this split (no
"checked") count every ok result as run.

Paths are kept from ``roles/`` or ``playbooks/`` on, so runs of the installed
collection (the collection scenario) count for the checkout's files.
testbed/coverage.py merges the files of a suite run and judges them.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: task_coverage
type: aggregate
short_description: Record which role and playbook tasks ran and how their conditions evaluated
description:
  - Writes, per ansible-playbook process, a JSON file into the directory named by the
    E(SGLANG_TEST_COVERAGE_DIR) environment variable; without it the callback does nothing.
author:
  - SGLang remediation maintainers (@fleetops)
"""

import json
import os
import re
import threading
import time
from typing import Any, Dict, Optional

from ansible import context
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.callback import CallbackBase

# Seconds between two rewrites of a run's file while it goes on (_write).
WRITE_EVERY = 0.5

_ANCHOR = re.compile(r"(?:^|/)((?:roles|playbooks)/.*)$")


def relative(path: Optional[str]) -> Optional[str]:
    """'<anything>/roles/sglang/tasks/x.yml:12' -> 'roles/sglang/tasks/x.yml:12'; None for other files."""
    if not path:
        return None
    match = _ANCHOR.search(str(path))
    return match.group(1) if match else None


# ansible-core's own messages for an error raised while evaluating a conditional and for one raised
# while templating the task. 2.19+ starts every message of its own with "Task failed:"; before,
# these were the markers. Only such messages are read, so a fail task whose own text says
# "... is undefined" stays a task failure.
_BY_ANSIBLE = re.compile(r"^(Task failed:|'[^']+' is undefined)|The conditional check|error while evaluating conditional"
                         r"|The task includes an option with an undefined variable|template error while templating string")
_CONDITIONAL = re.compile(r"A 'when' expression failed|An 'until' expression failed|Error while evaluating conditional"
                          r"|error while evaluating conditional|Conditionals must have a boolean result"
                          r"|The conditional check")
_TEMPLATE = re.compile(r"is undefined|has no attribute|Syntax error in template|undefined variable"
                       r"|template error while templating string")
MESSAGES_KEPT = 3


def failure_kind(result: Optional[Dict[str, Any]]) -> str:
    """Where a failed result's failure came from: "conditional", "template" or "task"."""
    result = result or {}
    for key in ("failed_when_result", "changed_when_result"):
        if isinstance(result.get(key), str):  # that conditional raised: its error replaced its result
            return "conditional"
    msg = str(result.get("msg", ""))
    if not _BY_ANSIBLE.search(msg):
        return "task"
    if _CONDITIONAL.search(msg):
        return "conditional"
    if _TEMPLATE.search(msg):
        return "template"
    return "task"


def failure_message(result: Optional[Dict[str, Any]]) -> str:
    result = result or {}
    for key in ("failed_when_result", "changed_when_result"):
        if isinstance(result.get(key), str):
            return "%s: %s" % (key.rsplit("_", 1)[0], result[key])
    return " ".join(str(result.get("msg", "")).split())[:400]


def skipped_result(result: Any) -> Dict[str, Any]:
    """A skipped result with the condition that skipped it. A ``no_log`` task's result reaches
    callbacks censored, ``false_condition`` included, so that a skip of one (the environment and key
    files) would never count its condition false: the condition's text alone is read from the
    uncensored result (ansible-core 2.19+), never a value the task handled."""
    out = result._result
    if out.get("false_condition") is None and out.get("censored"):
        utr = getattr(result, "_CallbackTaskResult__utr", None)
        false = getattr(utr, "false_condition", None)
        if false is not None:
            out = dict(out, false_condition=false)
    return out


def conditions(task: Any) -> list:
    try:
        when = task.when or []
    except Exception:  # noqa: BLE001 (a task object that cannot say: record nothing rather than break the run)
        return []
    if not isinstance(when, list):
        when = [when]
    return [str(c) for c in when if not isinstance(c, bool)]


AUDIT_VAR = "sglang_audit"


def result_task(result: Any) -> Any:
    """The task a result belongs to: ``result.task`` from 2.19 on (rebuilt from the worker's
    post-validated fields), ``result._task`` before."""
    try:
        return result.task
    except AttributeError:
        return getattr(result, "_task", None)


def effective_check_mode(result: Any) -> bool:
    """Whether the task ran with check mode on. After ``Task.post_validate`` (executor/task_executor.py)
    the task's ``check_mode`` is a bool: its own value templated, else its blocks', its play's, else
    the command line's ``--check`` (``Base.check_mode``'s default, context.CLIARGS['check']). A result
    of a task that failed before its fields were templated (a broken ``when``) falls back to the
    command line."""
    value = None
    task = result_task(result)
    if task is not None:
        value = getattr(task, "check_mode", None)
    if not isinstance(value, bool):
        fields = getattr(result, "_task_fields", None)  # before 2.19: the post-validated fields
        value = fields.get("check_mode") if isinstance(fields, dict) else None
    if isinstance(value, bool):
        return value
    return bool(context.CLIARGS.get("check", False))


def as_bool(value: Any) -> bool:
    try:
        return boolean(value, strict=False)
    except (TypeError, ValueError):
        return False


def audit_from_play(play: Any, task: Any = None) -> bool:
    """``sglang_audit`` as the play, the task (its own and its blocks' and includes') and the extra
    variables set it, in Ansible's order of precedence."""
    layers = []
    if play is not None:
        layers.append(dict(play.vars or {}))
    if task is not None:
        try:
            layers.append(task.get_vars())
        except Exception:  # noqa: BLE001 (a task object that cannot say: the play's word stands)
            pass
    manager = play.get_variable_manager() if play is not None else None
    layers.append(getattr(manager, "extra_vars", None) or {})
    value = False
    merged: Dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
        if AUDIT_VAR in layer:
            value = layer[AUDIT_VAR]
    if isinstance(value, str) and "{{" in value and play is not None:
        try:  # templated, as Ansible resolves it (-e 'sglang_audit={{ ... }}')
            from ansible.template import Templar
            value = Templar(loader=play.get_loader(), variables=merged).template(value)
        except Exception:  # noqa: BLE001 (a value that cannot be resolved here is no audit)
            return False
    return as_bool(value)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_coverage"
    # Loaded from its directory without callbacks_enabled, like run_stats.
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dir = os.environ.get("SGLANG_TEST_COVERAGE_DIR")
        self._tasks: Dict[str, Dict[str, Any]] = {}
        self._file = None
        self._play: Any = None
        self._lock = threading.RLock()
        self._written_at = 0.0
        self._dirty = False
        if self._dir:
            os.makedirs(self._dir, exist_ok=True)
            self._file = os.path.join(self._dir, "run-%d-%d.json" % (os.getpid(), id(self)))

    # ----------------------------------------------------------------- recording

    def _entry(self, task: Any) -> Optional[Dict[str, Any]]:
        if not self._dir or task is None:
            return None
        path = relative(task.get_path())
        if path is None:
            return None
        entry = self._tasks.setdefault(path, {"name": task.get_name(), "ran": 0, "ok": 0, "failed": 0, "skipped": 0,
                                              "checked": 0, "checked_by": {},
                                              "failures": {}, "failure_messages": {}, "conditions": {}})
        if "action" not in entry:
            entry["action"] = str(getattr(task, "resolved_action", None) or getattr(task, "action", "") or "")
        return entry

    def _checked_by(self, result: Any) -> list:
        """Why a result was only checked: "check_mode", "audit", both or neither."""
        why = []
        if effective_check_mode(result):
            why.append("check_mode")
        try:
            audit = audit_from_play(self._play, result_task(result))
        except Exception:  # noqa: BLE001 (never break the run for the coverage's sake)
            audit = False
        if audit:
            why.append("audit")
        return why

    def _seen(self, task: Any, result: Optional[Dict[str, Any]], ran: bool, failed: bool = False,
              checked: Optional[list] = None) -> None:
        with self._lock:
            self._seen_locked(task, result, ran, failed, checked or [])

    def _seen_locked(self, task: Any, result: Optional[Dict[str, Any]], ran: bool, failed: bool,
                     checked: list) -> None:
        entry = self._entry(task)
        if entry is None:
            return
        conds = conditions(task)
        false = (result or {}).get("false_condition") if not ran else None
        if ran:
            entry["ran"] += 1
        else:
            entry["skipped"] += 1
        if ran and failed:
            entry["failed"] += 1
            kind = failure_kind(result)
            entry["failures"][kind] = entry["failures"].get(kind, 0) + 1
            msg = failure_message(result)
            kept = entry["failure_messages"].setdefault(kind, [])
            if msg not in kept and len(kept) < MESSAGES_KEPT:
                kept.append(msg)
            if kind != "task":
                self._write()
                return  # a condition or a template raised: nothing is known of the conditions' truth
        elif ran:
            entry["ok"] += 1
            if checked:
                entry["checked"] = entry.get("checked", 0) + 1
                by = entry.setdefault("checked_by", {})
                for why in checked:
                    by[why] = by.get(why, 0) + 1
        for cond in conds:
            counts = entry["conditions"].setdefault(cond, {"true": 0, "false": 0})
            if ran:
                counts["true"] += 1
                continue
            if false is None:
                break  # skipped for another reason (a tag, check mode, an end_host): nothing was evaluated
            if cond == str(false):
                counts["false"] += 1
                break
            counts["true"] += 1
        self._write()

    def _write(self, force: bool = False) -> None:
        """The file, rewritten whole: at most every WRITE_EVERY seconds while a task's results come in (a
        run of 30 hosts gave 30 results a task, each a rewrite of some 35 kB, 3 ms), then before the
        next task starts and at the run's end. A run killed mid-way keeps all but its last task's
        results of the last fraction of a second."""
        if not self._file:
            return
        now = time.monotonic()
        if not force and now - self._written_at < WRITE_EVERY:
            self._dirty = True
            return
        self._written_at, self._dirty = now, False
        with self._lock:  # item results are recorded on the results thread, the others on the main one
            tmp = self._file + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"tasks": self._tasks}, fh, sort_keys=True)
            os.replace(tmp, self._file)

    # ----------------------------------------------------------------- events

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._play = play

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        with self._lock:
            self._entry(task)
        if self._dirty:
            # The last task's results, before this one runs (it may be the one a run is killed in).
            self._write(force=True)

    def v2_runner_on_ok(self, result: Any) -> None:
        if not result._result.get("results"):
            self._seen(result._task, result._result, ran=True, checked=self._checked_by(result))

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not result._result.get("results"):
            self._seen(result._task, result._result, ran=True, failed=True)

    def v2_runner_on_skipped(self, result: Any) -> None:
        if not result._result.get("results"):
            self._seen(result._task, skipped_result(result), ran=False)

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._seen(result._task, result._result, ran=True, checked=self._checked_by(result))

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._seen(result._task, result._result, ran=True, failed=True)

    def v2_runner_item_on_skipped(self, result: Any) -> None:
        self._seen(result._task, skipped_result(result), ran=False)

    def v2_playbook_on_include(self, included_file: Any) -> None:
        # The include task itself ran on these hosts (include_tasks, include_role).
        for _host in getattr(included_file, "_hosts", []) or [None]:
            self._seen(included_file._task, None, ran=True)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._write(force=True)
