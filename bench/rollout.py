#!/usr/bin/env python3
"""`scripts/bench --rollout`: the sliding window against lockstep batches, on restarts of unequal length.

Issue 43 ("Measure it"). A window (plugins/strategy/window.py over _rollout.Window) should finish a
rollout whose hosts take different times to come back close to the lower bound, where lockstep
batches pay each batch's slowest host. One run of this bench measures it:

  - N converged hosts (testbed/converged.py's image, the docker connection), host i serving with
    SGLANG_TEST_DOUBLE_STARTUP_DELAY = the i-th of --delays (seconds of 503 before healthy: the
    test double's "model load"; the list repeats when there are more hosts than delays);
  - the same change (the speculative flags flipped, 15/16 <-> 7/8, so that every host restarts
    every time) rolled out four ways by remediate.yml, sglang_max_unavailable = --window, the
    first host the one canary: (a) the window with the delays, (b) batches (sglang_serial
    [1, window]: the canary, then batches of the window) with the delays, (c) the window and
    (d) batches with every delay 1 s;
  - per way the makespan (wall seconds of ansible-playbook from start to exit) and the report's
    per-host times (SGLANG_REPORT_DIR under .cache/bench/rollout/reports/<way>);
  - the excess = makespan(delays) - makespan(1 s) of the window and of batches, against the lower
    bound LB = d(canary) + max(max d, sum of the other d / window), and the ideal schedules over the
    same delays and order: the greedy window (each host starts when one of the window's slots
    frees) and lockstep batches (each batch pays its max).

Before them one rollout that is not measured (the window, 1 s each; --warmup 0 leaves it out) takes
the fleet's first run after boot, so that no way pays the cold start alone.

Then, unless --soak 0, the soak's cost (issue 43's "the soak's added wall time at 2x the changed hosts
<= 1.2x that at 1x"): three more rollouts under the window, 1 s each, (e) the first half of the hosts
(--limit; the canary is the first host) without a soak, (f) the same half with sglang_soak_seconds =
--soak, (g) every host with it. Each host soaks after its own gate (tasks/soak_host.yml), holding no
slot; its row says "after its gate: passed". The soak's added wall time is makespan(f) - makespan(e)
at N/2 hosts and makespan(g) - makespan(c) at N; their ratio is the target. Every rollout gives its
hosts the flags they do not run (tracked per host: a host outside a limit keeps its own), so that
each restarts every host it covers and no other: the healthy starts per host say so at the end.

Printed as tables, written to .cache/bench/rollout.json; per-run logs in .cache/bench/logs/rollout-*.log.
The containers are removed at the end (--keep leaves them). Timings are noisy on a shared machine:
compare the ways within one run.

Usage:
  scripts/bench --rollout [--hosts 12] [--window 4] [--delays 12,30,6,14,26,8,22,10,28,18,20,16]
                          [--forks 20] [--warmup 1] [--soak 3] [--prefix sglang-rollout] [--keep]
"""
from __future__ import annotations

import argparse
import datetime
import heapq
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from run import CACHE, ROOT, bench_env, finish, log, summarize
from scale import healthy_starts, starts_from_json  # noqa: F401 (starts_from_json: tested here)

# Issue 43's loads: the canary's first, then the others in inventory order.
DEFAULT_DELAYS = (12, 30, 6, 14, 26, 8, 22, 10, 28, 18, 20, 16)
DEFAULT_WINDOW = 4
# The second load of each way: every host about as fast as the test double gets.
FLAT_DELAY = 1.0
SUITE = "bookworm"
DELAY_VAR = "SGLANG_TEST_DOUBLE_STARTUP_DELAY"
# The converged hosts serve the role's defaults (15/1/16); 7/1/8 is the pair the scenarios roll out
# (molecule/slicing/tests/test_slicing.py, FLAGS_A). Rollout k (the warm-ups counted) sets FLAGS[k % 2]: each one
# restarts every host. A rollout over some hosts only (the soak's) leaves the others on theirs: next_flags
# picks, per rollout, the pair its hosts do not run.
FLAGS = ({"sglang_speculative_num_steps": 7, "sglang_speculative_num_draft_tokens": 8},
         {"sglang_speculative_num_steps": 15, "sglang_speculative_num_draft_tokens": 16})
