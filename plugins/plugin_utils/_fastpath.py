# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fast path's controller-side pieces, for the sglang_probe action plugin.

A compliant host ends at its probe; everything the controller needs for it (the
report row, built by _rows.probe_row; whether it joins the rollout) is
computed in that one task, in the controller's own process, instead of one forked
worker per host and task. Pure functions: the action plugin passes the probe's
result and the role's values.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def ends_here(probe, fast_path):
    """Whether the host is done after its probe (the fast path is on and it is compliant)."""
    return bool(fast_path) and bool(probe.get("compliant"))
