"""`scripts/bench --scale`: what a fleet costs the controller, per host, as it grows.

One fleet of max(--sizes) hosts is started. It is converged in chunks (the first
--sizes[0] hosts, then the hosts up to each next size), each chunk a first remediation
of fresh hosts (with --reuse only the first chunk is fresh). Then --repeat repetitions,
each measuring every size in a rotated order: `ansible -m ping`, the no-op remediate.yml
rerun and audit.yml on the first N hosts (own inventory per size).

Every run is measured by bench/cost.py: wall time, the controller's CPU (the ansible
process tree), the hosts' CPU (the containers' cgroups, less their idle rate), the
container engine's CPU (the docker connection's transport), the tree's peak PSS, and the
remote module executions per host (plugins/callback/sglang_bench.py). Printed and
written to .cache/bench/scale/scale.{md,json,png}: per size and kind the medians with
min-max, the ratios to ping, and per-host slopes (least squares over the sizes).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cost import Meter
from run import CACHE, ROOT, bench_env, finish, log, summarize

KINDS = ("ping", "rerun", "audit")
# Issue 27's targets, as ratios to ping within one run.
TARGET_CPU = 1.5
TARGET_WALL = 1.8
TARGET_REMOTE = 12
METRICS = ("wall", "controller", "hosts", "engine", "pss")


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


def starts_from_json(doc: dict) -> dict[str, int]:
    """Per host, the line count the ad-hoc `wc -l` printed, from ansible.posix.json's output. That callback
    keeps one task entry per host when the play's strategy is not literally "linear" or "debug" (the
    ANSIBLE_STRATEGY scripts/bench exports, or ansible.builtin.linear spelt in full), so every task entry
    of every play is read, not the first one alone."""
    out: dict[str, int] = {}
    for play in doc.get("plays") or []:
        for task in play.get("tasks") or []:
            for host, res in (task.get("hosts") or {}).items():
                if "stdout" not in res:
                    raise RuntimeError(f"{host}: no start count ({res.get('msg') or res})")
                out[host] = int(res["stdout"].split()[0])
    return out


def healthy_starts(inv: Path, forks: list[str]) -> dict[str, int]:
    """Per host, the test double's healthy starts so far (one line each in its start log)."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json")
    return starts_from_json(json.loads(subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", str(inv), *forks, "sglang", "-m", "ansible.builtin.command",
         "-a", "wc -l /var/lib/sglang/starts.log"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        check=True).stdout))