# The four ways, in the order they run: (name, mode, loads).
WAYS = (("window-delays", "window", "delays"), ("batches-delays", "batches", "delays"),
        ("window-1s", "window", "1s"), ("batches-1s", "batches", "1s"))
# The soak's three ways, after WAYS, all under the window with 1-s loads: (name, hosts, soak). "half" is the
# first half of the inventory (the canary in it), "all" every host; the N-host run without a soak is
# WAYS' window-1s.
SOAK_WAYS = (("window-1s-half", "half", False), ("window-1s-half-soak", "half", True),
             ("window-1s-soak", "all", True))
DEFAULT_SOAK = 3
# Issue 43's target: the soak's added wall time at 2x the changed hosts <= 1.2x that at 1x.
SOAK_TARGET = 1.2
SOAK_PASSED = "after its gate: passed"
OUT = CACHE / "rollout"
DEMO_VARS = ROOT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml"


# --------------------------------------------------------------------------- the ideal schedules (pure)


def host_delays(hosts: int, delays: Sequence[float]) -> list[float]:
    """Each host's delay, in host order: the list's i-th for host i, repeated when the fleet is longer."""
    if not delays:
        raise ValueError("no delays")
    return [float(delays[i % len(delays)]) for i in range(hosts)]


def lower_bound(delays: Sequence[float], window: int) -> float:
    """No rollout of these hosts (the first a canary alone, then at most ``window`` at once) ends sooner:
    the canary's time, then the longest host or the others' total shared by the window, whichever is more."""
    if not delays:
        return 0.0
    rest = [float(d) for d in delays[1:]]
    return float(delays[0]) + (max(max(rest), sum(rest) / max(window, 1)) if rest else 0.0)


def ideal_window(delays: Sequence[float], window: int) -> float:
    """The makespan of the greedy sliding window with no overhead: the canary alone, then the hosts in
    order, each starting as soon as one of the ``window`` slots frees (what the strategy aims at)."""
    if not delays:
        return 0.0
    start = float(delays[0])
    slots = [start] * max(window, 1)
    end = start
    for d in delays[1:]:
        free = heapq.heappop(slots)
        heapq.heappush(slots, free + float(d))
        end = max(end, free + float(d))
    return end


def ideal_batches(delays: Sequence[float], batch: int) -> float:
    """The makespan of lockstep batches with no overhead: the canary alone, then batches of ``batch``
    hosts in order, each waiting for its slowest host before the next starts (sglang_serial [1, batch])."""
    if not delays:
        return 0.0
    rest = [float(d) for d in delays[1:]]
    size = max(batch, 1)
    return float(delays[0]) + sum(max(rest[i:i + size]) for i in range(0, len(rest), size))


def analysis(makespans: dict[str, float], delays: Sequence[float], window: int) -> dict[str, Any]:
    """What the four makespans say: per mode the excess the delays add, the ideal schedules over the same
    delays (and over 1 s each), the lower bound, and the excess and the ideal as ratios of it."""
    flat = [FLAT_DELAY] * len(delays)
    lb = lower_bound(delays, window)
    ideal = {"window": {"delays": ideal_window(delays, window), "1s": ideal_window(flat, window)},
             "batches": {"delays": ideal_batches(delays, window), "1s": ideal_batches(flat, window)}}
    out: dict[str, Any] = {"lower_bound": lb, "ideal": ideal}
    for mode in ("window", "batches"):
        excess = makespans[f"{mode}-delays"] - makespans[f"{mode}-1s"]
        ideal_excess = ideal[mode]["delays"] - ideal[mode]["1s"]
        out[mode] = {"makespan_delays": makespans[f"{mode}-delays"], "makespan_1s": makespans[f"{mode}-1s"],
                     "excess": excess, "excess_over_lb": excess / lb if lb else None,
                     "ideal": ideal[mode]["delays"], "ideal_over_lb": ideal[mode]["delays"] / lb if lb else None,
                     "ideal_excess": ideal_excess, "excess_over_ideal_excess":
                     excess / ideal_excess if ideal_excess else None}
    return out


