# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every host audits itself: the audit timer the role installs, and what its service runs.

What the role installs (``install``, called by ``sglang_probe`` on a compliant host and by
``sglang_metrics`` at the end of a run that left the host compliant):

- the bundle: this file and every module_utils file it imports, zipped as they reached the host in
  the module's own payload (``bundle``), so the timer runs the controller's audit code at the
  collection's version, byte for byte; the zip is rewritten whenever that code changes;
- the spec: what the last remediation asked for (the probe's own arguments, without the rendered
  files' hashes: the fingerprint the last healthy start recorded covers the unit, the environment
  and the keys' file), 0600 root;
- a ``Type=oneshot`` service and a timer (``OnCalendar`` every ``interval`` seconds,
  ``RandomizedDelaySec`` and ``Persistent``).

What the service runs (``main``): the lease is read first, and a run that holds it makes the timer
skip (it says so, in the journal and in its own textfile); otherwise the probe's engine judges the
host (``_probe.probe``: release, patched files against the anchors and the memo of the last executed
check, draft ids, the recorded fingerprint, the running server's command line, the live reading) and
the node_exporter textfile is rewritten with mode ``timer``. It never restarts, takes no lease and
writes nothing else: its sandbox lets it write only the textfile's directory. Standard library only;
must run under any host ``python3`` from 3.9.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import resource
import shutil
import sys
import time
import traceback
import zipfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._adopt import adoption_blockers, main_pid
from ansible_collections.fleetops.sglang.plugins.module_utils._draftconfig import read_bytes
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import HELD, LeaseFile, decide, describe
from ansible_collections.fleetops.sglang.plugins.module_utils._metrics import metric_lines, update
from ansible_collections.fleetops.sglang.plugins.module_utils._probe import probe, verdict_values
from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import finding
from ansible_collections.fleetops.sglang.plugins.module_utils._rootpaths import root_path_errors
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import TIMER
from ansible_collections.fleetops.sglang.plugins.module_utils._sandbox import SYSTEMD_PROPERTIES

PACKAGE = "ansible_collections.fleetops.sglang.plugins.module_utils"
ENTRY = "_hostaudit"
BUNDLE_DIR = "/usr/local/lib/fleetops-sglang"
UNIT_DIR = "/etc/systemd/system"
CONFIG_DIR = "/etc/sglang"
# A zip's entries carry a time: a fixed one, so the same code makes the same bytes on every host.
_EPOCH = (1980, 1, 1, 0, 0, 0)
# The service's entry point, with the one runner of commands the audit uses (``systemctl``): outside a module, so
# without AnsibleModule's run_command.
MAIN = """import subprocess
import sys

from %s.%s import main


def run(argv):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


sys.exit(main(sys.argv[1:], run_command=run))
""" % (PACKAGE, ENTRY)
# The probe's arguments the timer has no use for: the controller's own, the rendered files' hashes
# (the secret-bearing ones included: a hash of one never reaches this file), adoption (which records)
# and the writes of a converging run.
NOT_IN_SPEC = ("files", "secret_sha256", "adopt", "textfile", "memo_write", "role_checks", "report",
               "fast_path", "needs_work_group", "audit_timer", "patches")
OUTCOMES = ("audited", "skipped", "failed")
HEARTBEAT_PREFIX = "sglang_audit_timer"
# The intervals a calendar event repeats exactly: divisors of a minute, an hour or a day.
_SECONDS = (5, 6, 10, 12, 15, 20, 30)
_MINUTES = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)
_HOURS = (1, 2, 3, 4, 6, 8, 12, 24)


INTERVALS = ("seconds that divide a minute, an hour or a day: %s s, %s min or %s h, given in seconds (900 for 15 "
             "minutes)" % ("/".join(map(str, _SECONDS)), "/".join(map(str, _MINUTES)), "/".join(map(str, _HOURS))))


def calendar(interval: int) -> str:
    """The ``OnCalendar=`` of a timer every ``interval`` seconds (``Persistent=`` needs a calendar event)."""
    if interval in _SECONDS:
        return "*-*-* *:*:00/%d" % interval
    if interval % 60 == 0 and interval // 60 in _MINUTES:
        return "*-*-* *:00/%d:00" % (interval // 60)
    if interval % 3600 == 0 and interval // 3600 in _HOURS:
        # A repetition must stay inside its field: once a day is midnight itself.
        return "*-*-* 00:00:00" if interval == 86400 else "*-*-* 00/%d:00:00" % (interval // 3600)
    raise ValueError("sglang_audit_timer_interval=%r: accepted: %s" % (interval, INTERVALS))


# ---------------------------------------------------------------- the bundle

_FROM = re.compile(r"^[ \t]*from[ \t]+ansible_collections\.fleetops\.sglang\.plugins\.module_utils"
                   r"(?:\.(\w+)[ \t]+import\b|[ \t]+import[ \t]+(?:\(([^)]*)\)|([\w \t,]+)$))", re.M)


def _imports(source: str) -> List[str]:
    """The module_utils this source imports (``_name``), at any depth of the file (a line scan: parsing
    every file on every probe would cost the fast path more than the rest of the bundle)."""
    found = []
    for module, grouped, names in _FROM.findall(source):
        listed = (grouped or names).replace("\n", ",").split(",")
        found.extend([module] if module else [n.split("#")[0].split()[0] for n in listed if n.split("#")[0].strip()])
    return found


def _source(name: str) -> str:
    module = importlib.import_module("%s.%s" % (PACKAGE, name))
    source = module.__loader__.get_source(module.__name__)  # a file, or the zipped payload of a module
    if not source:
        raise RuntimeError("the source of %s cannot be read" % module.__name__)
    return source


def closure(start: str = ENTRY) -> Dict[str, str]:
    """``start`` and every module_utils file it imports, recursively: name -> source."""
    sources, todo = {}, [start]  # type: Dict[str, str], List[str]
    while todo:
        name = todo.pop()
        if name in sources:
            continue
        sources[name] = _source(name)
        todo.extend(_imports(sources[name]))
    return sources


def bundle() -> bytes:
    """The zip the timer runs (``python3 -I <zip> <spec>``): the same bytes from the same code."""
    entries = {"__main__.py": MAIN}
    parts = PACKAGE.split(".")
    for depth in range(1, len(parts) + 1):
        entries["/".join(parts[:depth]) + "/__init__.py"] = ""
    for name, source in closure().items():
        entries["%s/%s.py" % (PACKAGE.replace(".", "/"), name)] = source
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(entries):
            info = zipfile.ZipInfo(path, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[path].encode("utf-8"))
    return out.getvalue()


# ---------------------------------------------------------------- the spec and the units

def spec_of(probe_args: Dict[str, Any], timer: Dict[str, Any]) -> Dict[str, Any]:
    """What the service judges the host against: the probe's arguments of this run, less what the timer has
    no use for; the live reading's key read on the host from the keys' file, never written here."""
    spec = {k: v for k, v in probe_args.items() if k not in NOT_IN_SPEC}
    live = dict(spec.get("live") or {})
    if live:
        live.pop("api_key", None)
        keys = ((probe_args.get("files") or {}).get("api_keys") or {}).get("path")
        if keys:
            live["api_key_file"] = keys
        spec["live"] = live
    # The textfile it writes: this run's probe's, or where the role keeps it when this probe writes none
    # (sglang_fast_path or sglang_metrics_textfile off): the timer writes it whatever the run does.
    textfile = dict(probe_args.get("textfile") or timer.get("textfile") or {})
    textfile.pop("mode", None)
    spec["textfile"] = textfile
    spec["lease"] = dict(timer.get("lease") or {}, file=probe_args.get("lease_file"))
    spec["interval"], spec["jitter"] = int(timer["interval"]), int(timer["jitter"])
    if timer.get("running"):
        spec["running"] = timer["running"]
    return spec


def paths(service: str, textfile: str) -> Dict[str, str]:
    """Where each installed file lives, for the service ``service`` and its textfile."""
    return {"bundle": os.path.join(BUNDLE_DIR, "%s-audit.pyz" % service),
            "spec": os.path.join(CONFIG_DIR, "%s.audit.json" % service),
            "service": os.path.join(UNIT_DIR, "%s-audit.service" % service),
            "timer": os.path.join(UNIT_DIR, "%s-audit.timer" % service),
            "heartbeat": heartbeat_path(textfile)}


def heartbeat_path(textfile: str) -> str:
    """The timer's own textfile, next to the run's: ``sglang_remediation.prom`` -> ``sglang_remediation_audit_timer.prom``."""
    base = textfile[:-len(".prom")] if textfile.endswith(".prom") else textfile
    return base + "_audit_timer.prom"


# The sandbox of the transient checks (_sandbox), less what the audit needs otherwise: it runs as root without
# capabilities (the files it reads are root's: the fingerprint, the lease, the memo, the environment file), reads
# the server's /proc, reaches the server on the loopback and writes the textfile's directory.
_OWN = ("PrivateNetwork", "IPAddressDeny", "RestrictAddressFamilies", "CapabilityBoundingSet", "AmbientCapabilities",
        "ProtectSystem", "ProtectHome", "UMask")


def service_unit(service: str, spec_path: str, bundle_path: str, textfile: str, allow: Sequence[str],
                 interval: int) -> str:
    shared = [p for p in SYSTEMD_PROPERTIES if p.split("=", 1)[0] not in _OWN]
    lines = [
        "# Managed by fleetops.sglang (its audit timer). The audit of %s: it writes %s and %s, nothing else." % (
            service, textfile, heartbeat_path(textfile)),
        "[Unit]",
        "Description=Audit of %s's SGLang EAGLE-3 wiring (reads, never restarts)" % service,
        "After=network-online.target %s.service" % service,
        "",
        "[Service]",
        "Type=oneshot",
        "ExecStart=/usr/bin/python3 -I %s %s" % (bundle_path, spec_path),
        "WorkingDirectory=/",
        # A run never outlasts its interval: the next tick finds it gone, not queued behind it.
        "TimeoutStartSec=%d" % max(int(interval), 5),
        "Nice=19",
        "IOSchedulingClass=idle",
        "# Root for the root-only files it reads (the recorded fingerprint, the lease, the environment file):",
        "# no capability but these two, and never more (NoNewPrivileges).",
        "#   CAP_DAC_READ_SEARCH: the draft's and the model's files, whatever their owner and mode;",
        "#   CAP_SYS_PTRACE: /proc/<pid>/environ of the server, which runs as another user (read, never traced:",
        "#   the ptrace system calls are filtered out below).",
        "CapabilityBoundingSet=CAP_DAC_READ_SEARCH CAP_SYS_PTRACE",
        "AmbientCapabilities=",
        "SystemCallFilter=~@debug @mount @swap @reboot @raw-io @module @clock @cpu-emulation @obsolete",
        "SystemCallArchitectures=native",
        "# The whole file system read-only but the textfile's directory (a venv or a model under /home is read).",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ReadWritePaths=%s" % os.path.dirname(textfile),
        "# The live reading: the server's own address on this host, no other.",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "IPAddressDeny=any",
        "IPAddressAllow=%s" % " ".join(["localhost"] + [a for a in allow if a not in ("localhost",)]),
        "UMask=0022",
        "# As the sandbox of the release's checks (plugins/module_utils/_sandbox.py):",
    ] + shared + [""]
    return "\n".join(lines)


def timer_unit(service: str, interval: int, jitter: int) -> str:
    return "\n".join([
        "# Managed by fleetops.sglang: the host's own audit of %s, every %ds (+ up to %ds)." % (service, interval, jitter),
        "[Unit]",
        "Description=Audit %s's SGLang EAGLE-3 wiring every %ds" % (service, interval),
        "",
        "[Timer]",
        "OnCalendar=%s" % calendar(interval),
        "RandomizedDelaySec=%d" % jitter,
        # The default accuracy is a minute: an interval of seconds needs its own.
        "AccuracySec=1s",
        "Persistent=true",
        "Unit=%s-audit.service" % service,
        "",
        "[Install]",
        "WantedBy=timers.target",
        ""])


# ---------------------------------------------------------------- installing it

RunCommand = Callable[[List[str]], Tuple[int, str, str]]


def wanted(timer: Dict[str, Any]) -> Dict[str, Tuple[bytes, int]]:
    """path -> (content, mode) of every file the timer needs."""
    spec = timer["spec"]
    service, textfile = spec["service"], spec["textfile"]["path"]
    where = paths(service, textfile)
    host = ((spec.get("live") or {}).get("url") or "").split("//", 1)[-1].rsplit(":", 1)[0].strip("[]")
    allow = [host] if host and host not in ("127.0.0.1", "::1", "localhost") else []
    return {
        where["bundle"]: (bundle(), 0o644),
        where["spec"]: ((json.dumps(spec, indent=2, sort_keys=True) + "\n").encode(), 0o600),
        where["service"]: (service_unit(service, where["spec"], where["bundle"], textfile, allow,
                                        spec["interval"]).encode(), 0o644),
        where["timer"]: (timer_unit(service, spec["interval"], spec["jitter"]).encode(), 0o644),
    }


def differences(timer: Dict[str, Any], run_command: RunCommand) -> List[str]:
    """What differs from the timer as ``timer`` asks for it (the probe's finding in an audit); [] when none."""
    spec = timer["spec"]
    where = paths(spec["service"], spec["textfile"]["path"])
    if timer.get("state", "present") == "absent":
        return ["%s exists" % p for p in (where["timer"], where["service"], where["spec"], where["bundle"])
                if os.path.lexists(p)]
    found = []
    for path, (content, mode) in wanted(timer).items():
        have = read_bytes(path)
        if have is None:
            found.append("%s is missing" % path)
        elif have != content:
            found.append("%s differs" % path)
        elif os.stat(path).st_mode & 0o7777 != mode:
            found.append("%s has mode %o, not %o" % (path, os.stat(path).st_mode & 0o7777, mode))
    name = os.path.basename(where["timer"])
    for verb in ("is-enabled", "is-active"):
        rc, out, _err = run_command(["systemctl", verb, name])
        if rc != 0:
            found.append("%s %s: %s" % (name, verb, out.strip() or "no"))
    return found


def install(timer: Dict[str, Any], check_mode: bool, run_command: RunCommand) -> Dict[str, Any]:
    """Make the timer as ``timer`` asks (state present or absent); {changed, changes}. Nothing is restarted
    but the timer itself: the server is never touched."""
    state = timer.get("state", "present")
    spec = timer["spec"]
    where = paths(spec["service"], spec["textfile"]["path"])
    name = os.path.basename(where["timer"])
    changes = differences(timer, run_command)
    if check_mode or not changes:
        return {"changed": bool(changes), "changes": changes}
    if state == "absent":
        run_command(["systemctl", "disable", "--now", name])
        for path in (where["timer"], where["service"], where["spec"], where["bundle"], where["heartbeat"]):
            if os.path.lexists(path):
                os.unlink(path)
        run_command(["systemctl", "daemon-reload"])
        return {"changed": True, "changes": changes}
    # The service's sandbox makes this directory its one writable place: it must exist before the first run.
    os.makedirs(os.path.dirname(spec["textfile"]["path"]), mode=0o755, exist_ok=True)
    units = False
    for path, (content, mode) in wanted(timer).items():
        st = os.lstat(path) if os.path.lexists(path) else None
        if read_bytes(path) != content or (st and st.st_mode & 0o7777 != mode):
            atomic_write(path, content, mode=mode, dir_mode=0o755)
            units = units or path.startswith(UNIT_DIR + "/")
    if units:
        rc, _out, err = run_command(["systemctl", "daemon-reload"])
        if rc != 0:
            raise OSError("systemctl daemon-reload: %s" % err.strip())
    # A timer whose units changed restarts to take its new schedule (the audit service it starts is a oneshot).
    rc, _out, err = run_command(["systemctl", "enable", name])
    if rc == 0:
        rc, _out, err = run_command(["systemctl", "restart" if units else "start", name])
    if rc != 0:
        raise OSError("%s could not be enabled and started: %s" % (name, err.strip()))
    return {"changed": True, "changes": changes}


# ---------------------------------------------------------------- the service

def heartbeat(values: Dict[str, Any]) -> str:
    """The timer's own textfile: when it last ran, what came of it, what it cost, and its schedule."""
    out = []  # type: List[str]

    def metric(name: str, help_text: str, samples: Sequence[Tuple[Tuple[Tuple[str, Any], ...], float]]) -> None:
        out.extend(metric_lines("%s_%s" % (HEARTBEAT_PREFIX, name), "gauge", help_text, samples))

    metric("cpu_seconds", "CPU seconds (user and system, its children included) the last run took.",
           [((), round(values["cpu_seconds"], 3))])
    metric("interval_seconds", "The timer's interval (sglang_audit_timer_interval).", [((), values["interval"])])
    metric("jitter_seconds", "The timer's random delay at most (sglang_audit_timer_jitter).", [((), values["jitter"])])
    metric("last_run_timestamp_seconds", "When the host's audit timer last started a run, whatever came of it.",
           [((), values["now"])])
    metric("outcome", "1 for what the last run did: audited (wrote the textfile), skipped (a remediation run "
           "held the lease) or failed (the audit could not run); 0 for the others.",
           [((("outcome", o),), 1 if o == values["outcome"] else 0) for o in OUTCOMES])
    return "\n".join(out) + "\n"


def lease_holder(lease: Dict[str, Any], now: float) -> Optional[Dict[str, Any]]:
    """The run that holds the host's lease now (a stale lease holds nothing), or None."""
    if not lease.get("file"):
        return None
    current, _problem = LeaseFile(lease["file"]).read()
    if current is None:
        return None
    verdict, _why = decide(current, {"run_id": "audit-timer"}, now, float(lease.get("ttl") or 7200),
                           stale=float(lease.get("stale") or 1800))
    return current if verdict == HELD else None


def _api_key(live: Dict[str, Any]) -> str:
    """The server's key, from the file SGLang reads it from (``api-key: "..."``, the role's rendering)."""
    path = live.get("api_key_file")
    if not path:
        return ""
    for line in (read_bytes(path) or b"").decode("utf-8").splitlines():
        if line.startswith("api-key:"):
            return json.loads(line.split(":", 1)[1].strip())
    return ""


class _Params(dict):
    """The probe's arguments: one the task left out (``omit``) reads as the module's None."""

    def __missing__(self, key: str) -> None:
        return None


def audit(spec: Dict[str, Any], run_command: RunCommand,
          which: Callable[[str], Optional[str]] = shutil.which) -> Dict[str, Any]:
    """The probe's verdict on this host, against ``spec``; never writes (no memo, no adoption)."""
    params = _Params((k, v) for k, v in spec.items() if k not in ("textfile", "lease", "interval", "jitter", "running"))
    params.update(files={}, secret_sha256={}, adopt=None, textfile=None, memo_write=False, patches={},
                  _check_mode=True)
    if params.get("live"):
        live = dict(params["live"])
        live["api_key"] = _api_key(live)
        live.pop("api_key_file", None)
        live.setdefault("generate_timeout", 120)
        params["live"] = live
    refused = root_path_errors({str(k): str(v) for k, v in (spec.get("root_paths") or {}).items()})
    if refused:
        return {"compliant": False, "errors": ["refused: " + " ".join(refused)], "reasons": [], "release": None,
                "decision": None, "eagle3": None, "draft_layer_ids": None, "live": None}
    result = probe(params, check_mode=True, run_command=run_command, which=which)
    running = spec.get("running")
    if running and result.get("active") and not result.get("errors"):
        # What runs against what the unit starts: its command line item for item, the environment file's
        # variables, and no file it depends on changed since it started (a server started before a patch
        # runs the old code with the new files).
        pid = main_pid(spec["service"], run_command, which)
        env_file = running["env_file"]
        try:
            with open("/proc/%d/environ" % (pid or 0), "rb") as fh:
                fh.read(1)
        except PermissionError:
            # Reading another user's environ takes CAP_SYS_PTRACE, which some kernels and containers (the test bed's)
            # do not grant, or grant only with more than this sandbox keeps: the command line and start time still
            # are compared, and the environment file itself is in the fingerprint.
            env_file = None
            result.setdefault("notes", []).append("the server's environment was not compared: /proc/%d/environ is not "
                                                  "readable with the timer's capabilities" % pid)
        except OSError:
            pass  # no such process: adoption_blockers says so
        blockers = adoption_blockers(pid, running["argv"], env_file, running.get("paths") or [])
        if blockers:
            result["reasons"].append(finding("server.differs", "the running server is not what the unit starts: %s"
                                             % "; ".join(blockers)))
            result["compliant"] = False
    return result


def textfile_values(result: Dict[str, Any], spec: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """What the run's textfile gets from this verdict (every finding and error counts), and whether it is a success."""
    errors = list(result.get("errors") or []) + list((result.get("server_flags") or {}).get("errors") or [])
    values = verdict_values(result, result.get("reasons") or [], dict(spec["textfile"], mode=TIMER, audit_timer=True),
                            (spec.get("live") or {}).get("accept_length_min", 0), "; ".join(errors))
    return values, values["compliant"]


def _say(text: str, stream: Any = None) -> None:
    """One line of the service's journal."""
    (stream or sys.stdout).write(text + "\n")


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: Sequence[str], run_command: RunCommand, now: Callable[[], float] = time.time) -> int:
    """The service: ``<bundle> <spec>``. 0 when it audited or skipped, 1 when it could not audit."""
    if len(argv) != 1:
        _say("usage: python3 -I <bundle.pyz> <spec.json>", sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    started = now()
    outcome, rc = "failed", 1
    try:
        holder = lease_holder(spec["lease"], started)
        if holder is not None:
            outcome, rc = "skipped", 0
            _say("skipped: a remediation run holds this host's lease (%s); the timer writes nothing but its own "
                 "textfile, and its next run audits" % describe(holder, started))
        else:
            result = audit(spec, run_command)
            holder = lease_holder(spec["lease"], now())
            if holder is not None:
                # A run took the lease while this one read the host: its view may be half old, half new.
                outcome, rc = "skipped", 0
                _say("skipped: a remediation run took this host's lease during the audit (%s); nothing written"
                     % describe(holder, now()))
            else:
                values, success = textfile_values(result, spec)
                update(spec["textfile"]["path"], spec["textfile"]["state_file"], values, restarts=0, now=now(),
                       success=success)
                outcome, rc = "audited", 0
                reasons = ["%s" % r.get("text") for r in result.get("reasons") or []] + list(result.get("errors") or [])
                _say("audited: compliant" if success else "audited: not compliant: " + "; ".join(reasons))
                for note in result.get("notes") or []:
                    _say("note: %s" % note)
    except Exception:  # noqa: BLE001 - whatever stops the audit is the timer's failure, said in its own textfile
        traceback.print_exc()
    finally:
        # When it started (the timer's tick, whatever the run then took on a busy host).
        text = heartbeat({"now": started, "outcome": outcome, "cpu_seconds": _cpu(),
                          "interval": int(spec.get("interval") or 0), "jitter": int(spec.get("jitter") or 0)})
        try:
            atomic_write(heartbeat_path(spec["textfile"]["path"]), text, mode=0o644, dir_mode=0o755)
        except (OSError, KeyError) as exc:
            _say("the timer's textfile could not be written: %s" % exc, sys.stderr)
            rc = 1
    return rc