def measured(meter: Meter, cmd: list[str], hosts: list[str], name: str, counts: Path | None = None) -> dict:
    """One measured run: its cost (bench/cost.py) per host and in all, and its sglang_bench counts."""
    res, cost = meter.run(cmd, hosts, cwd=ROOT, env=bench_env(counts), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    c = finish(cmd, res, counts, True, name)
    n = len(hosts)
    s = summarize(c)
    return {"hosts": n, "wall": cost.wall, "controller": cost.controller, "host_cpu": cost.hosts,
            "engine": cost.engine, "pss": cost.pss_peak_mib,
            "per_host": {"controller": cost.controller / n, "hosts": cost.hosts / n, "engine": cost.engine / n},
            "remote_max": s["remote_max"], "remote_mean": s["remote_mean"], "changed": s["changed"] or 0}


def value(run: dict, metric: str) -> float:
    """A run's total of METRIC (wall and peak PSS are totals of the run, the CPUs are summed over hosts)."""
    return {"wall": run["wall"], "controller": run["controller"], "hosts": run["host_cpu"],
            "engine": run["engine"], "pss": run["pss"]}[metric]


def summary(runs: dict, sizes: list[int], repeat: int) -> dict:
    """Per size and kind: medians (min-max) of every metric in all and per host, ratios to ping
    (of the medians, and per repetition), and per-host slopes over the sizes."""
    rows = []
    for n in sizes:
        row: dict = {"hosts": n}
        for k in KINDS:
            row[k] = {m: stats([value(r, m) for r in runs[(n, k)]]) for m in METRICS}
            row[k]["controller_per_host"] = stats([r["per_host"]["controller"] for r in runs[(n, k)]])
            row[k]["hosts_per_host"] = stats([r["per_host"]["hosts"] for r in runs[(n, k)]])
            row[k]["engine_per_host"] = stats([r["per_host"]["engine"] for r in runs[(n, k)]])
            row[k]["remote_max"] = max(r["remote_max"] or 0 for r in runs[(n, k)])
        for k in ("rerun", "audit"):
            for m in ("wall", "controller"):
                per_rep = [value(a, m) / value(p, m) for a, p in zip(runs[(n, k)], runs[(n, "ping")])]
                row[k][m + "_ratio"] = dict(stats(per_rep), of_medians=row[k][m]["median"] / row["ping"][m]["median"])
        rows.append(row)
    slopes: dict = {}
    for k in KINDS:
        slopes[k] = {}
        for m in METRICS:
            a, b = fit(sizes, [row[k][m]["median"] for row in rows])
            per_rep = [fit(sizes, [value(runs[(n, k)][i], m) for n in sizes])[1] for i in range(repeat)]
            slopes[k][m] = {"intercept": a, "slope": b, "per_repetition": stats(per_rep)}
    for k in ("rerun", "audit"):
        for m in ("wall", "controller", "hosts"):
            slopes[k][m]["x_ping"] = slopes[k][m]["slope"] / slopes["ping"][m]["slope"] if slopes["ping"][m]["slope"] else None
    return {"sizes": rows, "slopes": slopes}


def report(data: dict) -> tuple[str, dict]:
    """The markdown tables and the targets, met or not."""
    rows, slopes, sizes = data["sizes"], data["slopes"], [r["hosts"] for r in data["sizes"]]
    mid = next((row for row in rows if row["hosts"] == 50), rows[-1])
    first = data["first"]
    ok = {
        "controller": all(mid[k]["controller_ratio"]["of_medians"] <= TARGET_CPU for k in ("rerun", "audit")),
        "controller_slope": all((slopes[k]["controller"]["x_ping"] or 99) <= TARGET_CPU for k in ("rerun", "audit")),
        "wall": all(mid[k]["wall_ratio"]["of_medians"] <= TARGET_WALL for k in ("rerun", "audit")),
        "first": bool(first) and first[0]["remote_max"] is not None and first[0]["remote_max"] <= TARGET_REMOTE,
        "quiet": data["changed_total"] == 0 and data["restarts"] == [0],
    }
    out = [f"{data['date']}, commit {data['commit']}, {data['cores']} cores, forks {data['forks']}, "
           f"{data['repeat']} repetitions interleaved (median, min-max)", "",
           "Per host (the run's total divided by its hosts):", "",
           "| hosts | run | wall | x ping | controller CPU/host | x ping | hosts' CPU/host | engine CPU/host "
           "| remote executions/host | controller peak PSS |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for k in KINDS:
            r = row[k]
            wx = "1.00" if k == "ping" else f"{r['wall_ratio']['of_medians']:.2f}"
            cx = "1.00" if k == "ping" else (f"{r['controller_ratio']['of_medians']:.2f} "
                                             f"({r['controller_ratio']['min']:.2f}-{r['controller_ratio']['max']:.2f})")
            out.append(f"| {row['hosts']} | {k} | {fmt(r['wall'])} | {wx} | {fmt(r['controller_per_host'], 's', 3)} | {cx} "
                       f"| {fmt(r['hosts_per_host'], 's', 3)} | {fmt(r['engine_per_host'], 's', 3)} | {r['remote_max']} "
                       f"| {r['pss']['median']:.0f} MiB |")
    out += ["", f"Per added host, {sizes[0]} to {sizes[-1]} hosts (least-squares slope of the medians; "
                "per repetition: median, min-max):", "",
            "| run | wall s/host | controller CPU s/host | x ping | hosts' CPU s/host | engine CPU s/host | PSS MiB/host |",
            "|---|---|---|---|---|---|---|"]
    for k in KINDS:
        s = slopes[k]
        x = "1.00" if k == "ping" else (f"{s['controller']['x_ping']:.2f}" if s["controller"]["x_ping"] else "-")
        out.append(f"| {k} | {s['wall']['slope']:.3f} | {s['controller']['slope']:.3f} "
                   f"({s['controller']['per_repetition']['min']:.3f}-{s['controller']['per_repetition']['max']:.3f}) | {x} "
                   f"| {s['hosts']['slope']:.3f} | {s['engine']['slope']:.3f} | {s['pss']['slope']:.1f} |")
    out += ["", "First remediation, fleet converged in chunks of fresh hosts (serial 100%):", "",
            "| fresh hosts | wall | controller CPU/host | hosts' CPU/host | engine CPU/host | remote executions/host (max / mean) | changed | controller peak PSS |",
            "|---|---|---|---|---|---|---|---|"]
    for f in first:
        out.append(f"| {f['hosts']} | {f['wall']:.0f}s | {f['per_host']['controller']:.2f}s | {f['per_host']['hosts']:.2f}s "
                   f"| {f['per_host']['engine']:.2f}s | {f['remote_max']} / {f['remote_mean']} | {f['changed']} | {f['pss']:.0f} MiB |")
    bare = data["bare"]
    out.append(f"| bare install + start ({bare['hosts']} fresh hosts, bench/bare.yml) | {bare['wall']:.0f}s "
               f"| {bare['per_host']['controller']:.2f}s | {bare['per_host']['hosts']:.2f}s | {bare['per_host']['engine']:.2f}s "
               f"| {bare['remote_max']} / {bare['remote_mean']} | {bare['changed']} | {bare['pss']:.0f} MiB |")
    m = mid["hosts"]
    out += ["", f"changed over all no-op reruns and audits: {data['changed_total']}; "
                f"restarts per host during them: {data['restarts']}", "",
            f"- controller CPU per host, rerun and audit <= {TARGET_CPU} x ping at {m} hosts: "
            f"{'met' if ok['controller'] else 'NOT met'} "
            f"({mid['rerun']['controller_ratio']['of_medians']:.2f}, {mid['audit']['controller_ratio']['of_medians']:.2f})",
            f"- controller CPU slope, rerun and audit <= {TARGET_CPU} x ping's: {'met' if ok['controller_slope'] else 'NOT met'} "
            f"({slopes['rerun']['controller']['x_ping'] or 0:.2f}, {slopes['audit']['controller']['x_ping'] or 0:.2f})",
            f"- wall, rerun and audit <= {TARGET_WALL} x ping at {m} hosts: {'met' if ok['wall'] else 'NOT met'} "
            f"({mid['rerun']['wall_ratio']['of_medians']:.2f}, {mid['audit']['wall_ratio']['of_medians']:.2f})",
            f"- first remediation <= {TARGET_REMOTE} remote executions per host: {'met' if ok['first'] else 'NOT met'} "
            f"({first[0]['remote_max'] if first else '-'})",
            f"- 0 changed, 0 restarts in the no-op runs: {'met' if ok['quiet'] else 'NOT met'}"]
    return "\n".join(out) + "\n", ok


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

    names = [f"{args.prefix}-{i}" for i in range(1, biggest + 1)]
    if not args.reuse:
        log(f"removing any previous {args.prefix} fleet")
        subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", args.prefix], cwd=ROOT, check=True)
    else:
        # The first remediation is counted on fresh hosts: the smallest size's hosts start again.
        subprocess.run(["docker", "rm", "-f", *names[:sizes[0]]], cwd=ROOT, stdout=subprocess.DEVNULL, check=False)
    log(f"{biggest} hosts ({args.prefix}-1 .. {args.prefix}-{biggest})")
    subprocess.run([py, "testbed/testbed.py", "fleet-up", "--prefix", args.prefix, "--count", str(biggest),
                    "--group", "sglang", "--inventory", str(all_inv / "hosts.yml")], cwd=ROOT, check=True)
    invs = {n: ["-i", str(subset_inventory(all_inv / "hosts.yml", n))] for n in sizes}
    subprocess.run([str(ROOT / "scripts" / "wheelhouse"), str(ROOT / ".cache" / "wheelhouse"), "0.5.9"],
                   cwd=ROOT, check=True)
    forks = ["--forks", str(args.forks)]
    pb = str(bin_dir / "ansible-playbook")
    prep = subprocess.run([pb, "-i", str(all_inv), *forks, "playbooks/testbed-prepare.yml"], cwd=ROOT,
                          env=bench_env(None), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finish([pb, "playbooks/testbed-prepare.yml"], prep, None, True, "scale-prepare")
    log("idle CPU rate of each container (5 s)")
    meter = Meter(names)

    log(f"bare install + start on {sizes[0]} fresh hosts, for its module executions per host")
    bare = measured(meter, [pb, *invs[sizes[0]], *forks, "bench/bare.yml"], names[:sizes[0]], "scale-bare",
                    CACHE / "bare.json")
    first = []
    bounds = [0, *sizes]
    for lo, hi in zip(bounds, bounds[1:]):
        if args.reuse and lo > 0:
            break
        chunk = names[lo:hi]
        limit = out_dir / f"limit-{hi}"
        limit.write_text("\n".join(chunk) + "\n")
        log(f"first remediation of {len(chunk)} fresh hosts ({chunk[0]} .. {chunk[-1]}, serial 100%)")
        first.append(measured(meter, [pb, *invs[hi], *forks, "--limit", f"@{limit}", "-e", "sglang_serial=100%",
                                      "remediate.yml"], chunk, f"scale-first-{hi}", CACHE / "first.json"))
    if args.reuse:
        log(f"with --reuse only the first {sizes[0]} hosts were fresh; the others converge as they are")
        res = subprocess.run([pb, "-i", str(all_inv), *forks, "-e", "sglang_serial=100%", "remediate.yml"],
                             cwd=ROOT, env=bench_env(None), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        finish([pb, "remediate.yml"], res, None, True, "scale-converge")
    starts_before = healthy_starts(all_inv, forks)

    runs: dict = {(n, k): [] for n in sizes for k in KINDS}
    changed_total = 0
    for rep in range(args.repeat):
        order = sizes[rep % len(sizes):] + sizes[:rep % len(sizes)]
        for n in order:
            log(f"repetition {rep + 1}/{args.repeat}, {n} hosts: ping, rerun, audit")
            hosts = names[:n]
            cmds = {"ping": [str(bin_dir / "ansible"), *invs[n], *forks, "sglang", "-m", "ansible.builtin.ping"],
                    "rerun": [pb, *invs[n], *forks, "remediate.yml"],
                    "audit": [pb, *invs[n], *forks, "playbooks/audit.yml"]}
            for k in KINDS:
                run = measured(meter, cmds[k], hosts, f"scale-{k}-{n}", CACHE / f"{k}.json")
                runs[(n, k)].append(run)
                if k != "ping":
                    changed_total += run["changed"]

    after = healthy_starts(all_inv, forks)
    restarts = sorted({after[h] - starts_before.get(h, 0) for h in after})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    data = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count(),
            "forks": args.forks, "repeat": args.repeat, **summary(runs, sizes, args.repeat),
            "first": first, "bare": bare, "idle": meter.idle, "changed_total": changed_total, "restarts": restarts,
            "runs": {f"{n}-{k}": v for (n, k), v in runs.items()}}
    text, ok = report(data)
    data["targets"] = ok
    (out_dir / "scale.json").write_text(json.dumps(data, indent=1))
    print(text, end="")
    (out_dir / "scale.md").write_text(text)
    if plot(out_dir / "scale.json", out_dir / "scale.png"):
        log(f"plot: {out_dir / 'scale.png'} (copy it to bench/scale.png with the results)")
    log(f"written to {out_dir}/scale.{{md,json}}; per-run logs in {CACHE / 'logs'}")
    if not args.keep:
        subprocess.run([py, "testbed/testbed.py", "fleet-down", "--prefix", args.prefix], cwd=ROOT, check=True)
    return 0 if all(ok.values()) else 1
