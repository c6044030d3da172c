# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Adopting a server that already runs what the role would render, without restarting it.

A host converged by hand, by another tool or by a collection that recorded nothing has no
fingerprint of its last healthy start, so the role would restart it: on a real fleet a
model reload of many minutes per host, for nothing. ``sglang_probe`` adopts it instead
(records the fingerprint, restarts nothing) when every one of these holds, read on the
host from ``/proc/<MainPID>`` of the unit:

- its command line is, item for item, the one the unit on disk would start;
- its environment holds every variable of the role's environment file, with that value;
- it started after the last change of every file it depends on (the unit, the
  environment and key files, the draft config, the SGLang files the role patches and
  their RECORD): a server started before a patch runs the old code with the new files;
- its files are compliant and its live reading passes (the probe's own checks).

Anything else, or anything that cannot be read, restarts it as before. Standard library
only; must run under any host ``python3`` from 3.9.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

RunCommand = Callable[[List[str]], Tuple[int, str, str]]


def main_pid(service: str, run_command: RunCommand, which: Callable[[str], Optional[str]]) -> Optional[int]:
    """The unit's MainPID, or None (no systemctl, not running)."""
    systemctl = which("systemctl")
    if not systemctl:
        return None
    rc, out, _err = run_command([systemctl, "show", "-p", "MainPID", "--value", service])
    try:
        pid = int(out.strip())
    except ValueError:
        return None
    return pid if rc == 0 and pid > 0 else None


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def process_argv(pid: int, proc: str = "/proc") -> List[str]:
    raw = _read(os.path.join(proc, str(pid), "cmdline"))
    return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0")[:-1]] if raw else []


def process_environ(pid: int, proc: str = "/proc") -> Dict[str, str]:
    out = {}  # type: Dict[str, str]
    for item in _read(os.path.join(proc, str(pid), "environ")).split(b"\0"):
        if b"=" in item:
            key, value = item.decode("utf-8", "surrogateescape").split("=", 1)
            out[key] = value
    return out


def process_start_time(pid: int, proc: str = "/proc") -> float:
    """Epoch seconds at which ``pid`` started, to a clock tick: its start tick (``stat`` field 22)
    after the boot, which is now minus ``/proc/uptime`` (``btime`` is whole seconds, and drifts)."""
    stat = _read(os.path.join(proc, str(pid), "stat")).decode()
    ticks = int(stat.rsplit(")", 1)[1].split()[19])
    uptime = float(_read(os.path.join(proc, "uptime")).split()[0])
    return time.time() - uptime + ticks / float(os.sysconf("SC_CLK_TCK"))


def environment_file(path: str) -> Dict[str, str]:
    """The variables of the role's environment file (templates/sglang.env.j2) as systemd reads them:
    ``KEY=value``, a value in double quotes written as a JSON string (printable ASCII, by the contract)."""
    out = {}  # type: Dict[str, str]
    for line in _read(path).decode("utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key.strip()] = json.loads(value) if value.startswith('"') else value
    return out


def adoption_blockers(pid: Optional[int], argv: Sequence[str], env_file: Optional[str], paths: Sequence[str],
                      proc: str = "/proc") -> List[str]:
    """Why the running server cannot be adopted; empty when it can. Never shows an environment value."""
    if pid is None:
        return ["the service has no main process"]
    try:
        running = process_argv(pid, proc)
        # None: not compared (the caller could not read it, and says so).
        environ = process_environ(pid, proc) if env_file is not None else None
        started = process_start_time(pid, proc)
        wanted_env = environment_file(env_file) if env_file is not None else {}
    except (OSError, ValueError, IndexError) as exc:
        return ["the running server cannot be read (%s)" % exc]
    blockers = []  # type: List[str]
    if running != list(argv):
        blockers.append("its command line differs from the unit's (%d items running, %d rendered%s)" % (
            len(running), len(argv), _first_difference(running, list(argv))))
    differ = sorted(k for k, v in wanted_env.items() if (environ or {}).get(k) != v)
    if differ:
        blockers.append("its environment differs in %s" % ", ".join(differ))
    newer = []
    for path in expanded(paths):
        try:
            changed = os.stat(path).st_ctime
        except FileNotFoundError:
            continue
        except OSError as exc:
            return ["%s cannot be read (%s)" % (path, exc)]
        if changed > started:
            newer.append(path)
    if newer:
        blockers.append("it started before %s changed" % ", ".join(newer))
    return blockers


def expanded(paths: Sequence[str]) -> List[str]:
    """The paths, each ``tree:<dir>`` as the directory and each of its entries (a model's files: a new
    export changes them in place, or adds and removes some)."""
    out = []  # type: List[str]
    for path in paths:
        if not path.startswith("tree:"):
            out.append(path)
            continue
        directory = path[len("tree:"):]
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        out.append(directory)
        out.extend(os.path.join(directory, name) for name in names)
    return out


# A flag whose value is a secret (--api-key, --admin-api-key, a token, a password), by its name: an
# older collection (1.x) put the keys on the command line, and a message must not show them.
_SECRET_FLAG = re.compile(r"^--?[A-Za-z0-9_-]*(key|token|secret|passw)", re.I)


def _shown(items: List[str], pos: int) -> str:
    """Item ``pos`` of a command line as a message may show it: a secret flag's value hidden."""
    item = items[pos]
    if _SECRET_FLAG.match(item) and "=" in item:
        return "%r" % (item.split("=", 1)[0] + "=<hidden>")
    if pos > 0 and _SECRET_FLAG.match(items[pos - 1]) and "=" not in items[pos - 1]:
        return "<hidden: the value of %s>" % items[pos - 1]
    return "%r" % item


def _first_difference(have: List[str], want: List[str]) -> str:
    for pos, (a, b) in enumerate(zip(have, want)):
        if a != b:
            return "; item %d is %s, rendered %s" % (pos, _shown(have, pos), _shown(want, pos))
    return ""
