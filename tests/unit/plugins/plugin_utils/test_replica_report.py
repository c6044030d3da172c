"""The report's line per multi-node replica (plugins/plugin_utils/_report.py, replica_lines): its nodes and its
verdict, the worst of its nodes' statuses."""
from __future__ import annotations

from ansible_collections.fleetops.sglang.plugins.plugin_utils._report import new_row, replica_lines


def _row(host, status, replica=None):
    return dict(new_row(host), status=status, replica=replica)


def test_a_replica_is_as_good_as_its_worst_node_and_a_host_of_one_node_has_no_line():
    rows = [_row("a0", "changed", "r1"), _row("a1", "changed", "r1"), _row("b0", "changed", "r2"),
            _row("b1", "failed", "r2"), _row("solo", "failed")]
    assert replica_lines(rows) == ["- replica r1 (a0, a1): **changed**", "- replica r2 (b0, b1): **failed** (b1)"]
    rows = [_row("a0", "ok", "r1"), _row("a1", "noncompliant", "r1")]
    assert replica_lines(rows) == ["- replica r1 (a0, a1): **noncompliant** (a1)"]
    assert replica_lines([_row("solo", "ok")]) == []
