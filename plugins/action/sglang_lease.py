# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of fleetops.sglang.sglang_lease: who holds it, how long to wait, dead holders.

Only the controller knows which run it is (run id, host name, user, the
ansible-playbook process) and whether a holder that came from this same
controller still exists, so those parts live here; the host side only reads and
writes the lease file under its guard.
"""
from __future__ import annotations

import getpass
import os
import socket
import time
from typing import Any, Dict, Optional

from ansible.plugins.action import ActionBase
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import describe, held_message, process_started, run_id_of

# Each waiting call returns after this many seconds, so that the controller can look
# again whether a holder from this controller has gone in the meantime.
WAIT_SLICE = 10


def local_process_gone(pid: Any, started: Any) -> bool:
    """Whether a holder's controller process no longer exists here (or the pid was reused)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    now_started = process_started(pid)
    try:
        return now_started is not None and started is not None and abs(now_started - float(started)) > 2
    except (TypeError, ValueError):
        return False


def controller_holder() -> Dict[str, Any]:
    """This run as a lease holder: the ansible-playbook process the workers were forked from."""
    pid = os.getppid()
    started = process_started(pid)
    # The same id the fleet report records for this run (run.id), from the same process: no channel.
    run_id = run_id_of(pid, started)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"run_id": run_id, "controller": socket.gethostname(), "user": user, "pid": pid,
            "started": started if started is not None else time.time()}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def _call(self, args: Dict[str, Any], task_vars: Dict[str, Any]) -> Dict[str, Any]:
        return self._execute_module(module_name="fleetops.sglang.sglang_lease", module_args=args,
                                    task_vars=task_vars)

    def run(self, tmp: Optional[str] = None, task_vars: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        state = args.get("state", "acquired")
        timeout = int(args.get("timeout", 300))
        me = dict(args.get("holder") or {}) or controller_holder()
        args["holder"] = me

        if state != "acquired" or self._task.check_mode:
            # In check mode even a release only reads (the module would not write either).
            call_state = state if state in ("released", "broken") and not self._task.check_mode else "inspect"
            res = self._call(dict(args, state=call_state), task_vars)
            if res.get("held_by_other") and state not in ("released", "broken"):
                # Through the display: a result's "warnings" take Ansible's own objects, not strings.
                self._display.warning("%s: another run holds this host's lease: %s. Audits and check mode neither "
                                      "take nor wait for it, so what this run read may be in the middle of that "
                                      "run's changes." % (task_vars.get("inventory_hostname", "host"),
                                                          res.get("holder_text")))
            result.update(res)
            return result

        started = time.monotonic()
        takeover = ""
        wait = 0
        while True:
            res = self._call(dict(args, wait=wait, takeover=takeover), task_vars)
            if res.get("failed") or res.get("acquired"):
                result.update(res)
                return result
            holder = res.get("holder") or {}
            waited = time.monotonic() - started
            if (holder.get("controller") == me["controller"] and holder.get("pid") != me["pid"]
                    and local_process_gone(holder.get("pid"), holder.get("started"))):
                # Retried at once with takeover: the module warns which holder it replaced.
                takeover, wait = str(holder.get("run_id")), 0
                continue
            takeover = ""
            if waited >= timeout:
                result.update(res)
                result.update(failed=True, msg=held_message(holder, waited, time.time()))
                return result
            if wait == 0:
                self._display.display("%s: waiting up to %ds for the lease held by %s" % (
                    task_vars.get("inventory_hostname", "host"), timeout, describe(holder, time.time())))
            wait = int(min(WAIT_SLICE, max(1, timeout - waited)))
