# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The play recap's counts per host as JSON, for the verifiers that drive ansible-playbook.

A test instrument, not part of the collection: scenario_helpers puts this directory
on ANSIBLE_CALLBACK_PLUGINS for the runs it starts. It needs no enabling, so the
run keeps its own stdout callback and callbacks_enabled (the output the tests read
for messages and diffs is unchanged), and it is silent unless SGLANG_TEST_STATS_FILE
names a file: then, at the end of the run, it writes {"hosts": {host: {ok, changed,
unreachable, failed, skipped, rescued, ignored}}} there, the numbers of PLAY RECAP.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: run_stats
type: aggregate
short_description: Write the play recap's per-host counts to the JSON file SGLANG_TEST_STATS_FILE names
description:
  - At the end of the run, writes the per-host counts of the play recap to the file named by the
    E(SGLANG_TEST_STATS_FILE) environment variable; without it the callback does nothing.
author:
  - SGLang remediation maintainers (@fleetops)
"""

import json
import os
from typing import Any, Dict

from ansible.plugins.callback import CallbackBase

# AggregateStats.summarize() says "failures" where the recap prints "failed".
_RECAP_NAMES = {"failures": "failed"}


def recap(stats: Any) -> Dict[str, Dict[str, int]]:
    """Every host the run processed, with the counts its recap line shows."""
    out: Dict[str, Dict[str, int]] = {}
    for host in sorted(stats.processed):
        out[host] = {_RECAP_NAMES.get(k, k): int(v) for k, v in stats.summarize(host).items()}
    return out


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "run_stats"
    # Loaded from its directory without callbacks_enabled, so that enabling it cannot
    # replace the callbacks the run's own ansible.cfg enables.
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_stats(self, stats: Any) -> None:
        path = os.environ.get("SGLANG_TEST_STATS_FILE")
        if not path:
            return
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"hosts": recap(stats)}, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
