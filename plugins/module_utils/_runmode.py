# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run does, in one vocabulary: the report rows' ``mode``, the textfile's mode label
(sglang_metrics, and sglang_probe for a run that ends at the probe) and the fleet report's
run mode (plugins/callback/sglang_report.py).

The mode follows from two variables the playbooks set, never from a playbook's file
name: ``sglang_audit`` (playbooks/audit.yml's plays) and ``_sglang_rollback_run``
(playbooks/rollback.yml's play, and tasks/rollback.yml's report). Check mode is a flag
of its own (the row's ``check_mode``), not a mode: a ``--check`` remediation is still
a remediation. Standard library only (hosts import it, under python3 3.9 to 3.13).
"""

from __future__ import annotations

REMEDIATE = "remediate"
AUDIT = "audit"
ROLLBACK = "rollback"
RUN_MODES = (REMEDIATE, AUDIT, ROLLBACK)
# Not a run's: the host's own audit timer (_hostaudit) writes the textfile with this mode.
TIMER = "timer"


def run_mode(audit: bool, rollback: bool = False) -> str:
    """The run's mode from ``sglang_audit`` and ``_sglang_rollback_run``: a rollback is one even in an audit."""
    if rollback:
        return ROLLBACK
    return AUDIT if audit else REMEDIATE
