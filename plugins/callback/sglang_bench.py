# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Count, per host, the tasks that executed a module on the host (for bench/run.py).

Silent unless SGLANG_BENCH_OUT names a file: then it writes {host: {remote, local,
changed, memo}} there at the end of the run (memo: how sglang_probe's audit was
answered, hit, miss or off; null without a probe). Tasks whose action runs only on the
controller (set_fact, assert, debug, meta, includes, argument validation) are
counted as local; every other task that ran (ok, changed or failed, not skipped)
executed a module on the host, once per loop item and once per `until` attempt.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_bench
type: aggregate
short_description: Count remote module executions per host for the benchmark
version_added: "1.0.0"
description:
  - Counts, per host, the task executions that ran a module on the host (C(remote)), those whose action
    runs only on the controller (C(local), also C(delegate_to=localhost)), the tasks that changed something,
    and how M(fleetops.sglang.sglang_probe) answered its audit (C(memo) V(hit), V(miss) or V(off); V(null) without a probe).
  - A loop counts once per item that was not skipped and an C(until) once per attempt.
  - At the end of the run it writes one JSON object, host name to C(remote), C(local), C(changed) and C(memo),
    to the file named by the E(SGLANG_BENCH_OUT) environment variable; without it the callback does nothing.
author:
  - SGLang remediation maintainers (@fleetops)
requirements:
  - Enable it with C(callbacks_enabled = fleetops.sglang.sglang_bench) in the C([defaults]) section of C(ansible.cfg),
    or with C(ANSIBLE_CALLBACKS_ENABLED=fleetops.sglang.sglang_bench) in the environment.
  - E(SGLANG_BENCH_OUT) set to the output file (read directly from the environment, not a configuration option).
"""

import json
import os
from collections import defaultdict

from ansible.plugins.callback import CallbackBase

LOCAL_ACTIONS = {
    "set_fact", "assert", "debug", "meta", "include_tasks", "import_tasks", "include_role",
    "import_role", "fail", "validate_argument_spec", "add_host", "group_by", "include_vars",
    "pause", "set_stats",
}


def _short(action: str) -> str:
    return action.rsplit(".", 1)[-1]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang_bench"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.out = os.environ.get("SGLANG_BENCH_OUT")
        self.counts: dict = defaultdict(lambda: {"remote": 0, "local": 0, "changed": 0, "memo": None})

    def _count(self, result, changed: bool, executions: int = 0) -> None:
        if not self.out:
            return
        host = result._host.get_name()
        kind = "local" if _short(result._task.action) in LOCAL_ACTIONS else "remote"
        # delegate_to localhost runs on the controller too.
        if result._task.delegate_to in ("localhost", "127.0.0.1"):
            kind = "local"
        if not executions:
            # A loop ran the module once per item that was not skipped.
            items = result._result.get("results")
            executions = 1
            if isinstance(items, list):
                executions = sum(1 for r in items
                                 if not (isinstance(r, dict) and (r.get("skipped") or "skip_reason" in r)))
        self.counts[host][kind] += executions
        if changed:
            self.counts[host]["changed"] += 1

    def v2_runner_retry(self, result) -> None:
        # Each attempt an `until` repeats is one more execution.
        self._count(result, False, executions=1)

    def v2_runner_on_ok(self, result) -> None:
        self._count(result, bool(result._result.get("changed")))
        if self.out and _short(result._task.action) == "sglang_probe":
            # hit, miss or off: whether the probe answered from its audit memo.
            self.counts[result._host.get_name()]["memo"] = (result._result.get("eagle3") or {}).get("memo")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._count(result, False)

    def v2_playbook_on_stats(self, stats) -> None:
        if self.out:
            with open(self.out, "w") as fh:
                json.dump(self.counts, fh, indent=1, sort_keys=True)
