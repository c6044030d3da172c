"""What one ansible run costs, split by where it is spent (for `scripts/bench --scale`).

- controller: CPU seconds of the `ansible`/`ansible-playbook` process tree, every forked
  worker and docker client included (getrusage(RUSAGE_CHILDREN) before and after: the
  tree's processes are all waited for by the time the run returns);
- hosts: CPU seconds of the test containers' cgroups (v1 `cpuacct.usage`, v2 `cpu.stat`
  `usage_usec`), minus each container's idle rate measured before, times the run's wall;
- engine: CPU seconds of dockerd, containerd and the shims, the docker connection's own
  transport (sshd's share on a real host);
- peak memory: the largest sum of the tree's PSS, sampled every 0.2 s from /proc (RSS
  would count the forks' shared pages once per worker).

On a real fleet the hosts' part runs on each host in parallel; the controller's part is
what one controller (or one AWX execution node) pays per host, serially divided by its cores.
"""
from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
ENGINE = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")
TICK = os.sysconf("SC_CLK_TCK")


def cgroup_usage_file(container_id: str, root: Path = CGROUP) -> Path | None:
    """The file that counts the container's CPU time: cgroup v1 (cgroupfs or systemd driver) or v2."""
    for rel in (f"cpuacct/docker/{container_id}/cpuacct.usage",
                f"cpu,cpuacct/docker/{container_id}/cpuacct.usage",
                f"cpuacct/system.slice/docker-{container_id}.scope/cpuacct.usage",
                f"system.slice/docker-{container_id}.scope/cpu.stat",
                f"docker/{container_id}/cpu.stat"):
        path = root / rel
        if path.is_file():
            return path
    return None


def cgroup_seconds(path: Path) -> float:
    """CPU seconds so far in a cgroup's usage file (v1 nanoseconds, v2 cpu.stat usage_usec)."""
    text = path.read_text()
    if path.name == "cpu.stat":
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise ValueError(f"{path}: no usage_usec")
    return int(text.strip()) / 1e9


def container_files(names: list[str], root: Path = CGROUP) -> dict[str, Path]:
    """Host name -> cgroup usage file of its container (docker inspect for the full ids)."""
    res = subprocess.run(["docker", "inspect", "--format", "{{.Name}} {{.Id}}", *names],
                         stdout=subprocess.PIPE, text=True, check=True)
    files = {}
    for line in res.stdout.split("\n"):
        if not line.strip():
            continue
        name, cid = line.split()
        path = cgroup_usage_file(cid, root)
        if path is None:
            raise SystemExit(f"bench: no cgroup CPU counter for container {name} ({cid[:12]}) under {root}")
        files[name.lstrip("/")] = path
    return files


def engine_seconds(proc: Path = Path("/proc")) -> float:
    """CPU seconds (user + system) of the container engine's own processes.

    Their own time only: a shim's waited-for children are the container's processes, which
    the container's cgroup counts already."""
    total = 0
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        if comm in ENGINE or comm.startswith("containerd-shim"):
            fields = text[text.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def tree_pss_kib(root_pid: int, proc: Path = Path("/proc")) -> int:
    """Summed PSS (KiB) of root_pid and its descendants."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            for line in (proc / str(pid) / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
    return total


@dataclass
class Cost:
    wall: float = 0.0
    controller: float = 0.0
    hosts: float = 0.0
    engine: float = 0.0
    pss_peak_mib: float = 0.0
    per_host_cpu: dict = field(default_factory=dict)


class Meter:
    """Measures runs against a fleet whose containers' idle CPU rate was taken first."""

    def __init__(self, names: list[str], idle_seconds: float = 5.0, root: Path = CGROUP):
        self.files = container_files(names, root)
        self.idle = self.idle_rates(idle_seconds)

    def read(self) -> dict[str, float]:
        return {h: cgroup_seconds(p) for h, p in self.files.items()}

    def idle_rates(self, seconds: float) -> dict[str, float]:
        """CPU seconds per second each container spends with no run going (systemd, the test double)."""
        a, t0 = self.read(), time.monotonic()
        time.sleep(seconds)
        b, t1 = self.read(), time.monotonic()
        return {h: max(0.0, (b[h] - a[h]) / (t1 - t0)) for h in a}

    def run(self, cmd: list[str], hosts: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, Cost]:
        """subprocess.run(cmd, **kwargs), measured; host CPU summed over ``hosts`` (the run's own)."""
        before_self = resource.getrusage(resource.RUSAGE_CHILDREN)
        cg0, eng0 = self.read(), engine_seconds()
        peak = [0]
        proc = subprocess.Popen(cmd, **kwargs)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak[0] = max(peak[0], tree_pss_kib(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        t0 = time.monotonic()
        sampler.start()
        out, err = proc.communicate()
        wall = time.monotonic() - t0
        done.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cg1, eng1 = self.read(), engine_seconds()
        per_host = {h: max(0.0, cg1[h] - cg0[h] - self.idle[h] * wall) for h in hosts}
        cost = Cost(wall=wall,
                    controller=(after.ru_utime + after.ru_stime) - (before_self.ru_utime + before_self.ru_stime),
                    hosts=sum(per_host.values()), engine=max(0.0, eng1 - eng0),
                    pss_peak_mib=peak[0] / 1024, per_host_cpu=per_host)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err), cost
