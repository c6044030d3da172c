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

With --scale it measures the curve instead (see scale()): fleets of 10, 25, 50 and
100 hosts, each against its own ping in the same run.
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


def bench_env(counts: Path | None) -> dict:
    """The environment of a measured ansible run: the sglang_bench counts to COUNTS, reports in the cache."""
    env = dict(os.environ)
    # Ad-hoc `ansible` loads callbacks only when asked: the ping count comes from the same callback.
    env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] = "1"
    # Every task's time in the log, not only the ten slowest.
    env["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "all"
    if counts is not None:
        env["SGLANG_BENCH_OUT"] = str(counts)
        counts.unlink(missing_ok=True)
    env["SGLANG_REPORT_DIR"] = str(CACHE / "reports")
    return env


def finish(cmd: list[str], res: subprocess.CompletedProcess, counts: Path | None, check: bool, name: str) -> dict:
    """Keep the run's output in .cache/bench/logs/<name>.log (the last run of each); its counts."""
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{name or Path(cmd[-1]).stem}.log").write_text(res.stdout)
    if check and res.returncode != 0:
        sys.stderr.write(res.stdout[-6000:])
        raise SystemExit(f"bench: {' '.join(cmd)} failed (exit {res.returncode})")
    return json.loads(counts.read_text()) if counts is not None and counts.exists() else {}


def timed(cmd: list[str], counts: Path | None = None, check: bool = True, name: str = "") -> tuple[float, dict]:
    """Run an ansible command; return wall seconds and the callback's per-host counts."""
    env = bench_env(counts)
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return time.monotonic() - start, finish(cmd, res, counts, check, name)


def summarize(counts: dict) -> dict:
    """Per-host remote executions (max and mean) and total changed."""
    if not counts:
        return {"remote_max": None, "remote_mean": None, "changed": None, "memo": ""}
    remote = [c["remote"] for c in counts.values()]
    return {"remote_max": max(remote), "remote_mean": round(statistics.mean(remote), 2),
            "changed": sum(c["changed"] for c in counts.values()),
            "memo": ", ".join("%s %d" % (m, sum(1 for c in counts.values() if c.get("memo") == m))
                              for m in sorted({str(c.get("memo")) for c in counts.values()}) if m != "None")}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}s (min {min(values):.1f}, max {max(values):.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--forks", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="leave the containers running")
    ap.add_argument("--prefix", default="sglang-bench", help="container names: PREFIX-1 .. PREFIX-N")
    ap.add_argument("--scale", action="store_true",
                    help="measure the scaling curve (--sizes) instead of the one-size benchmark")
    ap.add_argument("--sizes", default="10,25,50,100", help="fleet sizes of --scale, comma-separated")
    ap.add_argument("--reuse", action="store_true",
                    help="--scale: keep the hosts of an earlier --keep run; only the smallest size's hosts start fresh")
    args = ap.parse_args()
    if args.scale:
        from scale import scale  # bench/scale.py, beside this file
        return scale(args)

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
    subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", args.prefix], cwd=ROOT, check=True)
    subprocess.run([py, "testbed/testbed.py", "fleet-up", "--prefix", args.prefix, "--count", str(args.hosts),
                    "--group", "sglang", "--inventory", str(inventory)], cwd=ROOT, check=True)
    subprocess.run([str(ROOT / "scripts" / "wheelhouse"), str(ROOT / ".cache" / "wheelhouse"), "0.5.9"],
                   cwd=ROOT, check=True)
    timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "playbooks/testbed-prepare.yml"])

    log("first remediation: bare install + start, then the role, on the same fresh hosts")
    t_bare, _ = timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "bench/bare.yml"], name="bare")
    t_first, c_first = timed([str(bin_dir / "ansible-playbook"), *inv, *forks,
                              "-e", "sglang_serial=100%", "remediate.yml"], CACHE / "first.json", name="first")

    ping, rerun, audit = [], [], []
    c_rerun: dict = {}
    c_audit: dict = {}
    c_ping: dict = {}
    changed_total = 0
    for i in range(args.repeat):
        log(f"repetition {i + 1}/{args.repeat}: ping, no-op rerun, audit")
        t, c_ping = timed([str(bin_dir / "ansible"), *inv, *forks, "sglang", "-m", "ansible.builtin.ping"],
                          CACHE / "ping.json", name="ping")
        ping.append(t)
        t, c_rerun = timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "remediate.yml"],
                           CACHE / "rerun.json", name="rerun")
        rerun.append(t)
        t, c_audit = timed([str(bin_dir / "ansible-playbook"), *inv, *forks, "playbooks/audit.yml"],
                           CACHE / "audit.json", name="audit")
        audit.append(t)
        changed_total += (summarize(c_rerun)["changed"] or 0) + (summarize(c_audit)["changed"] or 0)

    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json")
    restarts = json.loads(subprocess.run(
        [str(bin_dir / "ansible"), *inv, *forks, "sglang", "-m", "ansible.builtin.command",
         "-a", "wc -l /var/lib/sglang/starts.log"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        check=True).stdout)
    starts = [int(r["stdout"].split()[0]) for r in restarts["plays"][0]["tasks"][0]["hosts"].values()]

    med_ping = statistics.median(ping)
    r_rerun, r_audit, r_first = statistics.median(rerun) / med_ping, statistics.median(audit) / med_ping, t_first / t_bare
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    out: list[str] = [
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {os.cpu_count()} cores, "
        f"{args.hosts} hosts, forks {args.forks}, {args.repeat} repetitions (median, min-max)",
        "",
        "| measure | wall time | ratio | target |",
        "|---|---|---|---|",
        f"| ping | {spread(ping)} | 1.00 | |",
        f"| no-op remediate.yml rerun | {spread(rerun)} | {r_rerun:.2f} x ping | <= 3 x ping: "
        f"{'met' if r_rerun <= 3 else 'NOT met'} |",
        f"| audit.yml | {spread(audit)} | {r_audit:.2f} x ping | <= 2 x ping: {'met' if r_audit <= 2 else 'NOT met'} |",
        f"| bare pip install + start | {t_bare:.1f}s | 1.00 | |",
        f"| first remediation (role) | {t_first:.1f}s | {r_first:.2f} x bare | <= 1.5 x bare: "
        f"{'met' if r_first <= 1.5 else 'NOT met'} |",
        "",
        "| run | remote module executions per host (max / mean) | changed | probe's audit memo |",
        "|---|---|---|---|",
    ]
    for name, c in (("ping", c_ping), ("first remediation", c_first), ("no-op rerun (last)", c_rerun),
                    ("audit (last)", c_audit)):
        s = summarize(c)
        out.append(f"| {name} | {s['remote_max']} / {s['remote_mean']} | {s['changed']} | {s['memo'] or '-'} |")
    out += ["", f"changed over all no-op reruns and audits: {changed_total}",
            f"healthy starts per host after all runs: {sorted(set(starts))} (1 = no restart after the first)"]
    ok = r_rerun <= 3 and r_audit <= 2 and r_first <= 1.5 and changed_total == 0 and set(starts) == {1}
    out.append("targets met" if ok else "targets NOT met")
    text = "\n".join(out) + "\n"
    print(text, end="")
    (CACHE / "results.md").write_text(text)
    log(f"written to {CACHE / 'results.md'}; per-run logs in {CACHE / 'logs'}")
    if not args.keep:
        subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", args.prefix], cwd=ROOT, check=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
