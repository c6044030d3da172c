#!/usr/bin/env python3
"""Where the test suite's time goes: wall time and CPU seconds per step and per scenario.

``scripts/test`` runs every step through ``timing.py run NAME -- COMMAND``, which
records the step's wall time and the CPU its own process tree used (user + system
of every process it waited for: ansible-playbook, molecule, pytest, the docker
clients), one JSON line per step. Next to it, ``timing.py sample`` polls the
cgroup of every container of the test bed while the suite runs and keeps the CPU
seconds each one used (systemd, the role's modules on the host, the test double),
because those never show in the controller's own rusage. ``timing.py table``
joins both into the table the suite ends with: a scenario's containers are those
named after it (``<prefix>-<scenario>[-N]-<distro>``, as the Molecule base config
names them).

On these 2-core machines the suite is CPU-bound, so the CPU columns say what a
change saves; wall times of steps that run side by side overlap and do not add up.
Standard library only (the toolchain step runs before the project's venv exists).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

# The suite warns (it does not fail: these machines are shared and noisy) above this.
WARN_SECONDS = 60 * 60
# ... and stops itself here, well before CI's hard limit of 90 minutes, so that an over-long run
# ends its jobs, removes its containers and prints where its time went instead of being killed
# with nothing said (scripts/test: SGLANG_TEST_STOP_AFTER overrides it, in seconds).
STOP_SECONDS = 75 * 60
# A step still running at the stop gets SIGTERM, then SIGKILL after this many seconds.
STOP_GRACE_SECONDS = 20
# The exit code of a step ended (or never started) by the stop, as timeout(1) has it.
STOPPED_RC = 124
# The budget the tests guide (docs/docsite/rst/guide_tests.rst) states for a cold run from a fresh clone, on CI.
BUDGET_SECONDS = 45 * 60


# --------------------------------------------------------------------------- steps


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_step(name: str, argv: List[str], steps_file: Path, stop_at: Optional[float] = None,
             grace: float = STOP_GRACE_SECONDS) -> int:
    """Run ``argv`` to its end and append its wall time and its tree's CPU to ``steps_file``.

    With ``stop_at`` (seconds since the epoch), a step still running then is ended: SIGTERM to
    its whole process group, SIGKILL after ``grace`` seconds; one whose turn comes after it is
    not started. Either way it is recorded with rc 124 and ``"stopped": true``.
    """
    started = time.time()
    t0 = time.monotonic()
    record = {"name": name, "started": round(started, 3)}
    if stop_at is not None and started >= stop_at:
        record.update(wall=0.0, cpu=0.0, rc=STOPPED_RC, stopped=True)
        _append(steps_file, record)
        return STOPPED_RC
    # Its own process group, so that the stop reaches every process of the step (molecule's
    # ansible-playbook, pytest's children) and nothing else; the signals that stop the suite
    # itself are passed on to it.
    proc = subprocess.Popen(argv, start_new_session=True)
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, lambda signum, _frame: _signal_group(proc.pid, signum))
    stopped = False
    killed_at: Optional[float] = None
    try:
        while True:
            try:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG if stop_at is not None else 0)
            except InterruptedError:
                continue
            if pid:
                break
            now = time.time()
            if now >= stop_at and not stopped:
                stopped = True
                killed_at = now + grace
                _signal_group(proc.pid, signal.SIGTERM)
            elif stopped and killed_at is not None and now >= killed_at:
                _signal_group(proc.pid, signal.SIGKILL)
                killed_at = None
            time.sleep(0.5 if not stopped else 0.1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped:
        _signal_group(proc.pid, signal.SIGKILL)  # what outlived its leader
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    if stopped:
        rc = STOPPED_RC
    record.update(wall=round(wall, 3), cpu=round(usage.ru_utime + usage.ru_stime, 3), rc=rc)
    if stopped:
        record["stopped"] = True
    _append(steps_file, record)
    return rc


def _append(steps_file: Path, record: Dict) -> None:
    steps_file.parent.mkdir(parents=True, exist_ok=True)
    with open(steps_file, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def read_steps(steps_file: Path) -> List[Dict]:
    try:
        return [json.loads(line) for line in steps_file.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


# --------------------------------------------------------------------------- containers


def cgroup_usage_paths() -> Dict[str, str]:
    """Container id -> the file holding its cumulative CPU use, for cgroup v1 and v2,
    with docker's cgroupfs driver (dockerd started by hand) or its systemd driver."""
    found: Dict[str, str] = {}
    patterns = [
        ("/sys/fs/cgroup/cpuacct/docker/*/cpuacct.usage", r"/docker/([0-9a-f]{64})/"),
        ("/sys/fs/cgroup/cpu,cpuacct/docker/*/cpuacct.usage", r"/docker/([0-9a-f]{64})/"),
        ("/sys/fs/cgroup/cpuacct/system.slice/docker-*.scope/cpuacct.usage", r"docker-([0-9a-f]{64})\.scope"),
        ("/sys/fs/cgroup/docker/*/cpu.stat", r"/docker/([0-9a-f]{64})/"),
        ("/sys/fs/cgroup/system.slice/docker-*.scope/cpu.stat", r"docker-([0-9a-f]{64})\.scope"),
    ]
    for pattern, id_re in patterns:
        for path in glob.glob(pattern):
            match = re.search(id_re, path)
            if match and match.group(1) not in found:
                found[match.group(1)] = path
    return found


