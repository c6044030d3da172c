# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run per host at a time: the lease file in sglang_state_dir.

A cron audit, two operators, or a rerun started while the last one still
restarts must not back up, patch and restart the same host at once. A writing
run takes the host's lease once its probe found work to do and gives it back
after the report. The lease is a small JSON file naming its holder (run id,
controller host, user, controller pid, when the run started and when the lease
was taken) and a heartbeat its holder refreshes while it runs (each gate poll
and the patch step call :func:`beat`); the read-decide-write is serialised with
flock on a guard file, so two runs that arrive together cannot both take it.

A lease is judged from any controller: one whose heartbeat is older than
sglang_lock_stale_seconds (a run killed with its AWX pod, a controller that
died) is taken over with a warning naming the old holder, as is one older than
sglang_lock_ttl. :meth:`LeaseFile.break_lease` frees a host explicitly, recording
who did it, why, and whom it removed in ``lease-breaks.jsonl`` next to it.

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
HOLDER_KEYS = ("run_id", "controller", "user", "pid", "started", "taken_at", "heartbeat")
# Default seconds without a heartbeat after which a lease is stale: longer than the longest step
# that refreshes none (the install: pip of SGLang and its dependencies).
DEFAULT_STALE = 1800
BREAK_LOG = "lease-breaks.jsonl"
FREE, OURS, HELD, STALE = "free", "ours", "held", "stale"


def process_started(pid: int) -> Optional[float]:
    """Epoch seconds a local process started (Linux /proc), None where it cannot be read."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 of stat(5); the first two were split off
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def run_id_of(pid: int, started: Optional[float]) -> str:
    """A run's id: when its ansible-playbook process started (UTC) and its pid, e.g. 20261202T175400Z-4242.

    The lease's holder (the action plugin, for its workers' parent) and the fleet report (the
    callback, in that process) compute it from the same process, so they name the same run
    without passing it along.
    """
    stamp = datetime.datetime.fromtimestamp(started if started is not None else time.time(), datetime.timezone.utc)
    return "%s-%d" % (stamp.strftime("%Y%m%dT%H%M%SZ"), pid)


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


def silence(holder: Mapping[str, Any], now: float) -> Optional[float]:
    """Seconds since the holder's last heartbeat (a lease of 1.x has none: since it was taken)."""
    try:
        return now - float(holder.get("heartbeat") if holder.get("heartbeat") not in (None, "") else
                           holder.get("taken_at"))
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
    quiet = silence(holder, now) if now is not None and holder.get("heartbeat") not in (None, "") else None
    if quiet is not None:
        text += ", last heartbeat %ds ago" % max(0, int(quiet))
    return text


def decide(current: Optional[Mapping[str, Any]], me: Mapping[str, Any], now: float, ttl: float,
           takeover: str = "", stale: float = DEFAULT_STALE) -> Tuple[str, str]:
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
    quiet = silence(current, now)
    if quiet is not None and quiet > stale:
        return STALE, ("its holder's last heartbeat is %ds old, older than sglang_lock_stale_seconds=%ds: that run "
                       "is gone (killed, or its controller lost)" % (int(quiet), int(stale)))
    if takeover and current.get("run_id") == takeover:
        return STALE, "its controller process %s no longer exists on %s" % (
            current.get("pid"), current.get("controller"))
    return HELD, ""


def beat(lease: Optional[Mapping[str, Any]], now: Optional[float] = None) -> bool:
    """The heartbeat other modules send while they run (``lease``: {path, run_id}, or None)."""
    if not lease or not lease.get("path") or not lease.get("run_id"):
        return False
    try:
        return LeaseFile(str(lease["path"])).beat(str(lease["run_id"]), time.time() if now is None else now)
    except OSError:
        return False  # a heartbeat is never worth failing the step it rides on


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

    def try_acquire(self, me: Mapping[str, Any], now: float, ttl: float, takeover: str = "",
                    stale: float = DEFAULT_STALE) -> Dict[str, Any]:
        """One attempt under the guard: take a free, own or stale lease; report a held one."""
        fd = self._guarded()
        try:
            current, problem = self.read()
            if current is None and problem:
                verdict, why = STALE, problem
            else:
                verdict, why = decide(current, me, now, ttl, takeover, stale)
            if verdict == HELD:
                return {"acquired": False, "holder": current, "previous": None, "why": ""}
            taken = dict(me)
            if verdict == OURS and current is not None:
                taken["taken_at"] = current.get("taken_at")
            else:
                taken["taken_at"] = now
            taken["heartbeat"] = now
            self._write(taken)
            return {"acquired": True, "holder": taken,
                    "previous": current if verdict == STALE else None,
                    "why": why if verdict == STALE else ""}
        finally:
            os.close(fd)

    def acquire(self, me: Mapping[str, Any], ttl: float, wait: float, takeover: str = "",
                poll: float = 0.5, clock=time.time, sleep=time.sleep, stale: float = DEFAULT_STALE) -> Dict[str, Any]:
        """Try, then retry every ``poll`` seconds for up to ``wait`` seconds."""
        deadline = clock() + max(0.0, wait)
        while True:
            result = self.try_acquire(me, clock(), ttl, takeover, stale)
            if result["acquired"] or clock() >= deadline:
                return result
            sleep(min(poll, max(0.0, deadline - clock())))

    def beat(self, run_id: str, now: float) -> bool:
        """Refresh the heartbeat of a lease ``run_id`` holds; anyone else's (or none) is left alone."""
        if not run_id or not os.path.exists(self.path):
            return False
        fd = self._guarded()
        try:
            current, _problem = self.read()
            if current is None or current.get("run_id") != run_id:
                return False
            current["heartbeat"] = now
            self._write(current)
            return True
        finally:
            os.close(fd)

    def break_lease(self, me: Mapping[str, Any], reason: str, now: float) -> Dict[str, Any]:
        """Free the host whoever holds it, and record who broke whose lease and why."""
        if not os.path.isdir(os.path.dirname(self.path) or "."):
            return {"broken": False, "previous": None}
        fd = self._guarded()
        try:
            current, problem = self.read()
            if current is None and not problem:
                return {"broken": False, "previous": None}
            entry = {"at": now, "by": dict(me), "reason": reason, "holder": current, "unreadable": problem or None}
            log = os.path.join(os.path.dirname(self.path) or ".", BREAK_LOG)
            with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, sort_keys=True) + "\n")
            os.unlink(self.path)
            return {"broken": True, "previous": current}
        finally:
            os.close(fd)

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
