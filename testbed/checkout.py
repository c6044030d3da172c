"""This checkout as the role and the modules see it, for the unit tests and for the
release scripts (scripts/check-all-releases, scripts/check-cuda-graph-replay).

The checkout is the collection fleetops.sglang (scripts/bootstrap links it into
collections/); modules import their module_utils by the collection's name, so
``importable()`` puts a collections path holding that link on sys.path. The patch
hunks are the engine's own data (plugins/module_utils/_patches.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def collections_path() -> Path:
    """A collections path on which ansible_collections.fleetops.sglang is this checkout."""
    for base in (REPO / "collections", REPO / ".cache" / "test-collections"):
        link = base / "ansible_collections" / "fleetops" / "sglang"
        if link.resolve() == REPO:
            return base
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(REPO, target_is_directory=True)
    return base


def importable() -> Path:
    """Make ``ansible_collections.fleetops.sglang`` importable; the collections path used."""
    path = collections_path()
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    return path
