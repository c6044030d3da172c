# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast path's controller-side pieces, for the sglang_probe action plugin.

A compliant host ends at its probe; everything the controller needs for it (the
report row, whether it joins the rollout) is computed in that one task, in the
controller's own process, instead of one forked worker per host and task. Pure
functions: the action plugin passes the probe's result and the role's values.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The group the probe play puts a host in when it needs more than the probe; the
# rollout play (serial, canary, max-fail) runs on it alone.
NEEDS_WORK_GROUP = "sglang_needs_work"


def run_mode(audit, check_mode):
    """The report's mode column: audit, check or apply."""
    if audit:
        return "audit"
    return "check" if check_mode else "apply"


def compliant_row(host, probe, speculative_flags, audit=False, check_mode=False):
    """The fleet report's row (the sglang_remediation fact) of a host that ends at its probe.

    Its files are as they should be (the run ends here); what the running server shows
    (the live reading's reasons) decides whether it is compliant.
    """
    eagle3 = probe.get("eagle3") or {}
    live = probe.get("live") or {}
    reasons = list(live.get("reasons") or [])
    return {
        "host": host,
        "release": probe.get("release"),
        "decision": probe.get("decision"),
        "family": eagle3.get("family") or "",
        "compliant": not reasons,
        "file_state_before": eagle3.get("file_state_before") or "",
        "sha256_before": eagle3.get("sha256_before") or "",
        "sha256_after": eagle3.get("sha256_after") or "",
        "evidence": [e.get("line") for e in eagle3.get("evidence") or [] if isinstance(e, dict)],
        "draft_layer_ids": probe.get("draft_layer_ids"),
        "speculative_flags": dict(speculative_flags),
        "restart_needed": False,
        "restart_reasons": [],
        "restarted": False,
        "rolled_back": False,
        "health": "not checked",
        "accept_length": None,
        "tokens_per_s": None,
        "check_mode": bool(check_mode),
        "mode": run_mode(audit, check_mode),
        "drift": reasons,
        "live": probe.get("live"),
        "textfile": probe.get("textfile"),
        "error": "",
    }


def ends_here(probe, fast_path):
    """Whether the host is done after its probe (the fast path is on and it is compliant)."""
    return bool(fast_path) and bool(probe.get("compliant"))
