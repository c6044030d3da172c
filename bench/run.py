#!/usr/bin/env python3
"""Benchmark: what a rerun of remediate.yml costs on a compliant fleet, against ping.

Starts N systemd containers (default 50), then in one run:
  1. the bare cost of installing SGLang from a local wheelhouse and starting a
     server (bench/bare.yml) on the fresh hosts, and the role's first remediation
     (remediate.yml) on the same hosts: ratio role / bare;
  2. R repetitions (default 3) of `ansible -m ping`, the no-op remediate.yml rerun
     and audit.yml, interleaved so that machine noise spreads over all three:
     medians, spreads, ratios to ping;
  3. per-host remote module executions and changed counts, from the sglang_bench
     callback (not estimated).
Timings are ratios within one run: the machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench"


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def timed(cmd: list[str], counts: Path | None = None, check: bool = True) -> tuple[float, dict]:
    """Run an ansible command; return wall seconds and the callback's per-host counts."""
    env = dict(os.environ)
    if counts is not None:
        env["SGLANG_BENCH_OUT"] = str(counts)
        counts.unlink(missing_ok=True)
    env["SGLANG_REPORT_DIR"] = str(CACHE / "reports")
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    elapsed = time.monotonic() - start
    if check and res.returncode != 0:
        sys.stderr.write(res.stdout[-6000:])
        raise SystemExit(f"bench: {' '.join(cmd)} failed (exit {res.returncode})")
    data = json.loads(counts.read_text()) if counts is not None and counts.exists() else {}
    return elapsed, data


def summarize(counts: dict) -> dict:
    """Per-host remote executions (max and mean) and total changed."""
    if not counts:
        return {"remote_max": None, "remote_mean": None, "changed": None}
    remote = [c["remote"] for c in counts.values()]
    return {"remote_max": max(remote), "remote_mean": round(statistics.mean(remote), 2),
            "changed": sum(c["changed"] for c in counts.values())}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}s (min {min(values):.1f}, max {max(values):.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--forks", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="leave the containers running")
    args = ap.parse_args()

    CACHE.mkdir(parents=True, exist_ok=True)
    inv_dir = CACHE / "inventory"
    inv_dir.mkdir(parents=True, exist_ok=True)
    inventory = inv_dir / "hosts.yml"
    # The demo's group_vars (test double, wheelhouse) apply to the bench fleet too.
    link = inv_dir / "group_vars"
    if not link.is_symlink():
        link.symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    py = str(ROOT / ".venv" / "bin" / "python")
    bin_dir = ROOT / ".venv" / "bin"
    forks = ["--forks", str(args.forks)]
    inv = ["-i", str(inv_dir)]

    log(f"removing any previous bench fleet, starting {args.hosts} fresh hosts")
    subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", "sglang-bench"], cwd=ROOT, check=True)
    subprocess.run([py, "testbed/testbed.py", "fleet-up", "--prefix", "sglang-bench", "--count", str(args.hosts),
                    "--group", "sglang", "--inventory", str(inventory)], cwd=ROOT, check=True)
    subprocess.run([str(ROOT / "scripts" / "wheelhouse"), str(ROOT / ".cache" / "wheelhouse"), "0.5.9"],
                   cwd=ROOT, check=True)
    timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "playbooks/testbed-prepare.yml"])

    log("first remediation: bare install + start, then the role, on the same fresh hosts")
    t_bare, _ = timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "bench/bare.yml"])
    t_first, c_first = timed([str(bin_dir / "ansible-playbook"), *inv, *forks,
                              "-e", "sglang_serial=100%", "remediate.yml"], CACHE / "first.json")

    ping, rerun, audit = [], [], []
    c_rerun: dict = {}
    c_audit: dict = {}
    c_ping: dict = {}
    for i in range(args.repeat):
        log(f"repetition {i + 1}/{args.repeat}: ping, no-op rerun, audit")
        t, c_ping = timed([str(bin_dir / "ansible"), *inv, *forks, "sglang", "-m", "ansible.builtin.ping"],
                          CACHE / "ping.json")
        ping.append(t)
        t, c_rerun = timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "remediate.yml"],
                           CACHE / "rerun.json")
        rerun.append(t)
        t, c_audit = timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "playbooks/audit.yml"],
                           CACHE / "audit.json")
        audit.append(t)

    restarts = subprocess.run(
        [str(bin_dir / "ansible"), *inv, *forks, "sglang", "-o", "-m", "ansible.builtin.command",
         "-a", "wc -l /var/lib/sglang/starts.log"], cwd=ROOT, stdout=subprocess.PIPE, text=True).stdout
    starts = [int(line.split("(stdout)")[1].split()[0]) for line in restarts.splitlines() if "(stdout)" in line]

    med_ping = statistics.median(ping)
    rows = [
        ("hosts / forks", f"{args.hosts} / {args.forks}", ""),
        ("ping", spread(ping), "1.00"),
        ("no-op remediate.yml rerun", spread(rerun), f"{statistics.median(rerun) / med_ping:.2f} x ping"),
        ("audit.yml", spread(audit), f"{statistics.median(audit) / med_ping:.2f} x ping"),
        ("first remediation (role)", f"{t_first:.1f}s", f"{t_first / t_bare:.2f} x bare"),
        ("bare pip install + start", f"{t_bare:.1f}s", "1.00"),
    ]
    print("| measure | wall time | ratio |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print()
    print("| run | remote module executions per host (max / mean) | changed |")
    print("|---|---|---|")
    for name, c in (("ping", c_ping), ("first remediation", c_first), ("no-op rerun", c_rerun),
                    ("audit", c_audit)):
        s = summarize(c)
        print(f"| {name} | {s['remote_max']} / {s['remote_mean']} | {s['changed']} |")
    print()
    print(f"healthy starts per host after all runs: {sorted(set(starts))} (1 = no restart after the first)")
    ok = (statistics.median(rerun) <= 3 * med_ping and statistics.median(audit) <= 2 * med_ping
          and t_first <= 1.5 * t_bare and summarize(c_rerun)["changed"] == 0 and set(starts) == {1})
    print("targets met" if ok else "targets NOT met")
    if not args.keep:
        subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", "sglang-bench"], cwd=ROOT, check=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