def next_flags(current: dict[str, int], hosts: Sequence[str]) -> int:
    """The index in FLAGS of the pair that every one of HOSTS does not run (CURRENT: host -> the index of
    the pair it runs), so that a rollout over them restarts each; CURRENT is updated. ValueError when they
    run different pairs (one extra-vars pair could not restart them all)."""
    held = {current[h] for h in hosts}
    if len(held) != 1:
        raise ValueError(f"the hosts run different flags: {sorted(held)}")
    new = (held.pop() + 1) % len(FLAGS)
    for h in hosts:
        current[h] = new
    return new


def soak_cost(makespans: dict[str, float], half: int, hosts: int, seconds: int) -> dict[str, Any]:
    """The soak's added wall time at HALF hosts (makespan with the soak - without) and at HOSTS, and their
    ratio against issue 43's target (None when the half's added time is not positive)."""
    at_half = makespans["window-1s-half-soak"] - makespans["window-1s-half"]
    at_all = makespans["window-1s-soak"] - makespans["window-1s"]
    ratio = at_all / at_half if at_half > 0 else None
    return {"seconds": seconds, "hosts_half": half, "hosts_all": hosts,
            "makespan_half": makespans["window-1s-half"], "makespan_half_soak": makespans["window-1s-half-soak"],
            "makespan_all": makespans["window-1s"], "makespan_all_soak": makespans["window-1s-soak"],
            "added_half": at_half, "added_all": at_all, "ratio": ratio, "target": SOAK_TARGET,
            "meets_target": ratio is not None and ratio <= SOAK_TARGET}


def soak_table(s: dict[str, Any]) -> list[str]:
    """The soak's lines of the table."""
    ratio = "-" if s["ratio"] is None else f"{s['ratio']:.2f}"
    return ["", f"soak of {s['seconds']} s per host, after its own gate (window, 1 s each):", "",
            "| changed hosts | makespan without soak | makespan with soak | soak's added wall time |",
            "|---|---|---|---|",
            f"| {s['hosts_half']} | {s['makespan_half']:.1f}s | {s['makespan_half_soak']:.1f}s | {s['added_half']:.1f}s |",
            f"| {s['hosts_all']} | {s['makespan_all']:.1f}s | {s['makespan_all_soak']:.1f}s | {s['added_all']:.1f}s |",
            "", f"added({s['hosts_all']}) / added({s['hosts_half']}) = {ratio} (target <= {s['target']:g}: "
            f"{'met' if s['meets_target'] else 'not met'})"]


def _at(stamp: Any) -> float | None:
    try:
        return datetime.datetime.fromisoformat(str(stamp)).timestamp()
    except (TypeError, ValueError):
        return None


