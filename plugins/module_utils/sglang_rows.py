# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's rows, read as data (plain dicts, no Ansible objects).

Each host's row is the ``sglang_remediation`` fact the role sets (tasks/probe.yml
on the fast path, tasks/report.yml otherwise). Functions here take rows as
plain dicts so the playbooks' filters, an action plugin and the tests share them.
Standard library only.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional


def is_true(value: Any) -> bool:
    """A row's flag as Ansible's ``bool`` filter reads it (a fact given with -e is a string)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1", "y", "t")
    return bool(value)


def noncompliant(rows: Mapping[str, Optional[Mapping[str, Any]]]) -> List[str]:
    """One line per host whose row is not compliant (or that has no row): what drifted and the error.

    ``rows`` maps each host of the play, in play order, to its row (None or {} when
    the host never set one). playbooks/audit.yml fails the run on any line.
    """
    out: List[str] = []
    for host, row in rows.items():
        row = row or {}
        if is_true(row.get("compliant", False)):
            continue
        drift = "; ".join(str(d) for d in row.get("drift") or [])
        out.append("%s is not compliant: %s %s" % (host, drift, row.get("error") or ""))
    return out


def by_host(hosts: List[str], rows: List[Optional[Mapping[str, Any]]]) -> Dict[str, Any]:
    """Hosts and their rows zipped, in play order (the filter's two inputs)."""
    return dict(zip(hosts, rows))
