#!/usr/bin/env python3
"""Plot the scaling curve of `scripts/bench --scale` from its measured numbers.

Usage: plot.py SCALE_JSON OUT_PNG. Runs in .cache/plot-venv (requirements/plot.lock),
not in the project's venv: only the benchmark plots.
"""
from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"ping": "tab:gray", "rerun": "tab:blue", "audit": "tab:orange"}
LABELS = {"ping": "ansible -m ping", "rerun": "no-op remediate.yml rerun", "audit": "audit.yml"}


def band(ax, sizes, rows, kind, key, **kw):
    med = [row[kind][key]["median"] for row in rows]
    lo = [m - row[kind][key]["min"] for m, row in zip(med, rows)]
    hi = [row[kind][key]["max"] - m for m, row in zip(med, rows)]
    ax.errorbar(sizes, med, yerr=[lo, hi], marker="o", capsize=3, color=COLORS[kind], **kw)


def main(src: str, out: str) -> None:
    data = json.load(open(src))
    rows = data["sizes"]
    sizes = [row["hosts"] for row in rows]
    fig, (ax_c, ax_h, ax_r) = plt.subplots(1, 3, figsize=(15, 4.4))
    for kind in ("ping", "rerun", "audit"):
        slope = data["slopes"][kind]["controller"]["slope"]
        band(ax_c, sizes, rows, kind, "controller_per_host", label="%s (%.3f s/added host)" % (LABELS[kind], slope))
        band(ax_h, sizes, rows, kind, "hosts_per_host", label=LABELS[kind])
    ax_c.set_title("controller CPU per host (ansible process tree)")
    ax_c.set_ylabel("CPU s per host (median, min-max)")
    ax_h.set_title("each host's own CPU (container cgroup, less idle)")
    ax_h.set_ylabel("CPU s per host")
    for kind in ("rerun", "audit"):
        band(ax_r, sizes, rows, kind, "controller_ratio", label=LABELS[kind] + ": controller CPU")
        med = [row[kind]["wall_ratio"]["median"] for row in rows]
        ax_r.plot(sizes, med, ls=":", marker="s", color=COLORS[kind], label=LABELS[kind] + ": wall")
    ax_r.axhline(1.5, ls="--", color="tab:red", label="target 1.5 x ping (CPU)")
    ax_r.axhline(1.8, ls="-.", color="tab:purple", label="target 1.8 x ping (wall)")
    ax_r.axhline(1.0, color="tab:gray", lw=0.8)
    ax_r.set_title("x ping on the same hosts, same repetition")
    ax_r.set_ylim(0.8, max(2.2, max(max(row[k]["controller_ratio"]["max"], row[k]["wall_ratio"]["max"])
                                    for row in rows for k in ("rerun", "audit")) + 0.1))
    for ax in (ax_c, ax_h, ax_r):
        ax.set_xlabel("hosts")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_c.set_ylim(bottom=0)
    ax_h.set_ylim(bottom=0)
    fig.suptitle("fleetops.sglang on a compliant fleet, commit %s (%s), forks %d, %d repetitions, %d cores"
                 % (data["commit"], data["date"], data["forks"], data["repeat"], data["cores"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
