# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run per host at a time: the lease file in sglang_state_dir.

A cron audit, two operators, or a rerun started while the last one still
restarts must not back up, patch and restart the same host at once. A writing
run takes the host's lease once its probe found work to do and gives it back
after the report. The lease is a small JSON file naming its holder (run id,
controller host, user, controller pid, when the run started and when the lease
was taken); the read-decide-write is serialised with flock on a guard file, so
two runs that arrive together cannot both take it.

The decision is a pure function (``decide``) over the observed lease, so that it
is tested without a host; the file handling is kept apart in ``LeaseFile``.
Standard library only: this runs on the managed host.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
import tempfile
import time
from typing import Any, Dict, Mapping, Optional, Tuple

# What a holder carries; run_id is the identity, the rest is for the message.
HOLDER_KEYS = ("run_id", "controller", "user", "pid", "started", "taken_at")
FREE, OURS, HELD, STALE = "free", "ours", "held", "stale"


def iso(epoch: Optional[float]) -> str:
    """UTC, to the second: what an operator compares with the report's run directory."""
    if epoch is None:
        return "unknown"
    return datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: Optional[str]) -> Tuple[Optional[Dict[str, Any]], str]:
    """(holder, problem): None and "" for no lease; None and a reason for an unreadable one.

    An unreadable lease (a crash while writing, a hand edit) cannot name a holder
    to wait for, so it is treated as stale and replaced with a warning.
    """
    if text is None or not text.strip():
        return None, ""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, "the lease file is not JSON (%s)" % exc
    if not isinstance(data, dict) or not data.get("run_id"):
        return None, "the lease file names no run_id"
    return {k: data.get(k) for k in HOLDER_KEYS}, ""


def age(holder: Mapping[str, Any], now: float) -> Optional[float]:
    try:
        return now - float(holder.get("taken_at"))
    except (TypeError, ValueError):
        return None


def describe(holder: Mapping[str, Any], now: Optional[float] = None) -> str:
    """The holder as an operator needs it to find that run: id, where, who, since when."""
    text = "run %s by %s@%s (controller pid %s), run started %s, lease taken %s" % (
        holder.get("run_id") or "?", holder.get("user") or "?", holder.get("controller") or "?",
        holder.get("pid") if holder.get("pid") is not None else "?",
        iso(holder.get("started")) if holder.get("started") not in (None, "") else "unknown",
        iso(holder.get("taken_at")) if holder.get("taken_at") not in (None, "") else "unknown")
    held = age(holder, now) if now is not None else None
    if held is not None:
        text += " (%ds ago)" % max(0, int(held))
    return text


def decide(current: Optional[Mapping[str, Any]], me: Mapping[str, Any], now: float, ttl: float,
           takeover: str = "") -> Tuple[str, str]:
    """(verdict, why) for a run that wants the lease.

    ``takeover`` is the run id the controller found dead (a process that no longer
    exists on this very controller); it only applies while that run still holds
    the lease, so a holder that changed in between is waited for again.
    """
    if current is None:
        return FREE, ""
    if current.get("run_id") == me.get("run_id"):
        return OURS, ""
    held = age(current, now)
    if held is None:
        return STALE, "its holder records no time it took it"
    if held > ttl:
        return STALE, "it is %ds old, older than sglang_lock_ttl=%ds" % (int(held), int(ttl))
    if takeover and current.get("run_id") == takeover:
        return STALE, "its controller process %s no longer exists on %s" % (
            current.get("pid"), current.get("controller"))
    return HELD, ""


def held_message(current: Mapping[str, Any], waited: float, now: float) -> str:
    """Why the host failed after waiting: names the holder so the operator can find that run."""
    return ("another run holds this host's lease: %s. Waited %ds (sglang_lock_timeout); rerun once it has "
            "finished, or remove the lease file if that run is known to be gone."
            % (describe(current, now), int(waited)))


class LeaseFile:
    """The lease on the host: a JSON file next to a guard file that serialises changes to it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.guard = path + ".guard"
        # Whether this process created the directory or fixed its mode or owner.
        self.dir_changed = False

    def _ensure_dir(self) -> None:
        """The lease's directory (the role's sglang_state_dir, which holds the backups and the
        fingerprint too): 0700 and, when run as root, root's. Taking the lease is the first
        write of a run, so no task of its own creates it."""
        directory = os.path.dirname(self.path) or "."
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o700, exist_ok=True)
            self.dir_changed = True
        st = os.stat(directory)
        if st.st_mode & 0o7777 != 0o700:
            os.chmod(directory, 0o700)
            self.dir_changed = True
        if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
            os.chown(directory, 0, 0)
            self.dir_changed = True

    def read(self) -> Tuple[Optional[Dict[str, Any]], str]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                return parse(fh.read())
        except FileNotFoundError:
            return None, ""

    def _write(self, holder: Mapping[str, Any]) -> None:
        directory = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lease.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(dict(holder), fh, indent=2, sort_keys=True)
                fh.write("\n")
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def _guarded(self):
        self._ensure_dir()
        fd = os.open(self.guard, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def try_acquire(self, me: Mapping[str, Any], now: float, ttl: float, takeover: str = "") -> Dict[str, Any]:
        """One attempt under the guard: take a free, own or stale lease; report a held one."""
        fd = self._guarded()
        try:
            current, problem = self.read()
            if current is None and problem:
                verdict, why = STALE, problem
            else:
                verdict, why = decide(current, me, now, ttl, takeover)
            if verdict == HELD:
                return {"acquired": False, "holder": current, "previous": None, "why": ""}
            taken = dict(me)
            if verdict == OURS and current is not None:
                taken["taken_at"] = current.get("taken_at")
            else:
                taken["taken_at"] = now
            self._write(taken)
            return {"acquired": True, "holder": taken,
                    "previous": current if verdict == STALE else None,
                    "why": why if verdict == STALE else ""}
        finally:
            os.close(fd)

    def acquire(self, me: Mapping[str, Any], ttl: float, wait: float, takeover: str = "",
                poll: float = 0.5, clock=time.time, sleep=time.sleep) -> Dict[str, Any]:
        """Try, then retry every ``poll`` seconds for up to ``wait`` seconds."""
        deadline = clock() + max(0.0, wait)
        while True:
            result = self.try_acquire(me, clock(), ttl, takeover)
            if result["acquired"] or clock() >= deadline:
                return result
            sleep(min(poll, max(0.0, deadline - clock())))

    def release(self, me: Mapping[str, Any]) -> Dict[str, Any]:
        """Give the lease back; a lease someone else holds now is left alone."""
        if not os.path.isdir(os.path.dirname(self.path) or "."):
            return {"released": False, "holder": None}
        fd = self._guarded()
        try:
            current, _problem = self.read()
            if current is not None and current.get("run_id") == me.get("run_id"):
                os.unlink(self.path)
                return {"released": True, "holder": None}
            return {"released": False, "holder": current}
        finally:
            os.close(fd)
