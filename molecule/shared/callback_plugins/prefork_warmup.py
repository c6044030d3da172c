# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's pre-fork warm-up in every ansible-playbook of the test suite.

A test instrument, loaded like run_stats.py from this directory (no enabling needed). The collection's
report callback (fleetops.sglang.sglang_report) warms the controller's main process up before the first
worker forks (plugins/plugin_utils/_prefork.py says what and why); Molecule's runs of the role enable
no report, so this does the same for them, with the same function: one source for what is loaded.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: prefork_warmup
type: aggregate
short_description: Load the Jinja plugins and the collection's filters once, before the workers fork
description:
  - Calls the collection's C(_prefork.warm_up) at the start of every playbook run.
author:
  - SGLang remediation maintainers (@fleetops)
"""

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "prefork_warmup"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_start(self, playbook):
        from ansible_collections.fleetops.sglang.plugins.plugin_utils._prefork import warm_up

        warm_up()
