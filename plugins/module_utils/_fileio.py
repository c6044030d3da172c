# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing files so that no reader ever sees half of one, and reading a module's own source.

Every module of the collection and the report callback replace files through
``atomic_write``: a temp file in the same directory, then one rename. Readers
(SGLang importing a patched file, node_exporter reading a ``.prom`` file, the
probe reading a memo) see the old bytes or the new ones, never a mix. Standard
library only: it runs on hosts under python3 3.9 to 3.13.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any, Optional, Tuple, Union


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes_text(path: str) -> Tuple[bytes, str]:
    """The file's bytes and their UTF-8 text (UnicodeDecodeError for anything else)."""
    with open(path, "rb") as fh:
        data = fh.read()
    return data, data.decode("utf-8")


def fsync_dir(directory: str) -> None:
    """Make a rename durable: after a crash the old bytes must not come back."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: Union[bytes, str], mode: Optional[int] = 0o644,
                 like: Optional[os.stat_result] = None, dir_mode: Optional[int] = None,
                 owner: str = "try", durable: bool = False) -> None:
    """Replace ``path`` in one rename.

    ``like`` gives the mode and owner to keep (usually the file being replaced);
    without it the file gets ``mode`` (None: whatever mkstemp gives, 0600).
    ``owner="try"`` keeps the owner when allowed (a non-root writer owns the file
    already); ``owner="strict"`` raises PermissionError when the owner cannot be kept,
    so a config a service user reads never silently becomes root's. ``dir_mode``
    creates missing parent directories; ``durable`` fsyncs the file and its directory.
    The temp name ends in ``.tmp``: node_exporter's textfile collector reads ``*.prom`` only.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = os.path.dirname(path) or "."
    if dir_mode is not None:
        os.makedirs(directory, mode=dir_mode, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if like is not None:
                os.fchmod(fh.fileno(), like.st_mode & 0o7777)
                _keep_owner(fh.fileno(), like, path, owner)
            elif mode is not None:
                os.fchmod(fh.fileno(), mode)
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(directory)


def _keep_owner(fd: int, like: os.stat_result, path: str, owner: str) -> None:
    try:
        os.fchown(fd, like.st_uid, like.st_gid)
    except OSError as exc:
        if owner != "strict":
            return
        if not isinstance(exc, PermissionError):
            raise
        got = os.fstat(fd)
        if (got.st_uid, got.st_gid) != (like.st_uid, like.st_gid):
            raise PermissionError("cannot keep owner %d:%d of %s as uid %d; run with become"
                                  % (like.st_uid, like.st_gid, path, os.geteuid()))


def module_source(namespace: Any) -> Optional[bytes]:
    """A module's own source, also when it runs from Ansible's zipped payload (AnsiballZ).

    ``namespace`` is the module's ``globals()`` or the module object; None when its
    loader cannot give the source (then nothing keyed on it may be memoized).
    """
    names = namespace if isinstance(namespace, dict) else vars(namespace)
    loader = names.get("__loader__")
    try:
        source = loader.get_source(names["__name__"]) if loader is not None else None
    except (ImportError, OSError):
        source = None
    return source.encode("utf-8") if source else None
