# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is the installed release the one its publisher shipped? The supply chain's anchor outside the package.

The package's own ``RECORD`` says what pip installed, and the engine classifies every file against it
(pristine, ours, drift). A tampered package ships a ``RECORD`` that matches its tampered files, so that
alone proves nothing. ``_anchors_table.UPSTREAM`` holds, for every release the collection knows, the sha256
of each file the engine patches or verifies (``FILES``), computed by ``scripts/anchors`` from the bytes of
the published wheels. ``check`` runs before any decision: the release must be anchored, its ``RECORD``
must say what the wheel holds for each of these files, and a file the engine executes but never patches
must hold those bytes itself (a patched file is tied to ``RECORD`` by the engine's own classification).

``sglang_release_anchors`` (the modules' ``anchors``) adds releases the collection does not know yet, in
the same shape (``scripts/anchors VERSION`` prints it); it cannot change a release the collection anchors.
Standard library only (hosts run python3 3.9 to 3.13).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.fleetops.sglang.plugins.module_utils._anchors_table import UPSTREAM
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import TARGET_FILES, Installation, Refusal
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import sha256_hex
from ansible_collections.fleetops.sglang.plugins.module_utils._forward_code import FORWARD_FILES

# Every file the engine patches (TARGET_FILES) or executes in its forward check (FORWARD_FILES).
FILES = tuple(sorted(set(TARGET_FILES) | set(FORWARD_FILES)))
# The oldest release scripts/anchors writes into the table.
OLDEST = "0.5.4"
VAR = "sglang_release_anchors"
_HEX = re.compile(r"^[0-9a-f]{64}$")


def extra_errors(extra: Any) -> List[str]:
    """What is wrong with a user's additions (``sglang_release_anchors``), each naming the entry and the fix."""
    if extra in (None, {}):
        return []
    if not isinstance(extra, Mapping):
        return ["%s must be a mapping of release -> {file: sha256 or null}, got %s" % (VAR, type(extra).__name__)]
    errors = []
    for version, files in extra.items():
        where = "%s[%r]" % (VAR, version)
        if not isinstance(files, Mapping):
            errors.append("%s must map each of %s to its sha256 (null: not shipped), got %s"
                          % (where, ", ".join(FILES), type(files).__name__))
            continue
        unknown = sorted(set(files) - set(FILES))
        missing = [rel for rel in FILES if rel not in files]
        if unknown:
            errors.append("%s: %s not a file the role patches or verifies (%s)"
                          % (where, ", ".join(unknown), ", ".join(FILES)))
        if missing:
            errors.append("%s: missing %s (null when the release does not ship it; scripts/anchors %s prints "
                          "the whole entry)" % (where, ", ".join(missing), version))
        bad = sorted(rel for rel, value in files.items() if value is not None and not _HEX.match(str(value)))
        if bad:
            errors.append("%s: %s must be a lowercase hex sha256 (64 characters) or null" % (where, ", ".join(bad)))
        shipped = UPSTREAM.get(str(version))
        if shipped is not None and not unknown and not missing and not bad and _normal(files) != shipped:
            errors.append("%s: sglang %s is anchored by the collection, and this entry differs from the "
                          "published wheel's hashes; remove it" % (where, version))
    return errors


def _normal(files: Mapping[str, Optional[str]]) -> Dict[str, str]:
    return {rel: str(value) for rel, value in files.items() if value is not None}


def anchors_for(version: str, extra: Optional[Mapping[str, Any]] = None) -> Optional[Dict[str, str]]:
    """The published hashes of ``version`` (file -> sha256; a file not shipped is absent), or None."""
    if version in UPSTREAM:
        return UPSTREAM[version]
    if extra and isinstance(extra.get(version), Mapping):
        return _normal(extra[version])
    return None


def known() -> str:
    """The anchored releases, as an operator reads them."""
    versions = list(UPSTREAM)
    return "%s .. %s (%d releases)" % (versions[0], versions[-1], len(versions)) if versions else "none"


def check(inst: Installation, extra: Optional[Mapping[str, Any]] = None) -> None:
    """Raise Refusal unless ``inst`` is the release its publisher shipped, for every file in FILES."""
    errors = extra_errors(extra)
    if errors:
        raise Refusal("; ".join(errors))
    anchor = anchors_for(inst.version, extra)
    if anchor is None:
        raise Refusal(
            "no published sha256 of its files is known (the collection anchors %s): a package the role cannot "
            "tell from a tampered one is neither patched nor called compliant; pin an anchored release "
            "(sglang_version), or add %s's hashes from its published wheel to %s (scripts/anchors %s prints "
            "them)" % (known(), inst.version, VAR, inst.version))
    problems = []
    for rel in FILES:
        want, recorded = anchor.get(rel), inst.record.get(rel)
        path = inst.path(rel)
        try:
            with open(path, "rb") as fh:
                data: Optional[bytes] = fh.read()
        except FileNotFoundError:
            data = None
        if want is None:
            if data is not None or recorded is not None:
                problems.append("%s: the published wheel has no such file, this install has one" % rel)
            continue
        if data is None:
            problems.append("%s: missing (the published wheel ships it)" % rel)
        elif recorded != want:
            problems.append("%s: RECORD says sha256 %s, the published wheel's file is %s" % (rel, recorded, want))
        elif rel not in TARGET_FILES and sha256_hex(data) != want:
            # A file the engine never patches must be the wheel's bytes themselves.
            problems.append("%s: sha256 %s, the published wheel's file is %s" % (rel, sha256_hex(data), want))
    if problems:
        raise Refusal("not the package its publisher shipped for sglang %s (%s): %s; reinstall it from a "
                      "trusted index or wheelhouse" % (inst.version, inst.site_packages, "; ".join(problems)))
