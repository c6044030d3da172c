# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible.builtin.linear, except that the controller waits on its workers instead of polling them.

When every fork is busy, the linear strategy's _queue_task loops over the workers asking
each whether it is alive, sleeping 0.1 ms per round: the controller's main process keeps
one core busy for as long as the hosts outnumber the forks. On a compliant fleet's probe
pass that loop was the largest entry of the controller's profile (bench/RESULTS.md). This
strategy blocks on the workers' process sentinels (a descriptor that becomes readable when
the process ends) until one exits, serving the workers' requests to the controller every
5 ms meanwhile, then queues the task exactly as the linear strategy does.

The same holds at the end of every task, while the last hosts' results are awaited: the
base strategy's _wait_on_pending_results reads the results and sleeps 1 ms per round, about
4 % of a core for as long as any host runs a task. Here the round waits on the busy workers'
sentinels, or 5 ms when none is left and a result is still on its way.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: linear_blocking
short_description: The linear strategy, with no busy wait for a free fork
version_added: "2.1.0"
description:
  - Runs tasks exactly as P(ansible.builtin.linear#strategy) (the default strategy) does, host by host in lockstep,
    with the same results, handlers, C(serial), C(throttle) and failure handling. It is that strategy, with one
    step changed.
  - When every fork is busy, the linear strategy polls the workers in a loop that keeps one controller core busy
    until a fork is free. This strategy sleeps on the workers' process sentinels instead, waking when one ends
    (and every 5 ms to serve the workers' requests to the controller).
  - The same wait replaces the loop in which the linear strategy awaits the results of a task's last hosts,
    which reads the results queue every millisecond for as long as any host runs the task.
  - The controller's CPU time drops by the time it would have spent polling, which grows with the number of hosts
    per fork and with how long each host's task takes. Select it with C(strategy = fleetops.sglang.linear_blocking)
    in the C([defaults]) section of C(ansible.cfg), or the C(strategy) keyword of a play.
  - It reads private attributes of ansible-core's strategy and task queue manager (there is no public API for the
    wait). Where one is missing (an ansible-core it was not tested on) it warns once, naming them, and runs as
    P(ansible.builtin.linear#strategy).
author:
  - SGLang remediation maintainers (@fleetops)
"""

import time
from multiprocessing.connection import wait

from ansible.errors import AnsibleError
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.utils.display import Display

# ansible-core's private strategy and queue-manager attributes this strategy reads (2.21; there is
# no public API for a strategy's wait). Where one is missing the strategy says so once and runs as
# ansible.builtin.linear: same results, only the busy wait is back.
PRIVATE_STRATEGY = ("_workers", "_pending_results", "_process_rpc_queue", "_process_pending_results",
                    "_wait_on_pending_results", "_queue_task")
PRIVATE_TQM = ("_terminated", "has_dead_workers")

# How often the workers' requests to the controller are served while the controller waits on them.
RPC_INTERVAL = 0.005


def wait_on(busy):
    """Sleep until one of the ``busy`` workers ends, or RPC_INTERVAL has passed."""
    if busy:
        wait([w.sentinel for w in busy], timeout=RPC_INTERVAL)
    else:
        time.sleep(RPC_INTERVAL)


def busy_workers(workers):
    """The workers that still run a task (None: a slot never used)."""
    return [w for w in workers if w is not None and w.is_alive()]


def missing_private_api(strategy):
    """The private attributes this strategy reads that ``strategy`` (an initialised linear strategy) lacks."""
    tqm = getattr(strategy, "_tqm", None)
    return (["StrategyBase.%s" % a for a in PRIVATE_STRATEGY if not hasattr(strategy, a)]
            + ["TaskQueueManager.%s" % a for a in PRIVATE_TQM if not hasattr(tqm, a)])


class StrategyModule(LinearStrategyModule):
    """ansible.builtin.linear with a blocking wait for a free fork."""

    # True where ansible-core lacks what the wait reads: then this is the linear strategy.
    _as_linear = False

    def __init__(self, tqm):
        super().__init__(tqm)
        missing = missing_private_api(self)
        if missing:
            self._as_linear = True
            Display().warning("fleetops.sglang.linear_blocking: this ansible-core has no %s; running as "
                              "ansible.builtin.linear (the same results, with its busy wait for a fork). "
                              "meta/runtime.yml says which releases the collection is tested on."
                              % ", ".join(missing))

    def _wait_for_free_fork(self, task):
        """Return once a fork is free (the linear strategy's own loop then takes it at once).

        A throttled task keeps the linear strategy's loop: its limit is a share of the forks.
        """
        if self._as_linear or getattr(task, "throttle", 0):
            return
        while not self._tqm._terminated:
            busy = busy_workers(self._workers)
            if len(busy) < len(self._workers):
                return
            self._process_rpc_queue()
            wait_on(busy)

    def _wait_on_pending_results(self, iterator):
        """The base strategy's loop (results read, dead workers refused), waiting on the workers between rounds."""
        if self._as_linear:
            return super()._wait_on_pending_results(iterator)
        results = []
        while self._pending_results > 0 and not self._tqm._terminated:
            if self._tqm.has_dead_workers():
                raise AnsibleError("A worker was found in a dead state")
            results.extend(self._process_pending_results(iterator))
            if self._pending_results > 0:
                wait_on(busy_workers(self._workers))
        return results

    def _queue_task(self, host, task, task_vars, play_context):
        self._wait_for_free_fork(task)
        return super()._queue_task(host, task, task_vars, play_context)
