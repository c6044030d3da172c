# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit memo: the last audit's verdict, keyed on everything it read.

An audit of the same bytes by the same engine with the same request gives the
same answer, so the probe of a compliant host need not parse ~10k lines of
SGLang again on every rerun. The memo is keyed on everything the audit reads
(``audit_inputs`` lists it; tests/unit/plugins/module_utils/test_memo.py proves the audit opens
nothing else) plus the source of every engine file (``ENGINE_MODULES``) and the
interpreter: change one byte of any of them and the audit runs in full again.
Standard library only (hosts run python3 3.9 to 3.13).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Dict, List, Optional

from ansible_collections.fleetops.sglang.plugins.module_utils import _anchors
from ansible_collections.fleetops.sglang.plugins.module_utils import _anchors_table
from ansible_collections.fleetops.sglang.plugins.module_utils import _distribution
from ansible_collections.fleetops.sglang.plugins.module_utils import _eagle3 as _engine
from ansible_collections.fleetops.sglang.plugins.module_utils import _fileio
from ansible_collections.fleetops.sglang.plugins.module_utils import _hunks
from ansible_collections.fleetops.sglang.plugins.module_utils import _patches
from ansible_collections.fleetops.sglang.plugins.module_utils import _sandbox
from ansible_collections.fleetops.sglang.plugins.module_utils import _families
from ansible_collections.fleetops.sglang.plugins.module_utils import _speculative
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_code
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_harness
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_model
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_standins
from ansible_collections.fleetops.sglang.plugins.module_utils import _verify
from ansible_collections.fleetops.sglang.plugins.module_utils._eagle3 import Request, run
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write, module_source, sha256_hex
from ansible_collections.fleetops.sglang.plugins.module_utils._families import validate_layer_ids

# 2: the key hashes every engine file, not only the one the engine used to be.
AUDIT_MEMO_VERSION = 2

# Every file whose code decides an audit's verdict, this one included; a new engine
# file joins here (tests/unit/plugins/module_utils/test_memo.py checks the list against the imports).
ENGINE_MODULES = (_anchors, _anchors_table, _distribution, _fileio, _hunks, _patches, _families, _speculative, _verify, _forward,
                  _sandbox, _forward_code, _forward_standins, _forward_model, _forward_harness, _engine, sys.modules[__name__])


def engine_source_digest() -> Optional[str]:
    """sha256 over the source of every engine file; None if one cannot be read."""
    h = hashlib.sha256()
    for module in ENGINE_MODULES:
        source = module_source(module)
        if source is None:
            return None
        h.update(("%s=%s\n" % (module.__name__.rsplit(".", 1)[-1], sha256_hex(source))).encode("utf-8"))
    return h.hexdigest()


def audit_inputs(venv: str) -> List[str]:
    """The paths an audit of ``venv`` reads, in order (the files may not exist)."""
    # The release as _distribution's one reader finds it, then the files the engine reads (patches, or
    # checks against the published wheel: _anchors.FILES).
    return _distribution.installation_inputs(venv, _anchors.FILES)


def audit_key(req: Request) -> Optional[str]:
    """sha256 over the audit's inputs, or None when they cannot be pinned down."""
    engine = engine_source_digest()
    if engine is None:
        return None
    try:
        ids = validate_layer_ids(req.layer_ids)
    except ValueError:
        return None
    # The release the venv resolves to: sglang_venv (the switch, a link) and the release directory it
    # points at are one audit (the patch step runs on the directory, the probe on the link).
    venv = os.path.realpath(req.venv)
    h = hashlib.sha256()
    h.update(repr((AUDIT_MEMO_VERSION, sys.version, engine, venv, ids,
                   sorted(req.patches.items()), req.pipeline_parallel_size, req.backup_dir,
                   json.dumps(req.anchors, sort_keys=True))).encode("utf-8"))
    for path in audit_inputs(venv):
        if path.startswith("glob:"):
            h.update(path.encode("utf-8"))
            continue
        try:
            with open(path, "rb") as fh:
                digest = sha256_hex(fh.read())
        except FileNotFoundError:
            digest = "missing"
        except OSError:
            return None  # unreadable: the full audit reports why
        h.update(("%s=%s\n" % (path, digest)).encode("utf-8"))
    return h.hexdigest()


def audit_memoized(req: Request, memo_file: Optional[str], write: bool) -> Dict[str, Any]:
    """``run(req)`` for state=audit, answered from ``memo_file`` when its key still holds.

    The result carries ``memo``: ``hit``, ``miss`` (computed, and stored when
    ``write``) or ``off`` (no memo file, or inputs that cannot be keyed). After a
    miss it also carries ``memo_key`` for ``store_audit_memo``, unless an input
    changed while the audit ran. A memo that cannot be read or written only costs
    the full audit.
    """
    if req.state != "audit":
        raise ValueError("only audits are memoized")
    key = audit_key(req) if memo_file else None
    if key is None:
        result = run(req)
        result["memo"] = "off"
        return result
    try:
        with open(memo_file, encoding="utf-8") as fh:
            memo = json.load(fh)
        if isinstance(memo, dict) and memo.get("key") == key and isinstance(memo.get("result"), dict):
            result = memo["result"]
            result["memo"] = "hit"
            return result
    except (OSError, ValueError):
        pass
    result = run(req)
    result["memo"] = "miss"
    # An error (unreadable file, broken install) is not a verdict on the bytes, and
    # bytes that changed during the audit have no single verdict: neither is stored.
    if not result["failed"] and audit_key(req) == key:
        result["memo_key"] = key
        if write:
            store_audit_memo(memo_file, result)
    return result


def store_audit_memo(memo_file: str, result: Dict[str, Any]) -> bool:
    """Store a missed audit (with its ``memo_key``) in ``memo_file``; False when it cannot."""
    key = result.get("memo_key")
    if not key or result.get("memo") != "miss":
        return False
    stored = {k: v for k, v in result.items() if k not in ("memo", "memo_key")}
    try:
        # Key order kept: the role's fingerprint prints the companion dict as Python does.
        atomic_write(memo_file, json.dumps({"key": key, "result": stored}), mode=0o644, dir_mode=0o755)
    except OSError:
        return False
    return True
