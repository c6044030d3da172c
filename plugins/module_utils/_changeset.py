# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One change set per run: what a remediating run replaced on a host, and putting it back.

A run that writes opens a change set first (``open_set``), before its first write.
It records, in ``<state_dir>/changes/<id>/``, everything the run may replace:

* the release that served (``sglang_venv``'s link to a release directory, see ``_releases``), and
  the release directories the run builds (``note_release``);
* every configuration file the run writes (the draft's ``config.json``, the unit,
  the environment file, the fingerprint of what runs, the pinned requirement): its
  bytes, owner, mode and sha256, or that it did not exist;
* what exists only to be listed if the run created it (directories, the service
  account) and whether the service was active and enabled.

``restore_set`` puts the files back newest entry first, then switches the link back to the
release that served (no package index: that release is still on the host, sealed) and removes
the releases the run built. A release is never written once sealed, so nothing inside one is put
back. ``close_set`` ends a run that reached its gates (or needed none): a set that changed
nothing is discarded, so the rollback playbook never "restores" a no-op run.

Blobs are root's, 0600, in 0700 directories (the environment file holds secrets);
the newest ``keep`` sets are kept. Standard library only (hosts run python3 3.9+).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import (
    DEEPSEEK_FILE, EngineError, NotInstalled, Installation, find_installation,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write, sha256_hex
from ansible_collections.fleetops.sglang.plugins.module_utils import _releases

CHANGES_DIR = "changes"
MANIFEST = "manifest.json"
# A set's state: open while its run goes on; closed once the run's change stands (gated, or no
# restart needed); kept when its run failed and left its change in place for a person
# (sglang_rollback_on_failure=false); interrupted when a later run found it still open (its run
# died); restored once put back (by the run's own undo or by the rollback playbook).
APPLIED = ("closed", "kept", "interrupted")


class RestoreError(EngineError):
    """A restore that could not finish; the message says what is in place, ``restored`` what was
    put back before it stopped."""

    def __init__(self, msg: str, restored: Optional[List[str]] = None, left: Optional[List[str]] = None,
                 files: Optional[List[Dict[str, Any]]] = None) -> None:
        super().__init__(msg)
        self.restored = list(restored or [])
        self.files = list(files or [])
        self.left = list(left or [])


# ------------------------------------------------------------------ layout


def changes_root(state_dir: str) -> str:
    return os.path.join(state_dir, CHANGES_DIR)


def _ids(root: str) -> List[str]:
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted((n for n in names if n.isdigit() and os.path.isfile(os.path.join(root, n, MANIFEST))), key=int)


def load(set_dir: str) -> Dict[str, Any]:
    with open(os.path.join(set_dir, MANIFEST)) as fh:
        return json.load(fh)


def _save(set_dir: str, manifest: Dict[str, Any]) -> None:
    atomic_write(os.path.join(set_dir, MANIFEST), json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                 mode=0o600, durable=True)


def _names(uid: int, gid: int) -> str:
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return "%s:%s" % (user, group)


def _file_entry(set_dir: str, path: str, by: str, manifest: Dict[str, Any]) -> Dict[str, Any]:
    """What ``path`` is now, with its bytes kept as a blob (0600) when it exists."""
    entry: Dict[str, Any] = {"kind": "file", "path": path, "by": by, "existed": False}
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return entry
    if not stat.S_ISREG(st.st_mode):
        raise EngineError("%s is not a regular file: a change set keeps regular files only" % path)
    with open(path, "rb") as fh:
        data = fh.read()
    manifest["blobs"] = manifest.get("blobs", 0) + 1
    blob = "blob-%d" % manifest["blobs"]
    atomic_write(os.path.join(set_dir, blob), data, mode=0o600)
    entry.update(existed=True, sha256=sha256_hex(data), mode="%04o" % stat.S_IMODE(st.st_mode),
                 uid=st.st_uid, gid=st.st_gid, owner=_names(st.st_uid, st.st_gid), blob=blob)
    return entry


def _exists(path: str) -> bool:
    return os.path.lexists(path)


# ------------------------------------------------------------------ open


def open_set(state_dir: str, run_id: str, files: List[str], venv: str, dirs: List[str], user: str, group: str, service: Dict[str, bool], keep: int = 5,
             now: Callable[[], float] = time.time, forward: Sequence[str] = ()) -> Dict[str, Any]:
    """Open this run's change set and record what it may replace; returns its manifest, its directory
    (``dir``) and the release found in the venv (``release``: None where no SGLang is installed).

    ``forward``: files among ``files`` that go forward only (the API keys): their older bytes are never
    put back over newer ones (``restore_set``)."""
    root = changes_root(state_dir)
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    ids = _ids(root)
    for old in ids:
        manifest = load(os.path.join(root, old))
        if manifest.get("state") == "open":
            manifest["state"] = "interrupted"
            _save(os.path.join(root, old), manifest)
    new_id = "%06d" % (int(ids[-1]) + 1 if ids else 1)
    set_dir = os.path.join(root, new_id)
    os.makedirs(set_dir, mode=0o700)
    entries: List[Dict[str, Any]] = []
    manifest: Dict[str, Any] = {"id": new_id, "run_id": run_id, "opened": int(now()), "state": "open",
                                "service": dict(service), "entries": entries, "blobs": 0}
    # The switch of staged releases (sglang_venv, a link): the release that served before this run, put
    # back by pointing the link at it again (no pip). An in-place venv (2.x) is recorded as it is; the
    # run's adoption (``adopted``) then names the release directory it became.
    state = _releases.switch_state(venv)
    entries.append({"kind": "switch", "venv": venv, "target": state["target"] if state["kind"] == "link" else None,
                    "in_place": state["kind"] == "dir", "version": _installed_version(venv), "built": []})
    for path in files:
        entry = _file_entry(set_dir, path, "open", manifest)
        if path in forward:
            entry["forward"] = True
        entries.append(entry)
    for path in dirs:
        entries.append({"kind": "dir", "path": path, "existed": _exists(path)})
    entries.append({"kind": "account", "user": user, "group": group,
                    "user_existed": _account_exists(pwd.getpwnam, user),
                    "group_existed": _account_exists(grp.getgrnam, group)})
    _save(set_dir, manifest)
    _prune(root, keep)
    return dict(manifest, dir=set_dir, release=entries[0]["version"])


def _account_exists(lookup: Callable[[str], Any], name: str) -> bool:
    try:
        lookup(name)
        return True
    except KeyError:
        return False


def _prune(root: str, keep: int) -> List[str]:
    """Remove all but the newest ``keep`` sets (never an open one)."""
    removed = []
    ids = _ids(root)
    for old in ids[:-keep] if keep > 0 else []:
        set_dir = os.path.join(root, old)
        if load(set_dir).get("state") == "open":
            continue
        shutil.rmtree(set_dir)
        removed.append(old)
    return removed


def _switch_entry(manifest: Dict[str, Any]) -> Dict[str, Any]:
    entry = next((e for e in manifest["entries"] if e.get("kind") == "switch"), None)
    if entry is None:
        raise EngineError("change set %s records no release switch" % manifest.get("id"))
    return entry


def note_release(set_dir: str, adopted: Optional[str] = None, built: Optional[str] = None) -> None:
    """Record, in the open set, the release directory an in-place venv became (``adopted``: what served
    before the run, switched back to by an undo) or one this run builds (``built``: removed by an undo)."""
    manifest = load(set_dir)
    if manifest.get("state") != "open":
        raise EngineError("change set %s is %s, not open" % (set_dir, manifest.get("state")))
    entry = _switch_entry(manifest)
    if adopted:
        entry["target"] = adopted
    if built and built not in entry["built"]:
        entry["built"].append(built)
    _save(set_dir, manifest)


# ------------------------------------------------------------------ compare


def _current(path: str) -> Tuple[bool, Optional[str], Optional[str], Optional[Tuple[int, int]]]:
    """(exists, sha256, mode, (uid, gid)) of ``path`` now."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False, None, None, None
    with open(path, "rb") as fh:
        digest = sha256_hex(fh.read())
    return True, digest, "%04o" % stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)


def _differs(entry: Dict[str, Any]) -> bool:
    exists, digest, mode, ids = _current(entry["path"])
    if not entry["existed"]:
        return exists
    return not exists or digest != entry["sha256"] or mode != entry["mode"] or ids != (entry["uid"], entry["gid"])


def _installation(venv: str) -> Optional[Installation]:
    """The release in ``venv`` (RECORD unread: the set keeps the files themselves); None on a fresh host."""
    try:
        return find_installation(venv, record=False)
    except NotInstalled:
        return None


def _installed_version(venv: str) -> Optional[str]:
    inst = _installation(venv)
    return inst.version if inst is not None else None


def changes(manifest: Dict[str, Any]) -> List[str]:
    """What differs now from what the set recorded, as the report lists it."""
    out: List[str] = []
    for entry in manifest["entries"]:
        if entry["kind"] == "switch":
            now = _releases.switch_state(entry["venv"])
            if now["kind"] == "link" and now["target"] != entry["target"]:
                out.append("%s -> %s (was %s)" % (entry["venv"], now["target"], entry["target"] or "(none)"))
        elif entry["kind"] == "release":
            now = _installed_version(entry["venv"])
            if now != entry["version"]:
                out.append("sglang %s -> %s in %s" % (entry["version"] or "(none)", now or "(none)", entry["venv"]))
        elif entry["kind"] == "file" and entry["by"] == "open" and _differs(entry):
            exists, digest, mode, _ids_ = _current(entry["path"])
            before = _shown_digest(entry.get("sha256"), entry.get("mode"), 12) if entry["existed"] else "(absent)"
            after = _shown_digest(digest, mode, 12) if exists else "(absent)"
            out.append("%s %s -> %s" % (entry["path"], before or "(not shown)", after or "(not shown)"))
    return out


def close_set(set_dir: str, now: Callable[[], float] = time.time, state: str = "closed") -> Dict[str, Any]:
    """End the run's set as ``state`` (closed: its change stands; kept: its run failed and left the
    change in place) when it changed something; discarded when it changed nothing."""
    if state not in ("closed", "kept"):
        raise EngineError("a change set ends closed or kept, not %s" % state)
    manifest = load(set_dir)
    found = changes(manifest)
    if not found:
        shutil.rmtree(set_dir)
        return {"id": manifest["id"], "state": "discarded", "changes": []}
    manifest.update(state=state, closed=int(now()), changes=found)
    _save(set_dir, manifest)
    return {"id": manifest["id"], "state": state, "changes": found}


def newest_applied(state_dir: str) -> Optional[str]:
    """The set of the last run whose change stands (the rollback playbook's), or None."""
    root = changes_root(state_dir)
    for set_id in reversed(_ids(root)):
        set_dir = os.path.join(root, set_id)
        if load(set_dir).get("state") in APPLIED:
            return set_dir
    return None


def rollback_targets(state_dir: str) -> List[str]:
    """The releases the kept sets would switch back to: a prune must leave them."""
    root = changes_root(state_dir)
    out = []
    for set_id in _ids(root):
        for entry in load(os.path.join(root, set_id))["entries"]:
            if entry.get("kind") == "switch" and entry.get("target"):
                out.append(entry["target"])
    return out


# ------------------------------------------------------------------ restore


def _shown_digest(digest: Optional[str], mode: Any, length: int = 64) -> Optional[str]:
    """A file's sha256 as an output may show it: not for a file other users may not read (the environment
    file, the API keys' file: 0600, 0640), whose hash would let a reader guess a short secret offline."""
    if digest is None:
        return None
    try:
        readable = int(str(mode), 8) & 0o004
    except (TypeError, ValueError):
        readable = 0
    return digest[:length] if readable else None


def _put_back(set_dir: str, entry: Dict[str, Any], check_mode: bool) -> Optional[Tuple[str, Dict[str, Any]]]:
    """One file as the set recorded it: (the report line, the file's record), or None when it already is.

    The record (path, sha256, mode, owner; sha256 None for a file removed) is what callers
    read; the line is for people and may be reworded.
    """
    if not _differs(entry):
        return None
    path = entry["path"]
    if not entry["existed"]:
        if not check_mode:
            os.unlink(path)
        return ("%s removed (it did not exist before)" % path,
                {"path": path, "sha256": None, "mode": None, "owner": None})
    with open(os.path.join(set_dir, entry["blob"]), "rb") as fh:
        data = fh.read()
    if not check_mode:
        # Mode and owner set on the temp file, before the rename: no reader sees other ones.
        like = os.stat_result((int(entry["mode"], 8), 0, 0, 0, entry["uid"], entry["gid"], 0, 0, 0, 0))
        atomic_write(path, data, like=like, dir_mode=0o755, owner="strict", durable=True)
    digest = _shown_digest(entry["sha256"], entry["mode"])
    return ("%s restored to %s (%s %s)" % (path, "sha256 %s" % digest if digest else "its earlier content (its sha256 "
                                           "is not shown: other users may not read it)", entry["mode"], entry["owner"]),
            {"path": path, "sha256": digest, "mode": entry["mode"], "owner": entry["owner"]})


def _switch_back(entry: Dict[str, Any], check_mode: bool) -> List[Tuple[str, Optional[Dict[str, Any]]]]:
    """Point the venv's link at the release that served before the run (no package index: it is on the
    host, sealed or adopted), then remove the releases this run built. Raises RestoreError when that
    release is gone or no longer as sealed."""
    lines: List[str] = []
    now = _releases.switch_state(entry["venv"])
    target = entry.get("target")
    if target and now["target"] != target:
        marker = _releases.read_marker(target) or {}
        damaged = [] if marker.get("adopted") and not marker.get("id") and os.path.isdir(target) \
            else _releases.problems(target, marker)
        if damaged:
            msg = "could not switch %s back to %s, the release that served before the run: %s; %s still points at %s" % (
                entry["venv"], target, "; ".join(damaged), entry["venv"], now["target"] or "(nothing)")
            raise RestoreError(msg,
                               left=["%s -> %s (the release switched to by the failed run)" % (
                                   entry["venv"], now["target"])])
        if not check_mode:
            _releases.switch(entry["venv"], target)
        record = None
        sealed = (marker.get("files") or {}).get(DEEPSEEK_FILE)
        if sealed:
            site = find_installation(target, record=False).site_packages
            path = os.path.join(entry["venv"], os.path.relpath(site, target), DEEPSEEK_FILE)
            record = {"path": path, "sha256": sealed, "mode": None, "owner": None}
        lines.append(("%s switched back to %s (sglang %s)" % (entry["venv"], target, entry.get("version")), record))
    for built in entry.get("built") or []:
        if os.path.realpath(built) == (target or now["target"]) or not os.path.isdir(built):
            continue
        if not check_mode:
            _releases.remove_build(built)
        lines.append(("%s removed (built by this run)" % built, None))
    return lines


def _legacy_release(entry: Dict[str, Any]) -> None:
    """A set recorded by 2.x (the release in an in-place venv): nothing to do when that release still
    serves; a release change cannot be put back from it (that was a reinstall by pip)."""
    now_version = _installed_version(entry["venv"])
    if now_version != entry["version"]:
        raise RestoreError(
            "this change set was recorded by collection 2.x, before staged releases: it would put sglang %s back"
            " into %s by pip, which this collection no longer does (a release is switched to, never reinstalled"
            " in place). Pin sglang_version=%s and run playbooks/remediate.yml instead"
            % (entry["version"], entry["venv"], entry["version"]))


def restore_set(set_dir: str, check_mode: bool = False,
                now: Callable[[], float] = time.time) -> Dict[str, Any]:
    """Put back everything the set recorded, newest entry first; what was restored and left."""
    manifest = load(set_dir)
    restored: List[str] = []
    files: List[Dict[str, Any]] = []
    left: List[str] = []
    kept: List[str] = []
    entries = manifest["entries"]

    def put_back(entry):
        done = _put_back(set_dir, entry, check_mode)
        if done:
            restored.append(done[0])
            files.append(done[1])

    # The configuration first, newest entry first. A file a 2.x run's engine recorded inside its
    # in-place venv is left: that venv is a release now, and a release is never written.
    for entry in reversed(entries):
        if entry["kind"] == "file" and entry["by"] == "open":
            if entry.get("forward") and _differs(entry) and _current(entry["path"])[0]:
                # Keys go forward only: the run wrote this file, and the key it replaced (perhaps one
                # rotated away because it leaked) never comes back. A file the run removed, with none
                # newer, is put back: the unit put back names it.
                left.append("%s (this run's keys stay: keys go forward only, an older key is never put back)"
                            % entry["path"])
                kept.append(entry["path"])
                continue
            put_back(entry)
    for entry in entries:
        if entry["kind"] in ("switch", "release"):
            try:
                if entry["kind"] == "release":
                    _legacy_release(entry)
                else:
                    for line, record in _switch_back(entry, check_mode):
                        restored.append(line)
                        if record:
                            files.append(record)
            except RestoreError as exc:
                raise RestoreError(str(exc), restored, left + exc.left, files)
            link = _releases.switch_state(entry["venv"])
            if entry.get("kind") == "switch" and not entry.get("target") and not entry.get("in_place") \
                    and link["kind"] == "link":
                left.append("%s -> %s (installed by this run: nothing served before it)" % (
                    entry["venv"], link["target"]))
        elif entry["kind"] == "dir" and not entry["existed"] and _exists(entry["path"]):
            if not any(line.startswith(entry["path"] + " -> ") for line in left):
                left.append("%s (created by this run)" % entry["path"])
        elif entry["kind"] == "account":
            if not entry["user_existed"] and _account_exists(pwd.getpwnam, entry["user"]):
                left.append("user %s (created by this run)" % entry["user"])
            if not entry["group_existed"] and _account_exists(grp.getgrnam, entry["group"]):
                left.append("group %s (created by this run)" % entry["group"])
    if not check_mode:
        if manifest.get("state") == "open" and not restored and not left:
            # A failed run that had changed nothing (refused after the set was opened): the host
            # is as it was, and no set of it stays behind (as closing an unchanged set discards it).
            shutil.rmtree(set_dir)
        else:
            manifest.update(state="restored", restored_at=int(now()), restored_lines=restored, left=left)
            _save(set_dir, manifest)
    release = next((e["version"] for e in entries if e["kind"] in ("switch", "release")), None)
    return {"id": manifest["id"], "run_id": manifest.get("run_id"), "restored": restored, "files": files, "left": left,
            "forward_kept": kept,
            "service": manifest.get("service", {}), "release": release, "changed": bool(restored)}
