"""Which of this scenario's cases run on which distribution (docs/docsite/rst/guide_tests.rst).

On Debian 12 the ssh scenario covers the SSH path in full: test_ssh_distro.py runs only where
MOLECULE_DISTRO is not bookworm. Elsewhere the cases that do not depend on the distribution
run on Debian 12 only: the token grep through remediate, --check, audit and rollback (the
role's no_log and file modes are the same on every distribution; test_ssh_distro.py checks
owners and modes over SSH there). Dropped cases are deselected (reported so), not skipped, and
each split is listed with its reason in testbed/skips.yml: scripts/test's skip policy fails the
verifier on any deselection that list does not name, so a new split here needs its entry there.
"""
from __future__ import annotations

import os

# Debian 12 only.
DISTRO_INDEPENDENT = {"test_a_token_reaches_only_the_0600_environment_file"}


def pytest_collection_modifyitems(config, items):
    if os.environ.get("MOLECULE_DISTRO", "bookworm") == "bookworm":
        dropped = [item for item in items if item.fspath.basename == "test_ssh_distro.py"]
    else:
        # originalname: testinfra parametrizes each test by host ("name[ansible://host]").
        dropped = [item for item in items if getattr(item, "originalname", item.name) in DISTRO_INDEPENDENT]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
