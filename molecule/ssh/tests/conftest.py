"""On a distribution other than Debian 12, run only the cases that depend on it.

test_ssh.EVERY_DISTRO names them: converge, rerun, --check --diff, a flag change and a
rollback, over SSH with both kinds of sudo. The rest (leases, an unreachable host, a
cut connection) exercise Ansible's and the role's own logic, which no distribution
changes; they are deselected (reported so), not skipped.
"""
from __future__ import annotations

import os

from test_ssh import EVERY_DISTRO


def pytest_collection_modifyitems(config, items):
    if os.environ.get("MOLECULE_DISTRO", "bookworm") == "bookworm":
        return
    keep = [item for item in items if item.originalname in EVERY_DISTRO]
    dropped = [item for item in items if item.originalname not in EVERY_DISTRO]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
