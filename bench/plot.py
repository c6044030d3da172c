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


def main(src: str, out: str) -> None:
    data = json.load(open(src))
    sizes = [row["hosts"] for row in data["sizes"]]
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind in ("ping", "rerun", "audit"):
        med = [row[kind]["median"] for row in data["sizes"]]
        lo = [m - row[kind]["min"] for m, row in zip(med, data["sizes"])]
        hi = [row[kind]["max"] - m for m, row in zip(med, data["sizes"])]
        ax_t.errorbar(sizes, med, yerr=[lo, hi], marker="o", capsize=3, color=COLORS[kind],
                      label="%s (%.3f s/host)" % (LABELS[kind], data["slopes"][kind]["median"]))
        fit = data["fits"][kind]
        ax_t.plot(sizes, [fit["intercept"] + fit["slope"] * n for n in sizes], ls=":", color=COLORS[kind])
    ax_t.set_xlabel("hosts")
    ax_t.set_ylabel("wall time, s (median, min-max)")
    ax_t.set_title("forks %d, %d repetitions, %d cores" % (data["forks"], data["repeat"], data["cores"]))
    ax_t.legend(fontsize=8)
    ax_t.grid(alpha=0.3)
    for kind in ("rerun", "audit"):
        med = [row["ratio_" + kind]["median"] for row in data["sizes"]]
        lo = [m - row["ratio_" + kind]["min"] for m, row in zip(med, data["sizes"])]
        hi = [row["ratio_" + kind]["max"] - m for m, row in zip(med, data["sizes"])]
        ax_r.errorbar(sizes, med, yerr=[lo, hi], marker="o", capsize=3, color=COLORS[kind], label=LABELS[kind])
    ax_r.axhline(1.3, ls="--", color="tab:red", label="target 1.3 x ping")
    ax_r.axhline(1.0, color="tab:gray", lw=0.8)
    ax_r.set_xlabel("hosts")
    ax_r.set_ylabel("x ping on the same hosts")
    ax_r.set_title("ratio to ping (per repetition: median, min-max)")
    ax_r.set_ylim(0.8, max(2.0, max(max(row["ratio_rerun"]["max"], row["ratio_audit"]["max"]) for row in data["sizes"]) + 0.1))
    ax_r.legend(fontsize=8)
    ax_r.grid(alpha=0.3)
    fig.suptitle("fleetops.sglang on a compliant fleet, commit %s (%s)" % (data["commit"], data["date"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
