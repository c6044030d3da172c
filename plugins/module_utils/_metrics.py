# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's node_exporter textfile: what the last remediation or audit found, for Prometheus.

Written by ``sglang_probe`` when a run ends at the probe (a compliant host: no extra
remote call) and by ``sglang_metrics`` at the end of the role otherwise. Standard
library only; must run under any host ``python3`` from 3.9.

Persistence, because every run rewrites the file:

- ``sglang_remediation_restarts_total`` is a counter, so it must survive the file being
  removed or moved: it lives in ``<sglang_state_dir>/metrics-state.json``, written only
  on runs that restarted the service (converging runs, which write the state dir anyway),
  so an audit never writes the state dir.
- ``sglang_remediation_last_success_timestamp_seconds`` is carried from the previous
  textfile when this run did not succeed, so a failed or non-compliant run keeps the old
  value and an alert on its age keeps counting.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence

from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write
from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import failure_class

PREFIX = "sglang_remediation"
# One gauge per failure class, always all of them (0 or 1) so that every series exists
# and an alert can name the class. Each finding's code names its class (_reasons.REASONS);
# "error" is a run that failed, whatever its message.
FAILURE_CLASSES = ("release", "source", "draft_config", "service_files", "running_server",
                   "live_settings", "live_accept_length", "live_unavailable", "live_auth", "error")
_LAST_SUCCESS = re.compile(r"^%s_last_success_timestamp_seconds(?:\{[^}]*\})?\s+(\S+)\s*$" % PREFIX, re.M)


def classify(codes: Iterable[str], error: str = "") -> List[str]:
    """Failure classes of the findings' codes (and an error), in FAILURE_CLASSES order.

    An unknown code raises ValueError: a finding the table does not know must not set
    some other class, or none, without anyone noticing.
    """
    found = {failure_class(code) for code in codes}
    if error:
        found.add("error")
    return [c for c in FAILURE_CLASSES if c in found]


