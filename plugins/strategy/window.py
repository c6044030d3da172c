# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sliding window of playbooks/remediate.yml's rollout: the free strategy, with slots.

Each host runs its tasks as under ansible.builtin.free (no host waits for the others), except at
five kinds of task, marked by the task variable ``_sglang_window``:

- ``admit``: where a host starts its work. It starts once fewer hosts are preparing than the free
  slots plus the lookahead (plugin_utils/_rollout.py, Window.may_admit).
- ``take``: where a host leaves rotation (the transaction's first step). It waits there until a
  slot is free; a take whose ``when`` is false needs none and is let through at once.
- ``sleep``: a task that runs ``_sglang_window_sleep`` seconds after the host reached it, the host
  parked meanwhile without a slot or a fork (a soak's read); one whose ``when`` is false runs at once.
- ``join``: where the nodes of one multi-node replica (a unit of the window, more than one host) meet:
  a node waits there until every other node of its unit in the play's batch waits at a join too, or
  has ended (failed, unreachable, done). Then the nodes waiting at the lowest
  ``_sglang_window_join_order`` go on together, each with the host variable ``_sglang_window_joined``:
  ``{join, with, missing}``, ``missing`` naming the nodes that did not reach that join (ended, or
  waiting at a later one: a node on its way to undo). A host of one node, and a join whose ``when``
  is false, passes at once.
- ``signal``: a set_fact of ``_sglang_window_signal`` that gives the slot back (``back``), keeps it
  for a host left out of rotation (``out``), counts a failure (``failed``) or stops the rollout
  (``stop``).

A stopped window (the failure limit, a failed canary or soak, the stop file) lets every waiting host
through with the host variable ``_sglang_window_stopped`` set to the reason: the role's next task
fails it before it changes anything (admit) or before it leaves rotation (take), and its change set
is put back. A put-back (``_sglang_window_putback`` true) still waits for a free slot and gets it.

The rule (slots, units, failures, stop) is plugin_utils/_rollout.py's Window; this file only hands
out the slots. Its state lives per play across the play's serial batches (the canaries, then the
rest). Holding a host marks it blocked in the strategy's own table, as a host with a task in flight
is, so it keeps no fork.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: window
short_description: The free strategy, with a sliding window of hosts out of rotation
version_added: "2.1.0"
description:
  - Runs each host's tasks as P(ansible.builtin.free#strategy) does, except that a host waits, without holding a
    fork, at the tasks that mark where it starts its work and where it leaves rotation, until the play's window has
    room. When a host is back in rotation and healthy, the next one leaves.
  - The window is the play variable C(sglang_rollout_window), the C(window) of the
    P(fleetops.sglang.rollout_plan#filter) filter, with C(stop_file) added. C(playbooks/remediate.yml) sets it.
  - Without a C(stop_file), the stop file is C(STOP) in the report directory of the
    P(fleetops.sglang.sglang_report#callback) callback, where it is enabled; else there is none.
  - The rollout stops handing out work when more than C(max_failures) hosts failed, when a canary failed, when a
    soak failed, or when the stop file exists. Hosts already out of rotation finish, or are put back.
  - It reads private attributes of ansible-core's strategy (the blocked-hosts table, the callback plugins) and
    wraps the play iterator's C(get_next_task_for_host); it was written for ansible-core 2.21.
author:
  - SGLang remediation maintainers (@fleetops)
"""

import os
import time

from ansible.errors import AnsibleError
from ansible.executor.play_iterator import IteratingStates
from ansible.plugins.strategy.free import StrategyModule as FreeStrategyModule
from ansible.utils.display import Display

from ansible_collections.fleetops.sglang.plugins.plugin_utils._rollout import Window

try:
    from ansible._internal._templating._engine import TemplateEngine
except ImportError:  # pragma: no cover - other ansible-core layouts
    from ansible.template import Templar as TemplateEngine

display = Display()

# The task variable that marks a window task, and its kinds.
WINDOW_VAR = "_sglang_window"
PUTBACK_VAR = "_sglang_window_putback"
SLEEP_VAR = "_sglang_window_sleep"
SIGNAL_VAR = "_sglang_window_signal"
JOIN_VAR = "_sglang_window_join"
JOIN_ORDER_VAR = "_sglang_window_join_order"
# Set on the nodes a join lets go: which of their unit's nodes met there.
JOINED_VAR = "_sglang_window_joined"
# Set on a host let through a stopped window: the role fails it, naming the reason.
STOPPED_VAR = "_sglang_window_stopped"
# The play variable that holds the window (playbooks/remediate.yml).
PLAY_VAR = "sglang_rollout_window"
# How often the stop file is looked for.
STOP_FILE_INTERVAL = 1.0

# One state per play, across its serial batches (a new strategy object runs each batch).
_STATES = {}


class WindowState:
    """A play's window: the rule, plus what the strategy keeps around it."""

    def __init__(self, doc):
        self.doc = dict(doc)
        self.rule = Window(int(doc.get("size") or 1), int(doc.get("max_failures") or 0),
                           doc.get("lookahead"), [str(h) for h in doc.get("canaries") or []],
                           [str(h) for h in doc.get("kept_out") or []], doc.get("units") or {})
        self.stop_file = str(doc.get("stop_file") or "")
        self.decisions = {}
        # The nodes waiting at a join: host -> (order, join); and those a join let go, with what they learn.
        self.joins = {}
        self.joined = {}
        self.stop_checked = 0.0
        self.events = []
        self.started = time.time()

    def event(self, host, what):
        self.events.append({"t": round(time.time() - self.started, 3), "host": host, "event": what,
                            "in_use": self.rule.in_use()})


def state_of(play):
    return _STATES.get(play._uuid)


class StrategyModule(FreeStrategyModule):

    def run(self, iterator, play_context):
        play = iterator._play
        self._window = _STATES.get(play._uuid)
        if self._window is None:
            doc = self._window_doc(play)
            # The forks this run has bound the window whatever the plan read from the configuration (-f).
            # (A batch gets min(forks, its size) workers: the canaries' batch says nothing of the forks.)
            doc["forks"] = int(getattr(self._tqm, "_forks", 0) or len(self._workers))
            doc["size"] = max(min(int(doc.get("size") or 1), doc["forks"]), 1)
            self._window = _STATES[play._uuid] = WindowState(doc)
            self._announce()
        real_next = iterator.get_next_task_for_host

        def next_task(host, peek=False):
            state, task = real_next(host, peek=peek)
            if peek and task is not None:
                name = host.get_name()
                held = name in self._window.decisions or name in self._window.joins
                # A host with a task in flight is blocked by the free strategy itself: not ours to judge.
                if self._blocked_hosts.get(name, False) and not held:
                    return state, task
                self._blocked_hosts[name] = not self._let_go(iterator, host, task)
            return state, task

        iterator.get_next_task_for_host = next_task
        try:
            return super(StrategyModule, self).run(iterator, play_context)
        finally:
            del iterator.get_next_task_for_host

    # --- the window's configuration -----------------------------------------------
    def _window_doc(self, play):
        variables = self._variable_manager.get_vars(play=play)
        if PLAY_VAR not in variables:
            raise AnsibleError("the fleetops.sglang.window strategy needs the play variable %s (the window of the "
                               "fleetops.sglang.rollout_plan filter): playbooks/remediate.yml sets it" % PLAY_VAR)
        try:
            doc = TemplateEngine(loader=self._loader, variables=variables).template(variables[PLAY_VAR])
        except Exception as exc:
            raise AnsibleError("the play variable %s could not be read: %s" % (PLAY_VAR, exc)) from exc
        if not isinstance(doc, dict) or "size" not in doc:
            raise AnsibleError("the play variable %s=%r is not a window (size, max_failures, lookahead, canaries)"
                               % (PLAY_VAR, doc))
        return doc

    def _announce(self):
        doc = self._window.doc
        plugins = list(getattr(self._tqm, "_callback_plugins", []))
        if not self._window.stop_file:
            # sglang_rollout_stop_file unset: STOP in the report directory (the report callback's).
            found = [p.stop_file() for p in plugins if callable(getattr(p, "stop_file", None))]
            self._window.stop_file = next((f for f in found if f), "")
            doc["stop_file"] = self._window.stop_file or None
        forks = doc["forks"]
        bound = " (the forks: %d of a budget of %s)" % (forks, doc.get("budget")) if doc.get("size") == forks and \
            forks < int(doc.get("budget") or 0) else ""
        display.display("window: up to %s host(s) out of rotation at once%s, %s more preparing; canaries %s; the "
                        "rollout stops after %s failed host(s)%s" % (
                            doc.get("size"), bound, self._window.rule.lookahead,
                            ", ".join(doc.get("canaries") or []) or "none", int(doc.get("max_failures") or 0) + 1,
                            ", or when %s exists" % self._window.stop_file if self._window.stop_file else ""))
        for plugin in plugins:
            started = getattr(plugin, "window_started", None)
            if callable(started):
                started(self._window)

    # --- holding and letting go ------------------------------------------------------
    def _stop_file(self):
        state = self._window
        now = time.monotonic()
        if state.stop_file and state.rule.stopped is None and now - state.stop_checked >= STOP_FILE_INTERVAL:
            state.stop_checked = now
            if os.path.exists(state.stop_file):
                self._stop("the stop file %s exists (remove it before the next run)" % state.stop_file)

    def _stop(self, reason):
        rule = self._window.rule
        if rule.stopped is None:
            rule.stop(reason)
            self._window.event(None, "stopped: %s" % reason)
            display.warning("window: the rollout stops handing out hosts: %s. Hosts out of rotation finish, or are "
                            "put back." % reason)

    def _let_go(self, iterator, host, task):
        """Whether ``host`` may run ``task`` now; False holds it (blocked, no fork)."""
        state, name = self._window, host.get_name()
        kind = (getattr(task, "vars", None) or {}).get(WINDOW_VAR)
        if kind not in ("admit", "take", "sleep", "join"):
            return True
        decision = state.decisions.get(name)
        if decision is None or decision[0] != task._uuid:
            decision = state.decisions[name] = (task._uuid,) + self._decide(iterator, host, task, kind)
        if kind == "sleep":
            if decision[1] and time.monotonic() < decision[2]:
                return False
            del state.decisions[name]
            return True
        if kind == "join":
            if decision[1] and not self._join(iterator, name, decision[2], decision[3]):
                return False
            if not decision[1]:
                # Nobody to meet (a host of one node, or its when false): nobody missing either; a join that could
                # not be judged misses every other node.
                missing = [h for h in self._members(name) if h != name] if decision[2] == -1 else []
                self._variable_manager.set_host_variable(name, JOINED_VAR, {"join": None, "with": [name],
                                                                            "missing": missing})
            del state.decisions[name]
            return True
        self._stop_file()
        rule = state.rule
        needed, putback = decision[1], decision[2]
        if kind == "admit":
            if not rule.may_admit(name):
                return False
            if rule.stopped is not None:
                self._variable_manager.set_host_variable(name, STOPPED_VAR, rule.stopped)
            else:
                rule.admit(name)
        elif needed:
            if not rule.may_take(name, putback):
                return False
            if rule.take(name, putback):
                state.event(name, "out")
                display.display("window: %s leaves rotation (%d of %d slot(s) in use)"
                                % (name, rule.in_use(), rule.size))
            else:
                self._variable_manager.set_host_variable(name, STOPPED_VAR, rule.stopped)
        del state.decisions[name]
        return True

    def _decide(self, iterator, host, task, kind):
        """What a window task asks of ``host``, judged once when the host reaches it: (needed, putback) of a take,
        a take whose when is false needing no slot; (parked, until) of a sleep, one whose when is false not parked."""
        if kind == "admit":
            return True, False
        if kind == "join" and len(self._members(host.get_name())) < 2:
            return False, 0, ""
        try:
            variables = self._variable_manager.get_vars(play=iterator._play, host=host, task=task,
                                                        _hosts=self._hosts_cache, _hosts_all=self._hosts_cache_all)
            self.add_tqm_variables(variables, play=iterator._play)
            engine = TemplateEngine(loader=self._loader, variables=variables)
            needed = all(engine.evaluate_conditional(c) for c in (task.when or []))
            if kind == "join":
                # Its order and name may be templated (an included task file's parameters).
                order = int(engine.template(task.vars.get(JOIN_ORDER_VAR)) or 0) if needed else 0
                return needed, order, str(engine.template(task.vars.get(JOIN_VAR)) or task.get_name())
            if kind == "sleep":
                seconds = float(engine.template(task.vars.get(SLEEP_VAR)) or 0) if needed else 0.0
                return seconds > 0, time.monotonic() + seconds
            putback = bool(engine.template(task.vars[PUTBACK_VAR])) if PUTBACK_VAR in task.vars else False
            return needed, putback
        except Exception as exc:  # a take waits for a slot, the budget holding whatever went wrong; a sleep runs
            display.warning("window: %s: could not judge %r (%s); %s"
                            % (host.get_name(), task.get_name(), exc,
                               "it runs without its wait" if kind == "sleep" else "it waits for a slot"))
            if kind == "join":
                # Let through (held, it would hold its replica for ever), with every other node missing: the
                # role's next task then fails it before it changes anything more.
                return False, -1, ""
            return (False, 0.0) if kind == "sleep" else (True, False)

    # --- the nodes of a replica meeting ---------------------------------------------
    def _members(self, name):
        """The hosts of ``name``'s unit in the play's batch, itself included."""
        unit = self._window.rule.unit_of(name)
        return [h for h in self._hosts_cache if self._window.rule.unit_of(h) == unit]

    def _ended(self, iterator, name):
        if name in self._tqm._unreachable_hosts or name in self._tqm._failed_hosts:
            return True
        host = self._inventory.get_host(name)
        if host is None or iterator.is_failed(host):
            return True
        return iterator.get_state_for_host(name).run_state == IteratingStates.COMPLETE

    def _join(self, iterator, name, order, join):
        """Whether ``name`` may go on past its join (``order``, ``join``): see the module's docstring."""
        state = self._window
        if name in state.joined:
            self._variable_manager.set_host_variable(name, JOINED_VAR, state.joined.pop(name))
            return True
        state.joins[name] = (int(order), str(join))
        members = self._members(name)
        live = [h for h in members if h == name or not self._ended(iterator, h)]
        if any(h not in state.joins for h in live):
            return False
        order = min(state.joins[h][0] for h in live)
        group = [h for h in live if state.joins[h][0] == order]
        join = state.joins[name][1] if name in group else state.joins[group[0]][1]
        missing = [h for h in members if h not in group]
        for host in group:
            del state.joins[host]
            state.joined[host] = {"join": join, "with": group, "missing": missing}
        state.event(",".join(group), "joined %s%s" % (join, " without %s" % ", ".join(missing) if missing else ""))
        display.display("window: %s meet at %s%s" % (" and ".join(group), join,
                                                     "; not there: %s" % ", ".join(missing) if missing else ""))
        if name not in state.joined:
            return False
        self._variable_manager.set_host_variable(name, JOINED_VAR, state.joined.pop(name))
        return True

    # --- what the hosts say -------------------------------------------------------
    def _process_pending_results(self, iterator, one_pass=False, max_passes=None):
        results = super(StrategyModule, self)._process_pending_results(
            iterator, one_pass=one_pass, max_passes=max_passes)
        for result in results:
            self._observe(result)
        return results

    def _signal_of(self, result, name):
        changes = getattr(getattr(result.utr, "pending_changes", None), "register_host_variables", None) or {}
        for variables in changes.values():
            if SIGNAL_VAR in variables:
                return variables[SIGNAL_VAR]
        cache = getattr(self._variable_manager, "_nonpersistent_fact_cache", {}) or {}
        return (cache.get(name) or {}).get(SIGNAL_VAR)

    def _observe(self, result):
        state = self._window
        rule, name, task = state.rule, result.host.get_name(), result.task
        kind = (getattr(task, "vars", None) or {}).get(WINDOW_VAR)
        if result.utr.unreachable:
            if rule.holds(name):
                rule.keep_out(name)
            rule.fail(name)
            state.event(name, "unreachable")
            self._said_stop()
            return
        if kind == "take" and result.utr.skipped:
            # An undo keeps the slot its run took until the transaction says the host is back.
            rule.skip(name)
            return
        if kind != "signal" or result.utr.skipped or result.utr.failed:
            return
        signal = self._signal_of(result, name)
        signal = dict(signal) if isinstance(signal, dict) else {}
        # The reason given first: a failed soak stops as such, not as the failure it also counts.
        if signal.get("stop"):
            self._stop(str(signal["stop"]))
        if signal.get("failed"):
            rule.fail(name)
            state.event(name, "failed")
        if signal.get("out") and rule.holds(name):
            rule.keep_out(name)
            state.event(name, "kept out")
            display.display("window: %s stays out of rotation, its slot kept (%d of %d in use)"
                            % (name, rule.in_use(), rule.size))
        if signal.get("back"):
            holding = rule.holds(name)
            rule.back(name)
            if holding:
                state.event(name, "back")
                display.display("window: %s is back in rotation (%d of %d slot(s) in use)"
                                % (name, rule.in_use(), rule.size))
        self._said_stop()

    def _said_stop(self):
        rule = self._window.rule
        if rule.stopped is not None and not any(e["event"].startswith("stopped") for e in self._window.events):
            self._window.event(None, "stopped: %s" % rule.stopped)
            display.warning("window: the rollout stops handing out hosts: %s. Hosts out of rotation finish, or are "
                            "put back." % rule.stopped)
