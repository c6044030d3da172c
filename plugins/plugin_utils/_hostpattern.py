# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet playbooks' host pattern: one rule for every playbook and for the report (controller only).

Ansible reads a host pattern by one rule (``ansible.inventory.manager.split_host_pattern``): a list
is a list of terms; a string with a comma is split on commas only (so ``a:b,c`` is the terms ``a:b``
and ``c``); any other string is split on colons, IPv6 addresses and ranges (``web[1:3]``) kept whole.
A pattern built by gluing ``:!sglang_maintenance`` onto the user's comma list turned its last host
into ``gpu-2:!sglang_maintenance``, which matches nothing: a host silently dropped. So the terms are
taken by Ansible's own rule and joined with commas, which Ansible splits back into the same terms.
"""

from __future__ import annotations

from typing import Any, Iterable, List

from ansible.inventory.manager import split_host_pattern
from ansible_collections.fleetops.sglang.plugins.plugin_utils._rows import MAINTENANCE_GROUP


def terms(pattern: Any) -> List[str]:
    """The terms of a host pattern (a string or a list of them), split as Ansible splits it."""
    if pattern is None:
        return []
    if isinstance(pattern, (list, tuple)):
        return [t for p in pattern for t in terms(p)]
    return [t for t in split_host_pattern(str(pattern)) if t]


def exclusions(skip_hosts: Iterable[str]) -> List[str]:
    """The terms the fleet playbooks add: the maintenance group's and each known-out host's exclusion."""
    return ["!" + MAINTENANCE_GROUP] + ["!" + h for h in skip_hosts]


def fleet_pattern(target: Any, skip_hosts: Iterable[str]) -> str:
    """``target``'s terms, then the exclusions, joined with commas (one term each for Ansible)."""
    return ",".join(terms(target) + exclusions(skip_hosts))


def without_exclusions(pattern: Any, skip_hosts: Iterable[str]) -> List[str]:
    """The terms of a fleet pattern without the exclusions fleet_pattern added: what the user targeted."""
    added = set(exclusions(skip_hosts))
    return [t for t in terms(pattern) if t not in added]