def read_usage(path: str) -> Optional[float]:
    """CPU seconds from cpuacct.usage (ns) or cpu.stat's usage_usec."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    if path.endswith("cpuacct.usage"):
        return int(text.strip()) / 1e9
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    return None


def container_name(cid: str) -> Optional[str]:
    res = subprocess.run(["docker", "inspect", "--format", "{{.Name}}", cid], capture_output=True, text=True,
                         check=False)
    return res.stdout.strip().lstrip("/") or None if res.returncode == 0 else None


# The Docker engine's own processes: their CPU is in no container's cgroup and in no
# step's rusage (the docker clients are; the daemon that serves them is not).
ENGINE_COMMANDS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc", "docker-proxy")
ENGINE_KEY = "(docker engine)"
MACHINE_KEY = "(machine busy)"


def engine_cpu(seen: Dict[int, float]) -> float:
    """CPU seconds of the engine's processes, each pid's last value kept after it exits."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid_dir in glob.glob("/proc/[0-9]*"):
        try:
            comm = Path(pid_dir, "comm").read_text().strip()
            if comm not in ENGINE_COMMANDS:
                continue
            fields = Path(pid_dir, "stat").read_text().rsplit(")", 1)[1].split()
            # utime and stime of the process itself (fields 14-15). Not its children's: a
            # container's exec'd processes are the shim's children, and their CPU is the
            # container's (its cgroup counts it already).
            seen[int(pid_dir.rsplit("/", 1)[1])] = sum(int(f) for f in fields[11:13]) / tick
        except (OSError, ValueError, IndexError):
            continue
    return sum(seen.values())


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy since boot (/proc/stat, every core)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def sample(out: Path, interval: float, stop_file: Optional[Path] = None) -> None:
    """Poll every container's CPU until killed; keep the last value seen per container.

    A container's use only grows, so the last value read before it was removed is
    what it used (less at most one interval). Written atomically on every change.
    """
    names: Dict[str, str] = {}
    usage: Dict[str, float] = {}
    try:
        usage.update(json.loads(out.read_text()))
    except (OSError, ValueError):
        pass
    engine_seen: Dict[int, float] = {}
    engine_start = engine_cpu({})
    busy_start = machine_busy()
    running = True

    def stop(*_):
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while running:
        changed = False
        for cid, path in cgroup_usage_paths().items():
            if cid not in names:
                name = container_name(cid)
                if not name:
                    continue
                names[cid] = name
            value = read_usage(path)
            if value is None:
                continue
            key = "%s %s" % (names[cid], cid[:12])
            if usage.get(key) != value:
                usage[key] = value
                changed = True
        usage[ENGINE_KEY] = round(engine_cpu(engine_seen) - engine_start, 3)
        usage[MACHINE_KEY] = round(machine_busy() - busy_start, 3)
        changed = True
        if changed:
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(usage, indent=1, sort_keys=True))
            os.replace(tmp, out)
        if stop_file is not None and stop_file.exists():
            break
        time.sleep(interval)


def read_containers(path: Path) -> Dict[str, float]:
    """Container name -> CPU seconds, summed over containers of one name (a scenario's
    create after an earlier destroy reuses its names)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out: Dict[str, float] = {}
    for key, value in raw.items():
        # "<name> <12 hex of the id>"; the engine's and the machine's totals have no id.
        name, _, cid = key.rpartition(" ")
        if not (name and re.fullmatch(r"[0-9a-f]{12}", cid)):
            name = key
        out[name] = out.get(name, 0.0) + float(value)
    return out


# --------------------------------------------------------------------------- table


def scenario_of(step_name: str) -> Optional[Tuple[str, str]]:
    """'molecule default@trixie' -> ('default', 'trixie'); None for other steps."""
    match = re.match(r"^molecule (\S+?)(?:@(\S+))?$", step_name)
    if not match:
        return None
    return match.group(1), match.group(2) or "bookworm"


def containers_of(step_name: str, containers: Dict[str, float], prefix: str,
                  owners: Dict[str, str]) -> float:
    """CPU of the containers a step owns: a scenario's by name, others as ``owners`` says."""
    scen = scenario_of(step_name)
    total = 0.0
    for name, cpu in containers.items():
        if scen is not None:
            scenario, distro = scen
            if re.match(r"^%s-%s(-\d+)?-%s$" % (re.escape(prefix), re.escape(scenario), re.escape(distro)), name):
                total += cpu
        elif owners.get(name) == step_name:
            total += cpu
    return total


def fmt(seconds: float) -> str:
    return "%d" % round(seconds)


