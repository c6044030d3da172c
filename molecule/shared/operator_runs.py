"""Runs as an operator starts them, and the hosts read as root: what the verifiers of the
scenarios that drive whole runs themselves share (ssh, faults, default on Debian 13).

``Operator`` starts ``ansible-playbook`` with a given inventory (several sources allowed)
and Ansible configuration, keeps each run's output in its directory, points the fleet
report of each run at its own directory and reads the recap's counts
(callback_plugins/run_stats.py). ``sh`` reads or changes a container as root with docker
exec, outside any run under test.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from scenario_helpers import PROJECT, STARTS_LOG, Run, read_stats, stats_env


def sh(name: str, command: str, check: bool = True) -> str:
    """A shell command in the container, as root; its stdout, stripped."""
    res = subprocess.run(["docker", "exec", name, "sh", "-c", command], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise AssertionError("%s: %s failed: %s" % (name, command, res.stderr))
    return res.stdout.strip()


def starts(name: str) -> int:
    """Healthy starts of the test double so far (one line each)."""
    return int(sh(name, "cat %s 2>/dev/null | wc -l" % STARTS_LOG) or 0)


def main_pid(name: str) -> int:
    """The server's MainPID (0: not running): a cheap read for the loops that wait on a restart."""
    return int(sh(name, "systemctl show -p MainPID --value sglang") or 0)


def server_info(name: str) -> Dict[str, Any]:
    return json.loads(sh(name, "python3 -c \"import urllib.request; print(urllib.request.urlopen("
                               "'http://127.0.0.1:30000/get_server_info', timeout=30).read().decode())\""))


class Operator:
    """An operator's runs against ``inventories``, with ``config`` as ANSIBLE_CONFIG (None: the
    environment's), their logs and reports under ``work``."""

    def __init__(self, work: Path, inventories: Sequence[Path], config: Optional[Path] = None,
                 callbacks: Optional[str] = None) -> None:
        self.work, self.inventories, self.config, self.callbacks = Path(work), list(inventories), config, callbacks

    def stats_file(self, name: str) -> Path:
        return self.work / ("%s.stats.json" % name)

    def command(self, name: str, playbook: Path, extra_vars: Optional[Dict[str, Any]] = None,
                args: Sequence[str] = (), env: Optional[Dict[str, str]] = None):
        """argv and environment of one run; its report in ``reports/<name>``, its recap's counts in
        ``stats_file(name)``. Extra vars travel as a JSON file, so that types survive exactly."""
        self.work.mkdir(parents=True, exist_ok=True)
        argv: List[str] = ["ansible-playbook"]
        for inventory in self.inventories:
            argv += ["-i", str(inventory)]
        argv.append(str(playbook))
        if extra_vars:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=str(self.work)) as fh:
                json.dump(extra_vars, fh)
            argv += ["-e", "@" + fh.name]
        argv += list(args)
        environment = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                           SGLANG_REPORT_DIR=str(self.work / "reports" / name))
        if self.config is not None:
            environment["ANSIBLE_CONFIG"] = str(self.config)
        if self.callbacks is not None:
            environment["ANSIBLE_CALLBACKS_ENABLED"] = self.callbacks
        environment.update(env or {})
        self.stats_file(name).unlink(missing_ok=True)  # a run that ends before its recap leaves none
        return argv, stats_env(self.stats_file(name), environment)

    def run(self, name: str, playbook: Path, extra_vars: Optional[Dict[str, Any]] = None, args: Sequence[str] = (),
            env: Optional[Dict[str, str]] = None, timeout: int = 1800) -> Run:
        argv, environment = self.command(name, playbook, extra_vars, args, env)
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
                                  cwd=str(PROJECT), timeout=timeout, check=False)
            rc, out = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else (exc.output or "")
            rc, out = -9, out + "\n[killed after %ss]" % timeout
        (self.work / ("%s.log" % name)).write_text(out)
        return Run(rc, out, read_stats(self.stats_file(name)))

    def start(self, name: str, playbook: Path, extra_vars: Optional[Dict[str, Any]] = None,
              args: Sequence[str] = ()) -> subprocess.Popen:
        """A run in the background (its own session, so that it can be killed whole); output in its log."""
        argv, environment = self.command(name, playbook, extra_vars, args)
        log = open(self.work / ("%s.log" % name), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=str(PROJECT),
                                start_new_session=True)
        log.close()
        return proc

    def log(self, name: str) -> str:
        return (self.work / ("%s.log" % name)).read_text()

    def report(self, name: str) -> Dict[str, Any]:
        return json.loads((self.work / "reports" / name / "latest" / "fleet.json").read_text())

    def rows(self, name: str) -> Dict[str, Dict[str, Any]]:
        return {r["host"]: r for r in self.report(name)["hosts"]}
