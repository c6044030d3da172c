#!/usr/bin/env python3
"""Where the controller's CPU goes in one run: py-spy over the ansible process tree.

Usage (the project's venv on PATH, a converged fleet in INVENTORY):

    bench/profile.py [--rate 100] [--top 25] [--out DIR] -- ansible-playbook -i INVENTORY remediate.yml

py-spy (pinned in requirements/profile.lock, installed into .cache/profile-venv) samples
every Python process of the tree (--subprocesses), idle threads left out, so a sample is
CPU time. Each sample is attributed to the main process (the strategy: variables,
queueing, results) or to a forked worker (one per host and task: templating, the action
plugin, the module payload, the connection). Printed and written to DIR/profile.md: the
split, then per role the functions by inclusive and by self samples, as a share of that
role's samples and as milliseconds per host. The raw stacks are in DIR/stacks.txt.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".cache" / "profile-venv"
LOCK = ROOT / "requirements" / "profile.lock"
PROCESS = re.compile(r'^process \d+:"([^"]*)"$')
# Frames of the interpreter's own import machinery and of the runner, which say nothing of where.
NOISE = ("<frozen ", "<module> (")


def py_spy() -> Path:
    """py-spy from requirements/profile.lock, in .cache/profile-venv (created when the lock changes)."""
    stamp = VENV / "lock.sha"
    want = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == want):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "--only-binary=:all:", "-r", str(LOCK)], check=True)
        stamp.write_text(want)
    return VENV / "bin" / "py-spy"


def parse(lines):
    """(role, frames, count) per collapsed stack: role main, worker or other (a process a worker started)."""
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        parts = stack.split(";")
        procs = [p for p in parts if PROCESS.match(p)]
        frames = [p for p in parts if not PROCESS.match(p)]
        # The tree's depth says the role: the command lines do not (py-spy may read the first as "").
        role = {1: "main", 2: "worker"}.get(len(procs), "other")
        yield role, frames, int(count)


def short(frame: str) -> str:
    """'func (path/to/file.py:12)' -> 'func (file.py)': lines differ per sample, the function does not."""
    m = re.match(r"^(.*) \((.*?):\d+\)$", frame)
    if not m:
        return frame
    path = m.group(2)
    keep = path.split("site-packages/")[-1].split("ansible_collections/")[-1]
    return f"{m.group(1)} ({keep})"


def aggregate(stacks):
    """Per role: total samples, inclusive and self samples per function."""
    total = collections.Counter()
    incl: dict = collections.defaultdict(collections.Counter)
    own: dict = collections.defaultdict(collections.Counter)
    for role, frames, count in stacks:
        total[role] += count
        names = [short(f) for f in frames]
        for name in set(names):
            if not name.startswith(NOISE):
                incl[role][name] += count
        leaf = next((n for n in reversed(names) if not n.startswith(NOISE)), names[-1] if names else "?")
        own[role][leaf] += count
    return total, incl, own


def table(total, incl, own, rate: int, hosts: int, top: int) -> str:
    ms = 1000.0 / rate / max(1, hosts)
    all_samples = sum(total.values()) or 1
    out = [f"samples at {rate} Hz over {hosts} hosts; ms/host = samples x {1000 / rate:.0f} ms / hosts", "",
           "| process | samples | share | CPU ms/host |", "|---|---|---|---|"]
    for role in ("main", "worker", "other"):
        out.append(f"| {role} | {total[role]} | {100 * total[role] / all_samples:.1f}% | {total[role] * ms:.0f} |")
    for role in ("worker", "main"):
        n = total[role] or 1
        for title, counter in (("inclusive", incl[role]), ("self", own[role])):
            out += ["", f"{role}, by {title} samples:", "", "| function | share | ms/host |", "|---|---|---|"]
            for name, c in counter.most_common(top):
                out.append(f"| `{name}` | {100 * c / n:.1f}% | {c * ms:.1f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--hosts", type=int, default=0, help="hosts in the run, for ms/host (default: from the recap)")
    ap.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "profile")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("the ansible command to profile follows --")
    args.out.mkdir(parents=True, exist_ok=True)
    stacks = args.out / "stacks.txt"
    res = subprocess.run([str(py_spy()), "record", "--subprocesses", "--gil", "--rate", str(args.rate), "--format", "raw",
                          "--output", str(stacks), "--", *cmd], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    (args.out / "run.log").write_text(res.stdout)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-4000:])
        return res.returncode
    hosts = args.hosts or len(re.findall(r"^\S+\s+: ok=", res.stdout, re.M))
    text = f"`{' '.join(cmd)}`\n\n" + table(*aggregate(parse(stacks.read_text().splitlines())), args.rate, hosts, args.top)
    (args.out / "profile.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