def phases(run: dict, delays: dict[str, float], canary: str) -> dict[str, float | None]:
    """Where one rollout's makespan goes, from its report's moments (seconds): ``before_canary``, from the
    run's start to the canary leaving rotation (the probe pass, the plan, the canary's preparation);
    ``canary_out``, the canary out of rotation; ``canary_to_rest``, from the canary back to the next host
    leaving (the canary batch's end, the rest's preparation that the lookahead did not hide); ``rest``,
    from there to the last host back; ``after``, from the last host back to the run's end (the play's
    end, the report). ``out_over_load``: per host, the mean time out of rotation beyond its model load
    (drain, stop, switch, start, the gate's polling, undrain)."""
    hosts = run["hosts"]
    left = {h: _at(r.get("left_rotation_at")) for h, r in hosts.items()}
    back = {h: _at(r.get("back_in_rotation_at")) for h, r in hosts.items()}
    start, end = _at(run.get("started")), _at(run.get("updated"))
    others = [h for h in hosts if h != canary and left.get(h) is not None]
    first_rest = min((left[h] for h in others), default=None)
    last_back = max((b for b in back.values() if b is not None), default=None)

    def span(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(b - a, 1)

    over = [hosts[h]["out_of_rotation_s"] - delays[h] for h in hosts
            if hosts[h].get("out_of_rotation_s") is not None and h in delays]
    return {"before_canary": span(start, left.get(canary)), "canary_out": span(left.get(canary), back.get(canary)),
            "canary_to_rest": span(back.get(canary), first_rest), "rest": span(first_rest, last_back),
            "after": span(last_back, end), "out_over_load": round(sum(over) / len(over), 1) if over else None}


PHASES = (("before_canary", "start -> canary out (probe pass, plan, canary's preparation)"),
          ("canary_out", "canary out of rotation"),
          ("canary_to_rest", "canary back -> next host out"),
          ("rest", "next host out -> last host back"),
          ("after", "last host back -> end"),
          ("out_over_load", "per host, out of rotation beyond its load (mean)"))


def table(data: dict[str, Any]) -> str:
    """The markdown the bench prints (and keeps in .cache/bench/rollout/rollout.md)."""
    a, w = data["analysis"], data["window"]
    out = [f"{data['date']}, commit {data['commit']}, {data['cores']} cores, {data['hosts']} hosts, "
           f"window {w} (sglang_max_unavailable), forks {data['forks']}, one canary, "
           f"batches' strategy {data['batches_strategy']}",
           f"delays (s, host order, the canary first): {', '.join(f'{d:g}' for d in data['delays'])}", "",
           "| rollout | loads | makespan | ideal schedule | makespan - ideal | the ideal schedule over the measured "
           "out-of-rotation times | peak out of rotation |",
           "|---|---|---|---|---|---|---|"]
    for name, mode, loads in WAYS:
        run = data["runs"][name]
        ideal = a["ideal"][mode][loads]
        sim = run.get("ideal_over_measured")
        out.append(f"| {mode} | {'delays' if loads == 'delays' else '1 s each'} | {run['makespan']:.1f}s "
                   f"| {ideal:.1f}s | {run['makespan'] - ideal:+.1f}s | {'-' if sim is None else f'{sim:.1f}s'} "
                   f"| {run.get('peak_out_of_rotation') if run.get('peak_out_of_rotation') is not None else '-'} |")
    out += ["", f"LB = d(canary) + max(max d, sum of the other d / {w}) = {a['lower_bound']:.1f}s", "",
            "| | window | batches |", "|---|---|---|"]

    def row(label: str, key: str, fmt: str) -> str:
        cells = [("-" if a[m][key] is None else format(a[m][key], fmt)) for m in ("window", "batches")]
        return f"| {label} | {cells[0]} | {cells[1]} |"

    out += [row("excess = makespan(delays) - makespan(1 s), s", "excess", ".1f"),
            row("excess / LB", "excess_over_lb", ".2f"),
            row("ideal schedule over the delays, s", "ideal", ".1f"),
            row("ideal / LB", "ideal_over_lb", ".2f"),
            row("ideal excess = ideal(delays) - ideal(1 s), s", "ideal_excess", ".1f"),
            row("excess / ideal excess", "excess_over_ideal_excess", ".2f")]
    out += ["", "where the makespan goes, s (from each report's moments):", "",
            "| | " + " | ".join(f"{m}, {'delays' if lo == 'delays' else '1 s'}" for _, m, lo in WAYS) + " |",
            "|---|" + "---|" * len(WAYS)]
    for key, label in PHASES:
        cells = [data["runs"][name].get("phases", {}).get(key) for name, _, _ in WAYS]
        out.append(f"| {label} | " + " | ".join("-" if c is None else f"{c:.1f}" for c in cells) + " |")
    if data.get("soak"):
        out += soak_table(data["soak"])
    out += ["", f"healthy starts per host (1 at boot, then one per rollout that covered it, {len(data['warmups'])} "
                f"warm-up(s) included): {data['starts']}"]
    passed = "every rollout passed and restarted every host it covered" + (
        ", every soak passed" if data.get("soak") else "")
    out += [f"problem: {p}" for p in data["problems"]] or [passed]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the fleet


def testbed_modules():
    """testbed/testbed.py and testbed/converged.py (the test bed's container flags, the converged image)."""
    if str(ROOT / "testbed") not in sys.path:
        sys.path.insert(0, str(ROOT / "testbed"))
    import converged  # noqa: PLC0415
    import testbed  # noqa: PLC0415
    return testbed, converged


def start_fleet(prefix: str, count: int) -> list[str]:
    """COUNT fresh containers of the converged image, labelled as testbed.py's fleet PREFIX (so that
    `testbed.py fleet-down --prefix PREFIX` removes them), booted."""
    testbed, converged = testbed_modules()
    py = str(ROOT / ".venv" / "bin" / "python")
    subprocess.run([str(ROOT / "scripts" / "wheelhouse"), str(ROOT / ".cache" / "wheelhouse"), converged.VERSION],
                   cwd=ROOT, check=True)
    # Rebuilt only when the checkout's role, plugins or test double changed since it was made.
    subprocess.run([py, "testbed/testbed.py", "converged", "--suite", SUITE], cwd=ROOT, check=True)
    subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", prefix], cwd=ROOT, check=True)
    names = testbed.fleet_names(prefix, count)
    for name in names:
        log(f"starting container {name} ({converged.tag(SUITE)})")
        testbed.run(["docker", "run", "-d", "--name", name, "--hostname", name,
                     "--label", f"{testbed.FLEET_LABEL}={prefix}", *testbed.container_flags(),
                     converged.tag(SUITE), "/lib/systemd/systemd"])
    testbed.wait_booted(names)
    return names


def write_inventory(inv: Path, names: list[str], delays: Sequence[float]) -> None:
    """The fleet as the group sglang, with the demo's variables (test double, wheelhouse) and, per host,
    the demo's sglang_environment with its own startup delay (the dict is replaced whole by host_vars)."""
    import yaml  # noqa: PLC0415 (the controller's venv has it: ansible-core needs it)
    testbed, _ = testbed_modules()
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "host_vars").mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(testbed.render_inventory(names, "sglang", {}))
    (inv / "group_vars" / "sglang.yml").write_text(DEMO_VARS.read_text())
    environment = yaml.safe_load(DEMO_VARS.read_text())["sglang_environment"]
    for name, delay in zip(names, delays):
        (inv / "host_vars" / f"{name}.yml").write_text(
            yaml.safe_dump({"sglang_environment": dict(environment, **{DELAY_VAR: f"{delay:g}"})}))


