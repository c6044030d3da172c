"""The measuring parts of `scripts/bench --scale` and bench/profile.py, on fixed inputs.

The cgroup readers on both layouts a host can have (v1 and v2, either driver), the
idle rate taken off the hosts' CPU, the controller's CPU counted from the run's whole
process tree, and the profile's split of py-spy stacks between the main process and
the forked workers.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cost  # noqa: E402
import profile as bench_profile  # noqa: E402
import scale  # noqa: E402

CID = "ab" * 32


@pytest.mark.parametrize("rel, body, seconds", [
    (f"cpuacct/docker/{CID}/cpuacct.usage", "2500000000\n", 2.5),
    (f"cpu,cpuacct/docker/{CID}/cpuacct.usage", "1000000000\n", 1.0),
    (f"cpuacct/system.slice/docker-{CID}.scope/cpuacct.usage", "500000000\n", 0.5),
    (f"system.slice/docker-{CID}.scope/cpu.stat", "usage_usec 3250000\nuser_usec 3000000\nsystem_usec 250000\n", 3.25),
    (f"docker/{CID}/cpu.stat", "usage_usec 1500000\n", 1.5),
])
def test_cgroup_counters_of_every_layout(tmp_path, rel, body, seconds):
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    path.write_text(body)
    assert cost.cgroup_usage_file(CID, tmp_path) == path
    assert cost.cgroup_seconds(path) == pytest.approx(seconds)


def test_no_counter_and_a_v2_file_without_usage(tmp_path):
    assert cost.cgroup_usage_file(CID, tmp_path) is None
    path = tmp_path / "cpu.stat"
    path.write_text("user_usec 1\n")
    with pytest.raises(ValueError, match="usage_usec"):
        cost.cgroup_seconds(path)


class FakeMeter(cost.Meter):
    """A Meter over counters in files this test advances, with a known idle rate."""

    def __init__(self, files, idle):
        self.files = files
        self.idle = idle


def test_host_cpu_is_the_counter_delta_less_the_idle_rate_and_controller_cpu_counts_grandchildren(tmp_path):
    files = {}
    for host in ("h1", "h2"):
        files[host] = tmp_path / host
        files[host].write_text("0\n")
    # h2's idle rate is small against its 3 s, so that the expected value stays above the clamp at 0
    # on a machine loaded enough to stretch the command's wall to many seconds.
    meter = FakeMeter(files, {"h1": 0.0, "h2": 0.05})
    # The command advances h1 by 2 s and h2 by 3 s of CPU, and burns CPU in a grandchild.
    script = (f"import subprocess, sys, time\n"
              f"open({str(files['h1'])!r}, 'w').write('2000000000')\n"
              f"open({str(files['h2'])!r}, 'w').write('3000000000')\n"
              "subprocess.run([sys.executable, '-c', 'import time\\nt=time.process_time()\\n"
              "while time.process_time()-t<0.4: pass'])\n")
    res, c = meter.run([sys.executable, "-c", script], ["h1", "h2"], stdout=subprocess.PIPE, text=True)
    assert res.returncode == 0
    assert c.per_host_cpu["h1"] == pytest.approx(2.0)
    # h2's idle rate (0.05 CPU-s per s) times the run's wall is not the run's; never below 0.
    assert c.per_host_cpu["h2"] == pytest.approx(max(0.0, 3.0 - 0.05 * c.wall))
    assert c.hosts == pytest.approx(sum(c.per_host_cpu.values()))
    assert c.controller >= 0.4
    assert c.pss_peak_mib >= 0


def test_tree_pss_sums_the_descendants(tmp_path):
    def proc(pid, ppid, pss):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} (python3 x) S {ppid} 1 1 0 -1 0 0 0 0 0 5 6 7 8\n")
        (d / "smaps_rollup").write_text(f"Rss: 999 kB\nPss: {pss} kB\n")
    proc(10, 1, 100)
    proc(11, 10, 20)
    proc(12, 11, 3)
    proc(13, 1, 5000)  # not in the tree
    assert cost.tree_pss_kib(10, tmp_path) == 123
    assert cost.tree_pss_kib(11, tmp_path) == 23


def test_engine_cpu_counts_the_engine_processes_only(tmp_path):
    def proc(pid, comm, utime, stime, cutime, cstime):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20\n")
    proc(2, "dockerd", 100, 50, 0, 0)
    proc(3, "containerd-shim-runc-v2", 10, 10, 5, 5)
    proc(4, "python3", 10000, 0, 0, 0)
    # Own time only: a shim's children are the container's processes, counted by its cgroup.
    assert cost.engine_seconds(tmp_path) == pytest.approx(170 / os.sysconf("SC_CLK_TCK"))


def test_profile_splits_main_and_workers_and_counts_inclusive_once_per_stack():
    main_p = 'process 1:""'
    worker = 'process 2:"python ansible-playbook x.yml"'
    ssh = 'process 3:"/bin/sh -c python"'
    lines = [
        f"{main_p};run (strategy/linear.py:10);get_vars (vars/manager.py:20) 30",
        f"{main_p};{worker};_execute (executor/task_executor.py:5);template (template/__init__.py:9);"
        "template (template/__init__.py:11) 40",
        f"{main_p};{worker};_execute (executor/task_executor.py:5);run (action/sglang_probe.py:1) 20",
        f"{main_p};{worker};{ssh};<module> (<stdin>:1) 10",
    ]
    total, incl, own = bench_profile.aggregate(bench_profile.parse(lines))
    assert dict(total) == {"main": 30, "worker": 60, "other": 10}
    # A function twice in one stack (recursion) counts once for that stack.
    assert incl["worker"]["template (template/__init__.py)"] == 40
    assert incl["worker"]["_execute (executor/task_executor.py)"] == 60
    assert own["worker"]["run (action/sglang_probe.py)"] == 20
    assert own["main"]["get_vars (vars/manager.py)"] == 30
    text = bench_profile.table(total, incl, own, rate=100, hosts=2, top=5)
    # 60 worker samples at 100 Hz over 2 hosts: 300 ms per host.
    assert "| worker | 60 | 60.0% | 300 |" in text


def run(wall, ctl, hosts_cpu, n, changed=0):
    return {"hosts": n, "wall": wall, "controller": ctl, "host_cpu": hosts_cpu, "engine": 0.1 * n, "pss": 100 + n,
            "per_host": {"controller": ctl / n, "hosts": hosts_cpu / n, "engine": 0.1},
            "remote_max": 1, "remote_mean": 1, "changed": changed}


def test_summary_slopes_ratios_and_targets():
    sizes = [10, 20]
    runs = {}
    for n in sizes:
        runs[(n, "ping")] = [run(1 + 0.2 * n, 0.2 * n, 0.3 * n, n)] * 2
        runs[(n, "rerun")] = [run(1 + 0.3 * n, 0.28 * n, 0.7 * n, n)] * 2
        runs[(n, "audit")] = [run(1 + 0.3 * n, 0.4 * n, 0.7 * n, n)] * 2
    data = scale.summary(runs, sizes, 2)
    assert data["slopes"]["rerun"]["controller"]["x_ping"] == pytest.approx(1.4)
    assert data["slopes"]["audit"]["controller"]["x_ping"] == pytest.approx(2.0)
    row = data["sizes"][1]
    assert row["rerun"]["controller_ratio"]["of_medians"] == pytest.approx(1.4)
    assert row["rerun"]["controller_per_host"]["median"] == pytest.approx(0.28)
    first = [run(100, 80, 200, 10) | {"remote_max": 12, "remote_mean": 12}]
    data.update(commit="x", date="d", cores=2, forks=20, repeat=2, first=first,
                bare=run(20, 10, 50, 10), changed_total=0, restarts=[0])
    text, ok = scale.report(data)
    # The audit's controller CPU is 2.0 x ping's: the CPU targets fail, the rest hold.
    assert ok == {"controller": False, "controller_slope": False, "wall": True, "first": True, "quiet": True}
    assert "NOT met (1.40, 2.00)" in text
    data["first"] = [first[0] | {"remote_max": 13}]
    data["restarts"] = [0, 1]
    _, ok = scale.report(data)
    assert not ok["first"] and not ok["quiet"]
