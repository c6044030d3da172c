# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a running SGLang server was started from: fingerprint hashing and comparison.

Shared by the ``sglang_fingerprint`` module (which compares, and records after a
rollback), the ``sglang_gate`` module (which records once the restart passed its
gate, in the same call) and the ``sglang_probe`` module (which compares as part of
its one-call compliance check), so all hash a component in exactly the same way. Standard library only; must run
under any host ``python3`` from 3.9.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write


# The components whose files hold secrets: the environment file (tokens) and the API keys' file. A plain
# sha256 of such a file in a run's output, an AWX job event or a report would let whoever reads it guess
# a short key offline, so it is never shown (shown()), and the controller's sha256 of their renderings
# reaches the probe in a no_log argument (sglang_probe's secret_sha256). The hashes stay where only root
# reads them: the fingerprint file (0600 in a 0700 directory).
SECRET_COMPONENTS = ("environment", "api_keys")
HIDDEN = "not shown: the file holds credentials"


def shown(fingerprint: Dict[str, Any]) -> Dict[str, Any]:
    """``fingerprint`` (component -> sha256) as an output may show it: a secret-bearing file's hash hidden,
    whether it exists kept."""
    return {name: (HIDDEN if name in SECRET_COMPONENTS and value != "missing" else value)
            for name, value in (fingerprint or {}).items()}


def split_secret(files: Dict[str, Dict[str, Any]]) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, str]]:
    """``files`` (name -> {path, sha256}) as the probe takes them: the sha256 of each secret-bearing file moved
    out, into the second dict (name -> sha256: its no_log argument)."""
    shown_files, secret = {}, {}  # type: Dict[str, Dict[str, Any]], Dict[str, str]
    for name, spec in (files or {}).items():
        spec = dict(spec or {})
        if name in SECRET_COMPONENTS and spec.get("sha256"):
            secret[name] = str(spec.pop("sha256"))
        shown_files[name] = spec
    return shown_files, secret


def tree_digest(directory: str) -> str:
    """sha256 of a directory's entries (name, size, modification time in whole seconds, links followed):
    what a server that reads the directory was started from, without reading gigabytes of weights.
    'missing' when absent. Whole seconds: a copy that keeps times (an image layer's tar, rsync -t, some
    network file systems) keeps no more than that, and must not read as a new export."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return "missing"
    lines = []
    for name in names:
        try:
            st = os.stat(os.path.join(directory, name))
            lines.append("%s\t%d\t%d\n" % (name, st.st_size, int(st.st_mtime)))
        except FileNotFoundError:
            lines.append("%s\tdangling\n" % name)
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def component_hash(spec: str) -> str:
    """sha256 of a file, of a literal value (``value:<text>``), of a directory's entries (``tree:<dir>``,
    tree_digest), or 'missing' for an absent file."""
    if spec.startswith("value:"):
        return hashlib.sha256(spec[len("value:"):].encode()).hexdigest()
    if spec.startswith("tree:"):
        return tree_digest(spec[len("tree:"):])
    try:
        with open(spec, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except FileNotFoundError:
        return "missing"


def current_fingerprint(components: Dict[str, Any]) -> Dict[str, str]:
    """Component name to its hash now."""
    return {name: component_hash(str(spec)) for name, spec in components.items()}


def load_recorded(path: str) -> Dict[str, Any]:
    """The recorded fingerprint file, or {} when absent or unreadable."""
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def record(path: str, components: Dict[str, Any], check_mode: bool = False, merge: bool = False) -> bool:
    """Record the fingerprint of what runs now (after a healthy start); True when it changed.

    ``merge``: only the components the record already holds among ``components`` are taken again (the
    rest is kept): a server restarted on files put back, but for the keys a run wrote (keys go forward
    only, _changeset), runs those keys. Private to root: 0600 in a 0700 directory. Check mode only says
    whether it would change.
    """
    recorded = load_recorded(path).get("components")
    current = current_fingerprint(components)
    if merge:
        if not isinstance(recorded, dict):
            return False
        current = dict(recorded, **{name: value for name, value in current.items() if name in recorded})
    if recorded == current:
        return False
    if not check_mode:
        atomic_write(path, json.dumps({"components": current, "recorded_at": int(time.time())}, indent=2,
                                      sort_keys=True) + "\n", mode=0o600, dir_mode=0o700)
    return True


def changed_components(current: Dict[str, str], recorded: Dict[str, Any]) -> Optional[List[str]]:
    """Names of the components that differ from the last healthy start, sorted;
    None when no healthy start has been recorded at all."""
    before = recorded.get("components")
    if not before:
        return None
    return [name for name in sorted(set(current) | set(before)) if current.get(name) != before.get(name)]


def describe(changed: Optional[List[str]], active: bool) -> List[str]:
    """The reasons to restart, as the operator reads them; empty when what runs is what should run."""
    if changed is None:
        reasons = ["no healthy start has been recorded for this configuration"]
    else:
        reasons = ["%s changed since the last healthy start" % name for name in changed]
    if not active:
        reasons.append("the service is not active")
    return reasons


def service_active(name: str, run_command: Callable[[List[str]], Tuple[int, str, str]],
                   which: Callable[[str], Optional[str]]) -> bool:
    """``systemctl is-active --quiet``; False when systemctl itself is absent.

    ``run_command`` and ``which`` are the module's (AnsibleModule.run_command,
    get_bin_path), so the logic here stays free of Ansible imports.
    """
    systemctl = which("systemctl")
    if not systemctl:
        return False
    return run_command([systemctl, "is-active", "--quiet", name])[0] == 0