def ansible_env(forks: int, report_dir: Path | None, counts: Path | None) -> dict:
    """bench/run.py's environment of a measured run, the report in REPORT_DIR, the plan's forks the run's."""
    env = bench_env(counts)
    if report_dir is not None:
        env["SGLANG_REPORT_DIR"] = str(report_dir)
    # The plan reads the forks from the configuration (DEFAULT_FORKS), not from --forks.
    env["ANSIBLE_FORKS"] = str(forks)
    return env


def prepare(inv: Path, forks: int) -> None:
    """The scenarios' prepare step of a converged host: booted, this checkout's image, its server healthy."""
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inv), "--forks", str(forks),
           "molecule/shared/prepare-converged.yml"]
    env = dict(ansible_env(forks, OUT / "reports" / "prepare", None), MOLECULE_PROJECT_DIRECTORY=str(ROOT),
               MOLECULE_DISTRO=SUITE)
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finish(cmd, res, None, True, "rollout-prepare")


def rollout(inv: Path, forks: int, name: str, mode: str, window: int, flags: dict, health_timeout: int,
            limit: Sequence[str] | None = None, soak: int = 0) -> dict:
    """One measured remediate.yml (over LIMIT only if given, each host soaking SOAK s if > 0): its makespan,
    the sglang_bench counts, and the report's per-host times."""
    report_dir = OUT / "reports" / name
    shutil.rmtree(report_dir, ignore_errors=True)
    counts = CACHE / f"rollout-{name}.json"
    extra: dict[str, Any] = dict(flags, sglang_max_unavailable=window, sglang_health_timeout=health_timeout)
    if mode == "batches":
        extra["sglang_serial"] = [1, window]
    if soak > 0:
        extra["sglang_soak_seconds"] = soak
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inv), "--forks", str(forks),
           *(["--limit", ",".join(limit)] if limit else []), "-e", json.dumps(extra), "remediate.yml"]
    env = ansible_env(forks, report_dir, counts)
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    makespan = time.monotonic() - start
    c = finish(cmd, res, counts, True, f"rollout-{name}")
    report = json.loads((report_dir / "latest" / "fleet.json").read_text())
    hosts = {r["host"]: {k: r.get(k) for k in ("status", "batch", "restarted", "out_of_rotation_s",
                                               "left_rotation_at", "back_in_rotation_at",
                                               "restart_to_healthy_s", "soak", "error")} for r in report["hosts"]}
    window_doc = (report.get("run") or {}).get("window") or {}
    return {"makespan": makespan, "extra_vars": extra, "hosts": hosts, "counts": summarize(c),
            "started": (report.get("run") or {}).get("started"), "updated": (report.get("run") or {}).get("updated"),
            "peak_out_of_rotation": window_doc.get("peak_out_of_rotation"), "report": str(report_dir / "latest")}


