"""On Debian 12 the ssh scenario covers the SSH path in full; elsewhere this scenario takes it.

test_ssh_distro.py runs only where MOLECULE_DISTRO is not bookworm: its cases are deselected
(reported so), not skipped, on Debian 12.
"""
from __future__ import annotations

import os


def pytest_collection_modifyitems(config, items):
    if os.environ.get("MOLECULE_DISTRO", "bookworm") != "bookworm":
        return
    dropped = [item for item in items if item.fspath.basename == "test_ssh_distro.py"]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
