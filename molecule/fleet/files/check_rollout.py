#!/usr/bin/env python3
"""Check a rollout from the fleet report and the test double's start logs.

Usage: check_rollout.py FLEET_JSON STARTS_JSON
STARTS_JSON maps host -> list of "<start> <healthy> <pid>" lines written during
the rollout (new lines only). Each line is one window in which the host was not
serving: from the new process' start to its first healthy answer.

Checked: every window of a host belongs to the batch the report gives it; the
windows of batch N all end before any window of batch N+1 begins (batches never
overlap, so hosts outside the restarting batch stay healthy); hosts the report
calls not reached have no window. Also gives max_down, the most windows open at
one moment, and max_out, the most hosts out of rotation at one moment from the
report's drain-to-undrain moments (what sglang_max_unavailable bounds). Prints a
JSON summary; exits 1 with the reasons.
"""
import datetime
import json
import sys


def parse(stamp: str) -> float:
    """Seconds since the epoch of an ISO 8601 timestamp."""
    return datetime.datetime.fromisoformat(stamp).timestamp()


def main() -> int:
    report = json.load(open(sys.argv[1]))
    starts = json.load(open(sys.argv[2]))
    batch_of = {row["host"]: row["batch"] for row in report["hosts"]}
    windows = []
    for host, lines in starts.items():
        for line in lines:
            start, healthy, _pid = line.split()
            windows.append({"host": host, "batch": batch_of.get(host), "start": float(start),
                            "healthy": float(healthy)})
    problems = []
    for w in windows:
        if w["batch"] is None:
            problems.append("%s restarted but the report says no batch reached it" % w["host"])
    batches = sorted({w["batch"] for w in windows if w["batch"] is not None})
    spans = {}
    for b in batches:
        mine = [w for w in windows if w["batch"] == b]
        spans[b] = (min(w["start"] for w in mine), max(w["healthy"] for w in mine))
    for a, b in zip(batches, batches[1:]):
        if spans[a][1] >= spans[b][0]:
            problems.append("batch %s was still restarting (healthy at %.3f) when batch %s started (%.3f)"
                            % (a, spans[a][1], b, spans[b][0]))
    # At any moment, a host outside the restarting batch must not be restarting.
    for w in windows:
        for other in windows:
            if other["batch"] != w["batch"] and other["start"] < w["healthy"] and w["start"] < other["healthy"]:
                problems.append("%s (batch %s) and %s (batch %s) were down at the same time"
                                % (w["host"], w["batch"], other["host"], other["batch"]))
    # The most hosts down at once: +1 at each start, -1 at each healthy answer.
    events = sorted([(w["start"], 1) for w in windows] + [(w["healthy"], -1) for w in windows],
                    key=lambda e: (e[0], e[1]))
    down = max_down = 0
    for _when, step in events:
        down += step
        max_down = max(max_down, down)
    # The most hosts out of rotation at once, from the report's drain-to-undrain moments (what
    # sglang_max_unavailable bounds, the drain hook's time included): a host still out at the end
    # counts until the run's last update.
    end = report["run"].get("updated")
    spans_out = [(parse(r["left_rotation_at"]), parse(r.get("back_in_rotation_at") or end))
                 for r in report["hosts"] if r.get("left_rotation_at")]
    out = max_out = 0
    for _when, step in sorted([(a, 1) for a, _ in spans_out] + [(b, -1) for _, b in spans_out],
                              key=lambda e: (e[0], e[1])):
        out += step
        max_out = max(max_out, out)
    print(json.dumps({"windows": windows, "batch_spans": spans, "max_down": max_down, "max_out": max_out,
                      "problems": problems}, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