def measured_ideal(run: dict, names: list[str], mode: str, window: int) -> float | None:
    """The ideal schedule of MODE over the times the hosts were really out of rotation (None if one is
    missing): how much of the makespan the schedule explains, and how much is the run's own overhead."""
    times = [run["hosts"].get(n, {}).get("out_of_rotation_s") for n in names]
    if any(t is None for t in times):
        return None
    return (ideal_window if mode == "window" else ideal_batches)(times, window)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=len(DEFAULT_DELAYS))
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                    help="sglang_max_unavailable, and the batches' size after the canary")
    ap.add_argument("--delays", default=",".join(str(d) for d in DEFAULT_DELAYS),
                    help="seconds of startup per host, comma-separated, the canary's first (repeated if short)")
    ap.add_argument("--forks", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=1,
                    help="rollouts before the measured ones (the window, 1 s each), not measured")
    ap.add_argument("--soak", type=int, default=DEFAULT_SOAK,
                    help="seconds of soak per host in the soak's rollouts (after the four ways); 0 leaves them out")
    ap.add_argument("--keep", action="store_true", help="leave the containers running")
    ap.add_argument("--prefix", default="sglang-rollout", help="container names: PREFIX-1 .. PREFIX-N")
    args = ap.parse_args(argv)
    if args.hosts < 2 or args.window < 1 or args.warmup < 0 or args.soak < 0:
        ap.error("--hosts must be at least 2 (a canary and one more), --window at least 1, --warmup and --soak "
                 "at least 0")
    delays = host_delays(args.hosts, [float(d) for d in args.delays.split(",") if d.strip()])
    health_timeout = max(60, math.ceil(max(delays)) + 30)

    shutil.rmtree(OUT, ignore_errors=True)
    inv = OUT / "inventory"
    names: list[str] = []
    runs: dict[str, dict] = {}
    py = str(ROOT / ".venv" / "bin" / "python")
    try:
        log(f"{args.hosts} converged hosts ({args.prefix}-1 .. {args.prefix}-{args.hosts})")
        names = start_fleet(args.prefix, args.hosts)
        write_inventory(inv, names, delays)
        prepare(inv, args.forks)
        # The pair each host runs (the converged image serves the role's defaults, FLAGS[1]), and the
        # healthy starts each should have at the end (one at boot, then one per rollout that covers it).
        flags_of = {n: 1 for n in names}
        want = {n: 1 for n in names}

        def flip(hosts: Sequence[str]) -> dict:
            for h in hosts:
                want[h] += 1
            return FLAGS[next_flags(flags_of, hosts)]

        warmups: list[float] = []
        for k in range(args.warmup):
            write_inventory(inv, names, [FLAT_DELAY] * len(names))
            log(f"warm-up {k + 1}/{args.warmup}: window, 1 s each (log: {CACHE / 'logs' / 'rollout-warmup.log'})")
            warmups.append(rollout(inv, args.forks, "warmup", "window", args.window, flip(names),
                                   health_timeout)["makespan"])
        ways = len(WAYS) + (len(SOAK_WAYS) if args.soak else 0)
        for k, (name, mode, loads) in enumerate(WAYS):
            write_inventory(inv, names, delays if loads == "delays" else [FLAT_DELAY] * len(names))
            log(f"rollout {k + 1}/{ways}: {mode}, {'the delays' if loads == 'delays' else '1 s each'} "
                f"(log: {CACHE / 'logs' / f'rollout-{name}.log'})")
            runs[name] = rollout(inv, args.forks, name, mode, args.window, flip(names), health_timeout)
            runs[name]["covers"] = list(names)
            runs[name]["ideal_over_measured"] = measured_ideal(runs[name], names, mode, args.window)
            loads_of = dict(zip(names, delays if loads == "delays" else [FLAT_DELAY] * len(names)))
            runs[name]["phases"] = phases(runs[name], loads_of, names[0])
            log(f"{name}: {runs[name]['makespan']:.1f}s")
        half = names[:len(names) // 2]
        if args.soak:
            write_inventory(inv, names, [FLAT_DELAY] * len(names))
            for k, (name, which, soaked) in enumerate(SOAK_WAYS, start=len(WAYS)):
                covers = half if which == "half" else names
                seconds = args.soak if soaked else 0
                log(f"rollout {k + 1}/{ways}: window, 1 s each, {len(covers)} hosts, "
                    f"{f'a soak of {seconds} s' if seconds else 'no soak'} (log: {CACHE / 'logs' / f'rollout-{name}.log'})")
                runs[name] = rollout(inv, args.forks, name, "window", args.window, flip(covers), health_timeout,
                                     limit=covers if which == "half" else None, soak=seconds)
                runs[name]["covers"] = list(covers)
                runs[name]["soak_seconds"] = seconds
                log(f"{name}: {runs[name]['makespan']:.1f}s")
        starts = healthy_starts(inv, ["--forks", str(args.forks)])
    finally:
        if names and not args.keep:
            subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", args.prefix], cwd=ROOT, check=False)

    # A rollout that restarted a host leaves it "changed" in the report; one whose limit left a host out
    # leaves it "not reached" (or without a row), never restarted.
    problems = []
    for name, run in runs.items():
        for host in run["covers"]:
            row = run["hosts"].get(host)
            if row is None:
                problems.append(f"{name}: {host} has no row in the report")
            elif row["status"] != "changed" or not row["restarted"]:
                problems.append(f"{name}: {host} {row['status']}{'' if row['restarted'] else ', not restarted'}"
                                f"{': ' + row['error'] if row['error'] else ''}")
            elif run.get("soak_seconds") and row.get("soak") != SOAK_PASSED:
                problems.append(f"{name}: {host}'s soak is {row.get('soak')!r}, not {SOAK_PASSED!r}")
        problems += [f"{name}: {host}, outside the limit, {row['status']}" + (", restarted" if row["restarted"] else "")
                     for host, row in run["hosts"].items()
                     if host not in run["covers"] and (row["restarted"] or row["status"] not in ("not reached",))]
    problems += [f"{host}: {starts[host]} healthy starts, not {want[host]}" if host in starts
                 else f"{host}: no count of its healthy starts" for host in names if starts.get(host) != want[host]]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    data = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "cores": os.cpu_count(),
            "hosts": args.hosts, "window": args.window, "forks": args.forks, "delays": delays,
            "warmups": warmups,
            "batches_strategy": os.environ.get("ANSIBLE_STRATEGY") or "ansible.cfg's (ansible.builtin.linear)",
            "analysis": analysis({name: run["makespan"] for name, run in runs.items()}, delays, args.window),
            "soak": soak_cost({name: run["makespan"] for name, run in runs.items()}, len(half), len(names),
                              args.soak) if args.soak else None,
            "runs": runs, "starts": sorted(set(starts.values())), "problems": problems}
    text = table(data)
    print(text, end="")
    (CACHE / "rollout.json").write_text(json.dumps(data, indent=1) + "\n")
    (OUT / "rollout.md").write_text(text)
    log(f"written to {CACHE / 'rollout.json'} and {OUT / 'rollout.md'}; per-run logs in {CACHE / 'logs'}/rollout-*.log")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