def table(steps: List[Dict], containers: Dict[str, float], prefix: str, total_wall: Optional[float] = None,
          owners: Optional[Dict[str, str]] = None) -> str:
    """The Markdown table: one row per step, then the totals."""
    owners = owners or {}
    if not steps:
        return "(no steps recorded)"
    t0 = min(s["started"] for s in steps)
    lines = ["| step | started at (s) | wall (s) | CPU, own (s) | CPU, containers (s) | rc |",
             "|---|---:|---:|---:|---:|---:|"]
    cpu_own = cpu_cont = 0.0
    claimed = set()
    for s in steps:
        cont = containers_of(s["name"], containers, prefix, owners)
        cpu_own += s["cpu"]
        cpu_cont += cont
        rc = "%s (stopped)" % s["rc"] if s.get("stopped") else s["rc"]
        lines.append("| %s | %s | %s | %s | %s | %s |" % (s["name"], fmt(s["started"] - t0), fmt(s["wall"]),
                                                         fmt(s["cpu"]), fmt(cont), rc))
    for name, cpu in containers.items():
        if any(containers_of(s["name"], {name: cpu}, prefix, owners) for s in steps):
            claimed.add(name)
    engine = containers.get(ENGINE_KEY)
    machine = containers.get(MACHINE_KEY)
    other = sum(cpu for name, cpu in containers.items() if name not in claimed and name not in (ENGINE_KEY, MACHINE_KEY))
    if other:
        lines.append("| (other containers) | | | | %s | |" % fmt(other))
        cpu_cont += other
    end = max(s["started"] + s["wall"] for s in steps)
    wall = total_wall if total_wall is not None else end - t0
    if engine is not None:
        lines.append("| (the Docker engine: dockerd, containerd, shims) | | | %s | | |" % fmt(engine))
        cpu_own += engine
    lines.append("| **total** | | **%s** | **%s** | **%s** | |" % (fmt(wall), fmt(cpu_own), fmt(cpu_cont)))
    if machine is not None:
        lines.append("")
        lines.append("The machine was busy %s CPU-seconds while containers were sampled (%s of its %d cores' time)."
                     % (fmt(machine), "%d%%" % round(100 * machine / (wall * os.cpu_count())) if wall else "?",
                        os.cpu_count()))
    return "\n".join(lines)


def verdict(total_wall: float, steps: Optional[List[Dict]] = None) -> List[str]:
    out = ["suite wall time %ds (%.1f min); budget for a cold run from a fresh clone: %d min"
           % (total_wall, total_wall / 60, BUDGET_SECONDS // 60)]
    stopped = [s["name"] for s in steps or [] if s.get("stopped")]
    if stopped:
        out.append("STOPPED: the suite reached its time limit (SGLANG_TEST_STOP_AFTER, default %d min) and ended "
                   "or never started %d step(s): %s. The table above says where the time went."
                   % (STOP_SECONDS // 60, len(stopped), ", ".join(stopped)))
    if total_wall > WARN_SECONDS:
        out.append("WARNING: the suite took more than %d minutes: CI stops a run at 90 minutes. "
                   "Find the step that grew in the table above." % (WARN_SECONDS // 60))
    return out


def _env_float(name: str) -> Optional[float]:
    value = os.environ.get(name)
    return float(value) if value else None


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="timing", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run", help="run a step and record its wall time and CPU")
    p_run.add_argument("--steps", type=Path, required=True)
    p_run.add_argument("--stop-at", type=float, default=_env_float("SGLANG_TEST_STOP_AT"),
                       help="seconds since the epoch at which the step is ended (default: $SGLANG_TEST_STOP_AT)")
    p_run.add_argument("name")
    p_run.add_argument("argv", nargs=argparse.REMAINDER)
    p_sample = sub.add_parser("sample", help="poll the containers' CPU until killed")
    p_sample.add_argument("--out", type=Path, required=True)
    p_sample.add_argument("--interval", type=float, default=2.0)
    p_table = sub.add_parser("table", help="print the table of steps and scenarios")
    p_table.add_argument("--steps", type=Path, required=True)
    p_table.add_argument("--containers", type=Path, required=True)
    p_table.add_argument("--prefix", default=os.environ.get("SGLANG_TESTBED_PREFIX", "sglang"))
    p_table.add_argument("--total-wall", type=float)
    p_table.add_argument("--owner", action="append", default=[], metavar="CONTAINER=STEP",
                         help="attribute a container that is not a scenario's to a step")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.cmd == "run":
        cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not cmd:
            parser.error("run needs a command after --")
        return run_step(args.name, cmd, args.steps, stop_at=args.stop_at)
    if args.cmd == "sample":
        sample(args.out, args.interval)
        return 0
    steps = read_steps(args.steps)
    owners = dict(o.split("=", 1) for o in args.owner)
    print(table(steps, read_containers(args.containers), args.prefix, args.total_wall, owners))
    if steps:
        t0 = min(s["started"] for s in steps)
        wall = args.total_wall if args.total_wall is not None else max(s["started"] + s["wall"] for s in steps) - t0
        for line in verdict(wall, steps):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