def _escape(value: Any) -> str:
    """A label value as the text exposition format wants it."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Sequence[Sequence[Any]]) -> str:
    return "{" + ",".join('%s="%s"' % (k, _escape(v)) for k, v in pairs) + "}" if pairs else ""


def _value(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def metric_lines(full: str, kind: str, help_text: str, samples: Sequence[Sequence[Any]]) -> List[str]:
    """One metric in the text exposition format: HELP, TYPE, and a line per (labels, value) sample."""
    return (["# HELP %s %s" % (full, help_text), "# TYPE %s %s" % (full, kind)]
            + ["%s%s %s" % (full, _labels(labels), _value(value)) for labels, value in samples])


def render(values: Dict[str, Any]) -> str:
    """The textfile for one host, metrics sorted by name, each with HELP and TYPE.

    ``values``: compliant, release, decision, family, draft_ids, mode (the run's, or ``timer``: the
    host's audit timer wrote it), audit_timer (whether the role installed that timer), replica (the multi-node replica
    the host is a node of, "" for a host of one node), accept_length_min,
    live (a reading from _live.judge, or None), classes, restarts_total,
    last_run (epoch seconds), last_success (epoch seconds or None).
    """
    live = values.get("live") or {}
    settings = live.get("settings") or {}
    classes = set(values.get("classes") or [])
    ids = ",".join(str(i) for i in (values.get("draft_ids") or []))
    out: List[str] = []

    def metric(name: str, kind: str, help_text: str, samples: Sequence[Sequence[Any]]) -> None:
        out.extend(metric_lines("%s_%s" % (PREFIX, name), kind, help_text, samples))

    metric("accept_length_min", "gauge",
           "The role's sglang_accept_length_min; 0 means the live check on accept length is off.",
           [((), float(values.get("accept_length_min") or 0))])
    metric("audit_timer", "gauge",
           "1 when the role installed this host's audit timer (sglang_audit_timer), 0 when it did not: the timer's "
           "own sglang_audit_timer_* series must then be there.",
           [((), 1 if values.get("audit_timer") else 0)])
    metric("compliant", "gauge",
           "1 when the host runs what the role would leave: release, patch, draft ids, unit, running "
           "server and live speculative state; 0 otherwise.",
           [((), 1 if values.get("compliant") else 0)])
    metric("failure", "gauge", "1 for each class of finding on the last run, 0 for the others.",
           [((("class", c),), 1 if c in classes else 0) for c in FAILURE_CLASSES])
    metric("info", "gauge", "What the last run found installed and decided; always 1.",
           [((("release", values.get("release") or ""), ("decision", values.get("decision") or ""),
              ("family", values.get("family") or ""), ("draft_ids", ids),
              ("mode", values.get("mode") or ""))
             # A node of a multi-node replica names it (an empty label is no label: hosts of one node keep their series).
             + ((("replica", values["replica"]),) if values.get("replica") else ()), 1)])
    metric("last_run_timestamp_seconds", "gauge", "When the last remediation or audit run wrote this file.",
           [((), values["last_run"])])
    metric("last_success_timestamp_seconds", "gauge",
           "When a run last found the host compliant with no error; 0 if none has.",
           [((), values.get("last_success") or 0)])
    samples = []
    for source, key in (("probe", "accept_length_probe"), ("server_info", "accept_length_server_info")):
        if isinstance(live.get(key), (int, float)) and not math.isnan(live[key]):
            samples.append(((("source", source),), float(live[key])))
    metric("live_accept_length", "gauge",
           "Accepted tokens per speculative verify step the running server showed: source probe (short "
           "generations of this run) or server_info (avg_spec_accept_length since the server started); "
           "absent when not reported.", samples)
    if live.get("read"):
        metric("live_info", "gauge", "The speculative settings and release the running server reports; always 1.",
               [(tuple((k, "" if settings.get(k) is None else settings.get(k))
                       for k in ("version", "speculative_algorithm", "speculative_num_steps",
                                 "speculative_eagle_topk", "speculative_num_draft_tokens")), 1)])
    metric("live_read", "gauge", "1 when the running server's live state was read on the last run.",
           [((), 1 if live.get("read") else 0)])
    metric("restarts_total", "counter", "Restarts of the SGLang service by the role (gated and rollback).",
           [((), int(values.get("restarts_total") or 0))])
    return "\n".join(out) + "\n"


def previous_last_success(path: str) -> Optional[float]:
    """The last-success timestamp of the textfile this module wrote before, if any."""
    try:
        with open(path, encoding="utf-8") as fh:
            match = _LAST_SUCCESS.search(fh.read())
    except OSError:
        return None
    if not match:
        return None
    try:
        value = float(match.group(1))
    except ValueError:
        return None
    return value if value > 0 else None


def load_restarts(state_file: str) -> int:
    try:
        with open(state_file, encoding="utf-8") as fh:
            data = json.load(fh)
        return int(data.get("restarts_total", 0)) if isinstance(data, dict) else 0
    except (OSError, ValueError, TypeError):
        return 0


def update(path: str, state_file: str, values: Dict[str, Any], restarts: int, now: float,
           success: bool) -> Dict[str, Any]:
    """Write the textfile for this run; returns what was written.

    ``restarts``: restarts this run performed, added to the persisted counter (the state
    file is written only then). ``success``: the run found the host compliant with no
    error; otherwise the previous success time is kept.
    """
    total = load_restarts(state_file)
    if restarts > 0:
        total += restarts
        atomic_write(state_file, json.dumps({"restarts_total": total}, indent=2) + "\n", mode=0o600, dir_mode=0o700)
    last_success = now if success else previous_last_success(path)
    doc = dict(values, restarts_total=total, last_run=now, last_success=last_success)
    text = render(doc)
    atomic_write(path, text, mode=0o644, dir_mode=0o755)
    return dict(path=path, restarts_total=total, last_run=now, last_success=last_success,
                compliant=bool(values.get("compliant")), classes=list(values.get("classes") or []), text=text)
