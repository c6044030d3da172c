"""CPU seconds per test: what the suite's budget is made of, where pytest's --durations gives wall time.

Loaded with ``-p sglang_cpu`` (scripts/test does, for the unit tests). Each test's setup, call and
teardown are charged with the CPU the pytest process and its reaped children used meanwhile
(user + system, os.times()): a subprocess a test runs and waits for counts to that test; a
session fixture's long-lived process (a zygote, a server) counts where it is reaped, at its
fixture's teardown. On a 2-core machine that runs other jobs beside pytest, wall times measure
the contention more than the test; CPU seconds do not.

With ``SGLANG_TEST_CPU_FILE`` set, the figures are written there as JSON ({nodeid: seconds}); the
terminal summary lists the costliest 15 and the total.
"""
from __future__ import annotations

import json
import os
from typing import Dict

import pytest

TOP = 15


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuPerTest:
    def __init__(self) -> None:
        self.spent: Dict[str, float] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        start = _cpu()
        yield
        self.spent[item.nodeid] = self.spent.get(item.nodeid, 0.0) + _cpu() - start

    def pytest_sessionfinish(self, session) -> None:
        path = os.environ.get("SGLANG_TEST_CPU_FILE")
        if path:
            with open(path, "w") as fh:
                json.dump({k: round(v, 2) for k, v in sorted(self.spent.items())}, fh, indent=1)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.spent:
            return
        terminalreporter.section("costliest %d tests by CPU seconds (the process and its reaped children)" % TOP)
        for nodeid, seconds in sorted(self.spent.items(), key=lambda kv: -kv[1])[:TOP]:
            terminalreporter.write_line("%8.1f  %s" % (seconds, nodeid))
        terminalreporter.write_line("%8.1f  in all, %d tests" % (sum(self.spent.values()), len(self.spent)))


def pytest_configure(config) -> None:
    config.pluginmanager.register(CpuPerTest(), "sglang_cpu_per_test")
