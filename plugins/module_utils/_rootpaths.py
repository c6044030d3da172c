# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths whose code or data root runs or trusts must be root's all the way down.

The role runs as root: it creates the venv with ``sglang_python`` and runs pip in it, runs the
venv's Python for the flag check, installs from the wheelhouse, and trusts what it reads in its
state directory (the change sets it restores, the fingerprint, the lease). Whoever can write to
one of these paths, or to any directory above one, can replace that code or data: a service user
who owns a parent of the venv can swap the venv for their own, and root then runs it.

:func:`root_path_errors` refuses such a layout before any change (the probe, the first task of
every run, calls it on the host). A directory or file is "writable by someone else than root"
when it is owned by another user (its owner can chmod it), or has the write bit for others, or
for a group other than root's (gid 0). Every existing component of the path is checked, from
``/`` down, through symlinks (the link's own owner and the resolved path's components); a
component that does not exist yet is created by the role as root. A sticky world-writable
directory (``/tmp``) is refused too: anyone may create the missing component below it first.

Standard library only; must run under any host ``python3`` from 3.9.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from typing import Dict, List, Tuple


def _owner(uid: int) -> str:
    try:
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return "uid %d" % uid


def _group(gid: int) -> str:
    try:
        return "%s (gid %d)" % (grp.getgrgid(gid).gr_name, gid)
    except KeyError:
        return "gid %d" % gid


def writable_by_others(st: os.stat_result) -> str:
    """Why someone else than root can change this file or directory ("" when only root can)."""
    if st.st_uid != 0:
        return "owned by %s" % _owner(st.st_uid)
    if stat.S_ISLNK(st.st_mode):
        return ""  # a link's mode means nothing; its directory decides who may replace it
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o002:
        return "writable by every user (mode %04o)" % mode
    if mode & 0o020 and st.st_gid != 0:
        return "writable by the group %s (mode %04o)" % (_group(st.st_gid), mode)
    return ""


def _components(path: str) -> List[str]:
    parts, here = ["/"], "/"
    for name in [p for p in path.split("/") if p]:
        here = os.path.join(here, name)
        parts.append(here)
    return parts


def writers(path: str) -> List[Tuple[str, str]]:
    """(component, why) for every existing component of ``path``, and of what it resolves to, that
    someone else than root can change, from ``/`` down."""
    found: List[Tuple[str, str]] = []
    for candidate in (os.path.normpath(path), os.path.realpath(path)):
        for component in _components(candidate):
            try:
                st = os.lstat(component)
            except FileNotFoundError:
                break  # the rest does not exist yet: the role creates it, as root
            except OSError as exc:
                found.append((component, "cannot be read (%s)" % (exc.strerror or exc)))
                break
            why = writable_by_others(st)
            if why and (component, why) not in found:
                found.append((component, why))
    return found


def _entries(directory: str) -> List[str]:
    try:
        return [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
    except OSError:
        return []


def root_path_errors(paths: Dict[str, str]) -> List[str]:
    """One refusal per labelled path (a variable name, or what the path is) that lies under a
    directory, or is a file, someone else than root can change. ``tree:<dir>`` also checks each entry
    of the directory, and what it links to (a model directory whose Python files root may run:
    sglang_trust_remote_code; a Hugging Face snapshot's links into its blobs included)."""
    errors = []
    for label, path in paths.items():
        if not path:
            continue
        path = str(path)
        found = []  # type: List[Tuple[str, str]]
        if path.startswith("tree:"):
            path = path[len("tree:"):]
            for candidate in [path] + _entries(path):
                found = writers(candidate)
                if found:
                    break
        else:
            found = writers(path)
        if not found:
            continue
        component, why = found[0]
        base = os.path.normpath(path)
        where = "is" if component == base else ("holds" if component.startswith(base + "/") else "lies under")
        errors.append(
            "%s=%s %s %s, %s: whoever can write there can replace what root runs or trusts from it (pip, the "
            "flag check, the change sets). Use a path whose every directory is root's and writable by root only, "
            "or make %s so (chown root:root, chmod go-w)." % (label, path, where, component, why, component))
    return errors
