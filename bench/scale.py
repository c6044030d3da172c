"""`scripts/bench --scale`: the cost of a compliant fleet's rerun and audit as the fleet grows.

One fleet of max(--sizes) hosts is started and converged once (the first remediation,
whose remote module executions per host are counted against the bare install's on
the smallest size). Then --repeat repetitions, each measuring every size in a rotated
order: `ansible -m ping`, the no-op remediate.yml rerun and audit.yml on the first N
hosts, each size against its own ping in the same repetition. At the largest size
the three are also measured at forks 50, for the extrapolation.

Printed and written to .cache/bench/scale.{md,json,png}: per size the medians with
min-max, the ratios to ping (ratio of the medians, and min-max of the per-repetition
ratios), the per-host slopes (least squares over the sizes, per repetition: median
and min-max) and an extrapolation to 1,000 hosts at forks 20 and 50.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from run import CACHE, ROOT, log, summarize, timed

TARGET = 1.3
KINDS = ("ping", "rerun", "audit")


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line (intercept, slope): the slope is the cost of one more host."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def fmt(s: dict, unit: str = "s", digits: int = 1) -> str:
    return f"{s['median']:.{digits}f}{unit} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def subset_inventory(all_hosts: Path, size: int) -> Path:
    """An inventory of the first SIZE hosts (the demo's group_vars beside it)."""
    d = CACHE / "scale" / f"hosts-{size}"
    d.mkdir(parents=True, exist_ok=True)
    lines = all_hosts.read_text().splitlines()
    start = lines.index("      hosts:") + 1
    end = lines.index("      vars:")
    (d / "hosts.yml").write_text("\n".join(lines[:start] + lines[start:start + size] + lines[end:]) + "\n")
    link = d / "group_vars"
    if not link.is_symlink():
        link.symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    return d


def plot(src: Path, out: Path) -> bool:
    """The PNG, from the measured numbers, with matplotlib in its own pinned venv (.cache/plot-venv)."""
    venv = ROOT / ".cache" / "plot-venv"
    lock = ROOT / "requirements" / "plot.lock"
    stamp = venv / "lock.sha"
    import hashlib
    want = hashlib.sha256(lock.read_bytes()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == want):
        log("creating .cache/plot-venv from requirements/plot.lock")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        res = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--only-binary=:all:", "-r", str(lock)])
        if res.returncode != 0:
            log("matplotlib could not be installed: no plot (the numbers are in scale.json and scale.md)")
            return False
        stamp.write_text(want)
    return subprocess.run([str(venv / "bin" / "python"), str(ROOT / "bench" / "plot.py"), str(src), str(out)]).returncode == 0


def healthy_starts(inv: Path, forks: list[str]) -> dict[str, int]:
    """Per host, the test double's healthy starts so far (one line each in its start log)."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json")
    res = json.loads(subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", str(inv), *forks, "sglang", "-m", "ansible.builtin.command",
         "-a", "wc -l /var/lib/sglang/starts.log"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        check=True).stdout)
    return {h: int(r["stdout"].split()[0]) for h, r in res["plays"][0]["tasks"][0]["hosts"].items()}


def scale(args) -> int:
    sizes = sorted({int(x) for x in args.sizes.split(",")})
    biggest = sizes[-1]
    py = str(ROOT / ".venv" / "bin" / "python")
    bin_dir = ROOT / ".venv" / "bin"
    out_dir = CACHE / "scale"
    out_dir.mkdir(parents=True, exist_ok=True)
    all_inv = out_dir / "all"
    all_inv.mkdir(exist_ok=True)
    if not (all_inv / "group_vars").is_symlink():
        (all_inv / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")

    fresh = [f"{args.prefix}-{i}" for i in range(1, sizes[0] + 1)]
    if not args.reuse:
        log(f"removing any previous {args.prefix} fleet")
        subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", args.prefix], cwd=ROOT, check=True)
    else:
        # The first remediation is counted on fresh hosts: the smallest size's hosts start again.
        subprocess.run(["docker", "rm", "-f", *fresh], cwd=ROOT, stdout=subprocess.DEVNULL, check=False)
    log(f"{biggest} hosts ({args.prefix}-1 .. {args.prefix}-{biggest})")
    subprocess.run([py, "testbed/testbed.py", "fleet-up", "--prefix", args.prefix, "--count", str(biggest),
                    "--group", "sglang", "--inventory", str(all_inv / "hosts.yml")], cwd=ROOT, check=True)
    invs = {n: ["-i", str(subset_inventory(all_inv / "hosts.yml", n))] for n in sizes}
    subprocess.run([str(ROOT / "scripts" / "wheelhouse"), str(ROOT / ".cache" / "wheelhouse"), "0.5.9"],
                   cwd=ROOT, check=True)
    forks = ["--forks", str(args.forks)]
    pb = str(bin_dir / "ansible-playbook")
    timed([pb, "-i", str(all_inv), *forks, "playbooks/testbed-prepare.yml"], name="scale-prepare")

    log(f"bare install + start on {sizes[0]} fresh hosts, for its module executions per host")
    _, c_bare = timed([pb, *invs[sizes[0]], *forks, "bench/bare.yml"], CACHE / "bare.json", name="scale-bare")
    log(f"first remediation of {biggest} hosts (serial 100%; with --reuse only the first {sizes[0]} are fresh)")
    t_first, c_all = timed([pb, "-i", str(all_inv), *forks, "-e", "sglang_serial=100%", "remediate.yml"],
                           CACHE / "first.json", name="scale-first")
    c_first = {h: c for h, c in c_all.items() if h in fresh}
    starts_before = healthy_starts(all_inv, forks)

    runs: dict = {(n, k, f): [] for n in sizes for k in KINDS for f in (args.forks, 50)}
    changed_total = 0
    last: dict = {}
    for rep in range(args.repeat):
        order = sizes[rep % len(sizes):] + sizes[:rep % len(sizes)]
        for n in order:
            for f in ([args.forks, 50] if n == biggest and args.forks != 50 else [args.forks]):
                log(f"repetition {rep + 1}/{args.repeat}, {n} hosts, forks {f}: ping, rerun, audit")
                fk = ["--forks", str(f)]
                t, last["ping"] = timed([str(bin_dir / "ansible"), *invs[n], *fk, "sglang", "-m", "ansible.builtin.ping"],
                                        CACHE / "ping.json", name=f"scale-ping-{n}-f{f}")
                runs[(n, "ping", f)].append(t)
                t, last["rerun"] = timed([pb, *invs[n], *fk, "remediate.yml"], CACHE / "rerun.json",
                                         name=f"scale-rerun-{n}-f{f}")
                runs[(n, "rerun", f)].append(t)
                t, last["audit"] = timed([pb, *invs[n], *fk, "playbooks/audit.yml"], CACHE / "audit.json",
                                         name=f"scale-audit-{n}-f{f}")
                runs[(n, "audit", f)].append(t)
                if n == biggest and f == args.forks:
                    last_big = dict(last)
                changed_total += sum(summarize(last[k])["changed"] or 0 for k in ("rerun", "audit"))

    after = healthy_starts(all_inv, forks)
    restarts = sorted({after[h] - starts_before.get(h, 0) for h in after})

    f0 = args.forks
    rows = []
    for n in sizes:
        row: dict = {"hosts": n}
        for k in KINDS:
            row[k] = stats(runs[(n, k, f0)])
        for k in ("rerun", "audit"):
            per_rep = [t / p for t, p in zip(runs[(n, k, f0)], runs[(n, "ping", f0)])]
            row["ratio_" + k] = dict(stats(per_rep), of_medians=row[k]["median"] / row["ping"]["median"])
        rows.append(row)
    fits = {}
    slopes = {}
    for k in KINDS:
        a, b = fit(sizes, [row[k]["median"] for row in rows])
        fits[k] = {"intercept": a, "slope": b}
        per_rep = [fit(sizes, [runs[(n, k, f0)][i] for n in sizes])[1] for i in range(args.repeat)]
        slopes[k] = stats(per_rep)
    slope_ratio = {k: fits[k]["slope"] / fits["ping"]["slope"] for k in ("rerun", "audit")}
    # 1,000 hosts: the line fitted at forks 20; at forks 50 the same start-up (intercept)
    # and the per-host cost measured at the largest size with forks 50.
    extra = {}
    for k in KINDS:
        t20 = fits[k]["intercept"] + fits[k]["slope"] * 1000
        extra[k] = {"forks20": t20}
        if runs[(biggest, k, 50)]:
            b50 = (statistics.median(runs[(biggest, k, 50)]) - fits[k]["intercept"]) / biggest
            extra[k]["forks50"] = fits[k]["intercept"] + b50 * 1000
            extra[k]["slope50"] = b50
            extra[k]["measured50"] = stats(runs[(biggest, k, 50)])

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    s_first, s_bare = summarize(c_first), summarize(c_bare)
    data = {"commit": commit, "date": date, "cores": os.cpu_count(), "forks": f0, "repeat": args.repeat,
            "sizes": rows, "fits": fits, "slopes": slopes, "slope_ratio": slope_ratio, "extrapolation": extra,
            "first": {"seconds": t_first, "fresh": not args.reuse, **s_first}, "bare": s_bare,
            "changed_total": changed_total, "restarts": restarts,
            "last_at_biggest": {k: summarize(v) for k, v in last_big.items()}}
    (out_dir / "scale.json").write_text(json.dumps(data, indent=1))

    mid = next((row for row in rows if row["hosts"] == 50), rows[-1])
    ok_rerun = mid["ratio_rerun"]["of_medians"] <= TARGET
    ok_audit = mid["ratio_audit"]["of_medians"] <= TARGET
    ok_slope = slope_ratio["rerun"] <= TARGET
    ok_first = s_first["remote_max"] is not None and s_first["remote_max"] <= 12
    ok_quiet = changed_total == 0 and restarts == [0]
    out = [f"{date}, commit {commit}, {os.cpu_count()} cores, forks {f0}, {args.repeat} repetitions "
           f"interleaved (median, min-max)", "",
           "| hosts | ping | no-op rerun | audit | rerun / ping | audit / ping |",
           "|---|---|---|---|---|---|"]
    for row in rows:
        out.append(f"| {row['hosts']} | {fmt(row['ping'])} | {fmt(row['rerun'])} | {fmt(row['audit'])} | "
                   f"{row['ratio_rerun']['of_medians']:.2f} ({row['ratio_rerun']['min']:.2f}-{row['ratio_rerun']['max']:.2f}) | "
                   f"{row['ratio_audit']['of_medians']:.2f} ({row['ratio_audit']['min']:.2f}-{row['ratio_audit']['max']:.2f}) |")
    out += ["", f"| per-host slope, {sizes[0]} to {biggest} hosts | s/host (fit of the medians) | "
                "per repetition (median, min-max) | x ping's slope |", "|---|---|---|---|"]
    for k in KINDS:
        out.append(f"| {k} | {fits[k]['slope']:.3f} | {fmt(slopes[k], '', 3)} | "
                   f"{'1.00' if k == 'ping' else '%.2f' % slope_ratio[k]} |")
    out += ["", f"| 1,000 hosts (extrapolated) | forks {f0} | forks 50 | measured at {biggest} hosts, forks 50 |",
            "|---|---|---|---|"]
    for k in KINDS:
        e = extra[k]
        out.append(f"| {k} | {e['forks20']:.0f}s | {e.get('forks50', float('nan')):.0f}s | "
                   f"{fmt(e['measured50']) if 'measured50' in e else '-'} |")
    out += ["", "| run | remote module executions per host (max / mean) | changed |", "|---|---|---|"]
    out.append(f"| bare install + start ({sizes[0]} fresh hosts) | {s_bare['remote_max']} / {s_bare['remote_mean']} | "
               f"{s_bare['changed']} |")
    out.append(f"| first remediation ({len(c_first)} fresh hosts of {biggest} converged in {t_first:.0f}s) | "
               f"{s_first['remote_max']} / {s_first['remote_mean']} | {s_first['changed']} |")
    for k in KINDS:
        s = data["last_at_biggest"][k]
        out.append(f"| {k} (last, {biggest} hosts) | {s['remote_max']} / {s['remote_mean']} | {s['changed']} |")
    out += ["", f"changed over all no-op reruns and audits: {changed_total}; "
                f"restarts per host during them: {restarts}", "",
            f"- rerun <= {TARGET} x ping at 50 hosts: {'met' if ok_rerun else 'NOT met'}",
            f"- audit <= {TARGET} x ping at 50 hosts: {'met' if ok_audit else 'NOT met'}",
            f"- rerun slope <= {TARGET} x ping's slope: {'met' if ok_slope else 'NOT met'}",
            f"- first remediation <= 12 remote executions per host: {'met' if ok_first else 'NOT met'}",
            f"- 0 changed, 0 restarts: {'met' if ok_quiet else 'NOT met'}"]
    text = "\n".join(out) + "\n"
    print(text, end="")
    (out_dir / "scale.md").write_text(text)
    if plot(out_dir / "scale.json", out_dir / "scale.png"):
        log(f"plot: {out_dir / 'scale.png'} (copy it to bench/scale.png with the results)")
    log(f"written to {out_dir}/scale.{{md,json}}; per-run logs in {CACHE / 'logs'}")
    if not args.keep:
        subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", args.prefix], cwd=ROOT, check=True)
    return 0 if (ok_rerun and ok_audit and ok_slope and ok_quiet and ok_first) else 1
