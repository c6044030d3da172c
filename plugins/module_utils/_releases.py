# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Staged releases: one immutable virtualenv per release, and one switch that says which one serves.

The layout, Capistrano-style::

    <releases>/<version>-<lock>-<patch>/     a release: a virtualenv built, patched, verified, then sealed
    <releases>/<version>-adopted/           a 2.x in-place venv, moved here as it was (0 reinstalls)
    <venv>  ->  <releases>/<one of them>    the switch: sglang_venv is a symbolic link

A release's identity (``release_id``) is its SGLang version, the sha256 of the lock it was
installed from (the requirement with its hashes, or the user's lock of the whole closure) and the
sha256 of the collection's patch set: a new lock or a new patch is a new release, never an edit of
one that exists. A release is *sealed* once built, patched and verified: its marker
(``.fleetops-release.json``) records that identity, the sha256 of the files the engine patches
and the closure (every distribution with its version and the sha256 of its RECORD). A sealed
release is never written again; ``problems`` says how one no longer matches its seal (a damaged
directory, a package upgraded by hand: drift in any package of the closure).

The server runs ``<venv>/bin/python``, so the unit never changes between releases; a switch is
one ``rename`` of a new link over the old one (atomic), done after the drain, just before the
restart, so that a server never imports from a release it was not started on for longer than
its stop takes, and a host rebooted before the switch starts the release that served.
Standard library only (hosts run python3 3.9+).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import (
    EngineError, Refusal, TARGET_FILES, all_dist_infos, find_installation,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write, fsync_dir, sha256_hex
from ansible_collections.fleetops.sglang.plugins.module_utils._patches import PATCHES

MARKER = ".fleetops-release.json"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)((?:\s+.*)?)$")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
ADOPTED_SUFFIX = "-adopted"


def patch_digest(patches: Optional[Dict[str, str]] = None) -> str:
    """The sha256 of the patch set the engine applies (the collection's, unless others are given)."""
    return sha256_hex(json.dumps(patches or PATCHES, sort_keys=True).encode("utf-8"))


def release_id(version: str, lock: str, patches: Optional[Dict[str, str]] = None) -> str:
    """``<version>-<12 hex of the lock's sha256>-<12 hex of the patch set's>``."""
    return "%s-%s-%s" % (version, sha256_hex(lock.encode("utf-8"))[:12], patch_digest(patches)[:12])


# ------------------------------------------------------------------ the lock


def _lock_lines(text: str) -> List[Tuple[int, str]]:
    """The lock's logical lines (continuations joined, comments dropped), with their first line number."""
    out: List[Tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append((start, line))
    return out


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def lock_pins(text: str) -> Dict[str, str]:
    """Each package the lock pins (``name==version``), by canonical name; other lines are not pins."""
    pins = {}
    for _number, line in _lock_lines(text):
        match = _PIN.match(line)
        if match:
            pins[_canonical(match.group(1))] = match.group(2)
    return pins


def lock_errors(text: str, version: str) -> List[str]:
    """Why ``text`` is not a lock of a whole closure: every line one package pinned with ``==`` and at
    least one ``--hash=sha256:``, no pip option (an index, a link, an editable), and sglang==``version``."""
    errors = []
    for number, line in _lock_lines(text):
        match = _PIN.match(line)
        if not match:
            errors.append("line %d (%s) is not one package pinned name==version with --hash=sha256:<64 hex>"
                          % (number, line[:80]))
        elif not _HASH.findall(match.group(3)) or _HASH.sub("", match.group(3)).strip():
            errors.append("line %d (%s) has no --hash=sha256:<64 hex>, or something else than hashes after"
                          " its pin" % (number, line[:80]))
    if not errors and lock_pins(text).get("sglang") != version:
        errors.append("it pins sglang==%s, not sglang==%s (sglang_version)" % (
            lock_pins(text).get("sglang") or "nothing", version))
    return errors


# ------------------------------------------------------------------ reading


def switch_state(link: str) -> Dict[str, Any]:
    """What ``link`` (sglang_venv) is: a link to a release, an in-place directory (2.x), or absent."""
    if os.path.islink(link):
        return {"kind": "link", "target": os.path.realpath(link)}
    if os.path.isdir(link):
        return {"kind": "dir", "target": os.path.realpath(link)}
    if os.path.lexists(link):
        return {"kind": "other", "target": None}
    return {"kind": "absent", "target": None}


def read_marker(release: str) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(release, MARKER)) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def closure(release: str) -> Dict[str, Dict[str, str]]:
    """Every distribution in the release: its version and the sha256 of its RECORD."""
    out: Dict[str, Dict[str, str]] = {}
    for info in all_dist_infos(release):
        name, _sep, version = os.path.splitext(os.path.basename(info))[0].partition("-")
        try:
            with open(os.path.join(info, "RECORD"), "rb") as fh:
                record = sha256_hex(fh.read())
        except OSError:
            record = "(no RECORD)"
        out[_canonical(name)] = {"version": version, "record": record}
    return out


def target_files(release: str) -> Dict[str, str]:
    """The sha256 of each file the engine patches or reads, as the release has it now."""
    inst = find_installation(release, record=False)
    out = {}
    for rel in TARGET_FILES:
        try:
            with open(inst.path(rel), "rb") as fh:
                out[rel] = sha256_hex(fh.read())
        except FileNotFoundError:
            continue
    return out


def problems(release: str, marker: Optional[Dict[str, Any]] = None) -> List[str]:
    """How ``release`` no longer matches its seal; empty for a sealed release as it was sealed."""
    marker = marker if marker is not None else read_marker(release)
    if not os.path.isdir(release):
        return ["%s does not exist" % release]
    if not marker or not marker.get("id"):
        return ["%s is not sealed (no %s with an id: a build that did not finish)" % (release, MARKER)]
    found: List[str] = []
    try:
        files = target_files(release)
    except EngineError as exc:
        return ["%s: %s" % (release, exc)]
    for rel, digest in sorted((marker.get("files") or {}).items()):
        if files.get(rel) != digest:
            now = ("sha256 " + files[rel][:12]) if rel in files else "missing"
            found.append("%s %s (sealed %s)" % (rel, now, digest[:12]))
    if not os.path.exists(os.path.join(release, "bin", "python")):
        found.append("%s/bin/python missing" % release)
    found += closure_drift(marker.get("closure") or {}, closure(release))
    return found


def closure_drift(sealed: Dict[str, Dict[str, str]], now: Dict[str, Dict[str, str]]) -> List[str]:
    """Each package of the closure that differs from its seal: added, removed, another version or RECORD."""
    out = []
    for name in sorted(set(sealed) | set(now)):
        was, cur = sealed.get(name), now.get(name)
        if was is None:
            out.append("package %s %s added after the seal" % (name, cur["version"]))
        elif cur is None:
            out.append("package %s %s removed after the seal" % (name, was["version"]))
        elif was["version"] != cur["version"]:
            out.append("package %s %s -> %s" % (name, was["version"], cur["version"]))
        elif was["record"] != cur["record"]:
            out.append("package %s %s reinstalled or changed (its RECORD differs)" % (name, cur["version"]))
    return out


def releases(root: str) -> List[str]:
    """Every release directory under ``root`` (not the switch's temporary link)."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    return [os.path.join(root, n) for n in names if not n.startswith(".") and os.path.isdir(os.path.join(root, n))
            and not os.path.islink(os.path.join(root, n))]


def installed_version(release: str) -> Optional[str]:
    try:
        return find_installation(release, record=False).version
    except EngineError:
        return None


# ------------------------------------------------------------------ plan


def plan(root: str, link: str, rid: str, version: str, audit: Optional[Callable[[str], List[str]]] = None,
         refuse: Optional[Callable[[str], Optional[str]]] = None) -> Dict[str, Any]:
    """Which release directory this run deploys, and what it must do to it. Read-only.

    ``dir``: the release; ``build``: it is to be built there (a venv, pip, the patch, then the
    seal); ``seal``: it exists unsealed and is sealed once verified (an adopted 2.x venv holding
    the pinned version: the role audits it first, it is never patched while it serves);
    ``switch``: the link does not point at it yet; ``clean``: a directory of an unfinished build
    sits there and is removed first. ``audit(dir)`` says why an unsealed release that serves is not
    as the role would leave it (the engine's audit; nothing when it is): such a release is never
    patched in place, a new one is built beside it. ``refuse(dir)`` says why a sealed release that
    serves and no longer matches its seal must not be replaced (a file edited by hand, which the
    engine refuses as drift); without that, a release is built beside it.
    """
    state = switch_state(link)
    current = state["target"]
    out: Dict[str, Any] = {"id": rid, "current": current, "switch_kind": state["kind"], "clean": False,
                           "adopt": state["kind"] == "dir", "build": False, "seal": False}
    if current:
        marker = read_marker(current) or {}
        damaged = problems(current, marker) if marker.get("id") == rid else []
        if marker.get("id") == rid and not damaged:
            return dict(out, dir=current, switch=False, reason="the release that serves is %s, sealed" % rid)
        refused = refuse(current) if damaged and refuse else None
        if refused:
            # A file of the release that serves, of this very identity, edited by hand (a hot fix?): it is
            # not rebuilt over, nor replaced, until a person has looked.
            raise Refusal("the release that serves, %s, was changed by hand (%s): %s. It is neither rebuilt nor"
                          " replaced until a person looks: put the file back as pip installed it (or as the role"
                          " patched it), or remove that release's seal to have it rebuilt, and rerun"
                          % (current, "; ".join(damaged), refused))
        if (state["kind"] == "dir" or marker.get("adopted")) and not marker.get("id") \
                and installed_version(current) == version:
            why = audit(current) if audit else []
            if not why:
                return dict(out, dir=current, switch=False, seal=True,
                            reason="the release that serves (an in-place venv, adopted) holds sglang %s as the"
                                   " role leaves it: sealed as %s, not reinstalled" % (version, rid))
            out["reason_current"] = "the release that serves holds sglang %s, not as the role leaves it (%s):" \
                " it is never patched while it serves" % (version, "; ".join(why))
    for release in reversed(releases(root)):
        marker = read_marker(release) or {}
        if release != current and marker.get("id") == rid and not problems(release, marker):
            return dict(out, dir=release, switch=True, reason="release %s is built and sealed: switch to it" % rid)
    candidate = os.path.join(root, rid)
    n = 1
    while candidate == current or (os.path.lexists(candidate) and read_marker(candidate) is not None
                                   and (read_marker(candidate) or {}).get("id")):
        n += 1
        candidate = os.path.join(root, "%s.%d" % (rid, n))
    return dict(out, dir=candidate, build=True, switch=True, clean=os.path.lexists(candidate),
                reason="%srelease %s is to be built in %s" % (
                    out.pop("reason_current", "") + " " if "reason_current" in out else "", rid, candidate))


# ------------------------------------------------------------------ writing


def adopt(root: str, link: str) -> Optional[str]:
    """Move an in-place venv (2.x's ``sglang_venv`` directory) under ``root`` as a release, as it is, and
    put the link in its place: the server keeps every path it has open or imports (they resolve
    through the link to the same files). None when ``link`` is no directory."""
    if switch_state(link)["kind"] != "dir":
        return None
    version = installed_version(link) or "unknown"
    os.makedirs(root, mode=0o755, exist_ok=True)
    dest = os.path.join(root, version + ADOPTED_SUFFIX)
    n = 1
    while os.path.lexists(dest):
        n += 1
        dest = os.path.join(root, "%s%s.%d" % (version, ADOPTED_SUFFIX, n))
    try:
        os.rename(link, dest)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise EngineError(
                "cannot adopt %s as a release: sglang_releases_dir=%s is on another file system (a move there"
                " would be a copy of a venv that serves); set sglang_releases_dir to a directory on the same file"
                " system as sglang_venv" % (link, root))
        raise
    _point(link, dest)
    atomic_write(os.path.join(dest, MARKER), json.dumps(
        {"adopted": True, "version": version, "adopted_at": int(time.time()), "from": link},
        indent=1, sort_keys=True) + "\n", mode=0o644, durable=True)
    return dest


def seal(release: str, rid: str, version: str, lock: str, now: Callable[[], float] = time.time) -> Dict[str, Any]:
    """Record the release as built and verified: its identity, its patched files and its closure."""
    found = installed_version(release)
    if found != version:
        raise EngineError("cannot seal %s as %s: it holds sglang %s, not %s" % (release, rid, found, version))
    installed = closure(release)
    wrong = ["%s==%s (installed: %s)" % (name, pinned, (installed.get(name) or {}).get("version", "nothing"))
             for name, pinned in sorted(lock_pins(lock).items())
             if (installed.get(name) or {}).get("version") != pinned]
    if wrong:
        raise EngineError("cannot seal %s: it does not hold what its lock pins: %s" % (release, ", ".join(wrong)))
    old = read_marker(release) or {}
    marker = {"id": rid, "version": version, "lock_sha256": sha256_hex(lock.encode("utf-8")),
              "patch_sha256": patch_digest(), "files": target_files(release), "closure": installed,
              "sealed_at": int(now())}
    if old.get("adopted"):
        marker.update(adopted=True, adopted_at=old.get("adopted_at"), **{"from": old.get("from")})
    atomic_write(os.path.join(release, MARKER), json.dumps(marker, indent=1, sort_keys=True) + "\n",
                 mode=0o644, durable=True)
    return marker


def switch(link: str, release: str) -> bool:
    """Point ``link`` at ``release`` in one rename; False when it already does."""
    state = switch_state(link)
    if state["kind"] == "dir":
        raise EngineError("%s is a directory, not the switch of staged releases: adopt it first" % link)
    if state["kind"] == "link" and os.readlink(link) == release:
        return False
    if not os.path.isdir(release):
        raise EngineError("cannot switch %s to %s: no such release directory" % (link, release))
    os.makedirs(os.path.dirname(link) or ".", mode=0o755, exist_ok=True)
    _point(link, release)
    return True


def _point(link: str, target: str) -> None:
    """``link`` -> ``target`` in one rename of a new link over whatever is there (the switch), durably."""
    tmp = link + ".switch"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, link)
    fsync_dir(os.path.dirname(link) or ".")


def _age(release: str) -> float:
    marker = read_marker(release) or {}
    return float(marker.get("sealed_at") or marker.get("adopted_at") or 0)


def prune(root: str, link: str, keep: int, protect: List[str], check_mode: bool = False) -> Dict[str, List[str]]:
    """Remove all but the newest ``keep`` releases (the one that serves counts), and every unfinished
    build; never the one that serves, nor one in ``protect`` (what a rollback would switch back to)."""
    current = switch_state(link)["target"]
    protected = {os.path.realpath(p) for p in protect if p} | ({current} if current else set())
    finished = sorted((r for r in releases(root) if (read_marker(r) or {}).get("id") or
                       (read_marker(r) or {}).get("adopted")), key=_age, reverse=True)
    kept = [r for r in finished if r == current]
    for release in finished:
        if release != current and len(kept) < keep:
            kept.append(release)
    removed, held = [], []
    for release in releases(root):
        if release in kept:
            continue
        if os.path.realpath(release) in protected:
            held.append(release)
            continue
        removed.append(release)
        if not check_mode:
            shutil.rmtree(release)
    return {"removed": removed, "kept": kept, "protected": held}


def remove_build(release: str) -> bool:
    """Remove a release directory this run built (its undo): a directory, never what a link points at."""
    if not os.path.isdir(release) or os.path.islink(release):
        return False
    shutil.rmtree(release)
    return True


__all__ = ["MARKER", "lock_pins", "lock_errors", "patch_digest", "release_id", "switch_state", "read_marker", "closure", "problems",
           "closure_drift", "releases", "plan", "adopt", "seal", "switch", "prune", "remove_build"]
