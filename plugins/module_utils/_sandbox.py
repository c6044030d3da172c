# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root runs no code from the venv: the checks that start the release's Python run sandboxed.

Three checks start ``<release>/bin/python``: the compile check of a patched file, the executed
forward-capture check (SGLang's own capture code, with torch) and the flag check (SGLang's
``ServerArgs``, which on some releases reads the model's config, and its code with
``--trust-remote-code``). Starting that Python alone runs code from the venv (its ``.pth`` files,
a ``sitecustomize``), and the release's files come from a package index root does not control.
So the modules run those commands through ``runner``:

* ``systemd`` (a host with systemd running): a transient service (``systemd-run --wait --pipe``) as
  the service user (``sglang_user``; ``nobody`` before the role created it), in a sandbox of its own:
  no network (``PrivateNetwork``, ``IPAddressDeny``, only ``AF_UNIX`` sockets), a read-only file
  system (``ProtectSystem=strict``, no home directories), no capabilities, no devices, no new
  privileges;
* ``setpriv`` (no systemd: an image build): the same user, groups and no new privileges through
  util-linux's ``setpriv``; no network namespace can be made there, which the guide says;
* ``off``: run as the caller (the unit tests; the role never passes it).

``auto`` picks ``systemd`` where systemd runs, else ``setpriv``. Standard library only (hosts run
python3 3.9 to 3.13).
"""

from __future__ import annotations

import os
import pwd
import shutil
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

MODES = ("auto", "systemd", "setpriv", "off")
FALLBACK_USER = "nobody"
# The transient service's sandbox, each line with its reason.
SYSTEMD_PROPERTIES = (
    "PrivateNetwork=yes",            # its own loopback only: nothing it runs reaches the server or the outside
    "IPAddressDeny=any",             # and no IP traffic, should a namespace be shared
    "RestrictAddressFamilies=AF_UNIX",
    "NoNewPrivileges=yes",           # no setuid way back to root
    "CapabilityBoundingSet=",        # no capability at all
    "AmbientCapabilities=",
    "ProtectSystem=strict",          # the whole file system read-only
    "ProtectHome=yes",               # no home directory (root's included)
    "PrivateTmp=yes",                # a /tmp of its own, the one place it may write (torch's caches)
    "PrivateDevices=yes",            # no GPU, no disk device: the checks run on the CPU
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "UMask=0077",
)


def argument_spec() -> dict:
    """The modules' ``sandbox`` option (its documentation: the doc fragment ``_common.sandbox``)."""
    return dict(type="dict", options=dict(mode=dict(type="str", default="off", choices=list(MODES)),
                                          user=dict(type="str")))


class SandboxError(Exception):
    """The sandbox asked for cannot be made on this host; the message says why and what to do."""


def identity(user: Optional[str]) -> Tuple[str, int, int]:
    """(name, uid, gid) the checks run as: the service user when it exists, else ``nobody``."""
    for name in (user, FALLBACK_USER):
        if not name:
            continue
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid == 0:
            raise SandboxError("the sandbox's user %s is root" % name)
        return name, entry.pw_uid, entry.pw_gid
    raise SandboxError("neither the service user %r nor %s exists to run the checks as" % (user, FALLBACK_USER))


def systemd_running() -> bool:
    return os.path.isdir("/run/systemd/system") and shutil.which("systemd-run") is not None


def mode_of(spec: Optional[Mapping[str, Any]]) -> str:
    mode = str((spec or {}).get("mode") or "off")
    if mode not in MODES:
        raise SandboxError("sandbox mode %r is not one of %s" % (mode, ", ".join(MODES)))
    if mode == "auto":
        return "systemd" if systemd_running() else "setpriv"
    return mode


def prefix(spec: Optional[Mapping[str, Any]]) -> List[str]:
    """The argv that runs a command in the sandbox ``spec`` asks for ([] for ``off``)."""
    mode = mode_of(spec)
    if mode == "off":
        return []
    name, uid, gid = identity((spec or {}).get("user"))
    if mode == "systemd":
        argv = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--service-type=exec",
                "--working-directory=/", "--property=User=%s" % name]
        for prop in SYSTEMD_PROPERTIES:
            argv.append("--property=%s" % prop)
        return argv + ["--"]
    if shutil.which("setpriv") is None:
        raise SandboxError("no systemd and no setpriv (util-linux) on this host: the release's Python is not run as root")
    groups = "--init-groups" if name != FALLBACK_USER else "--clear-groups"
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, groups, "--no-new-privs", "--reset-env", "--"]


RunCommand = Callable[[Sequence[str]], Tuple[int, str, str]]


class Runner:
    """``run_command`` with the sandbox's argv in front. A file the command reads is written in
    ``shared_dir`` (``/run``: root's, which the sandbox sees read-only; its /tmp is its own) and
    given to it with ``share``."""

    shared_dir = "/run"

    def __init__(self, run_command: RunCommand, argv: List[str]) -> None:
        self.run_command, self.argv = run_command, argv

    def __call__(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        return self.run_command(self.argv + list(argv))

    @staticmethod
    def share(path: str) -> None:
        # Not a secret (the harness's source and its request), in a directory only root may write.
        os.chmod(path, 0o644)


def runner(run_command: Optional[RunCommand], spec: Optional[Mapping[str, Any]]) -> Optional[RunCommand]:
    """``run_command`` itself for mode ``off`` (or no runner), else a Runner that sandboxes each command."""
    if run_command is None:
        return None
    argv = prefix(spec)
    return Runner(run_command, argv) if argv else run_command
