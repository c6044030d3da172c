"""Reason codes (plugins/module_utils/_reasons.py): what a finding sets is read from its code, never its text.

The textfile's sglang_remediation_failure{class} is what the alerts fire on. Before the
codes it was matched on how each message began, so rewording one moved its finding to
another class (or to running_server) without a test noticing. These tests hold:

- every code's class, as the alerts expect it (changing one is a decision, made here too);
- a reworded finding keeps its class, through the textfile module and the report's columns;
- every code the plugins can emit is in the table, every table entry is emitted, and no
  code is built at run time (so the scan below sees them all);
- an unknown code is an error, never some default class.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys

import pytest

from conftest import MODULES, REPO, run_module

from ansible_collections.fleetops.sglang.plugins.module_utils import _live as LIVE
from ansible_collections.fleetops.sglang.plugins.module_utils import _metrics as METRICS
from ansible_collections.fleetops.sglang.plugins.module_utils import _reasons as REASONS
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rows as ROWS

PLUGINS = REPO / "plugins"
REASONS_FILE = PLUGINS / "module_utils" / "_reasons.py"

# The contract the alerts (examples/prometheus/alerts.yml) and the textfile's readers rely on,
# stated once more on purpose, per class: a code moves to another class only when it is
# changed in _reasons.REASONS and here.
CLASS_CODES = {
    "release": "release.not_installed release.not_pinned release.not_staged release.not_sealed release.drift",
    "source": "source.unpatched source.restore_needed source.refused source.unreadable",
    "draft_config": "draft.ids_differ draft.missing draft.unreadable draft.view_stale",
    "service_files": "unit.differs environment.differs api_keys.differs files.differs files.unreadable files.bad_entry timer.differs",
    "running_server": "server.differs server.fingerprint_differs server.fingerprint_unreadable server.not_recorded "
                      "server.inactive",
    "live_settings": "live.settings_differ live.test_double",
    "live_accept_length": "live.accept_length_low",
    "live_unavailable": "live.unavailable live.probe_failed",
    "live_auth": "live.auth_refused live.auth_missing",
}
EXPECTED_CLASSES = {code: cls for cls, codes in CLASS_CODES.items() for code in codes.split()}

# Rewordings, among them the beginnings the old prefix table matched for other classes.
REWORDINGS = ("", "something else entirely", "unit file", "live: the server runs x", "sglang 0.5.8 installed",
              "refused: nothing", "running server differs", "api_keys file", "draft ids [1] != [2]",
              "live: accept length 1.0", "live:", "fingerprint differs", "service sglang not active")


def test_every_code_sets_the_class_the_alerts_expect():
    assert REASONS.REASONS == EXPECTED_CLASSES
    assert set(REASONS.REASONS.values()) <= set(METRICS.FAILURE_CLASSES)
    # Every class but "error" (a failed run, whatever its message) is set by some code.
    assert set(REASONS.REASONS.values()) == set(METRICS.FAILURE_CLASSES) - {"error"}
    # One shape: <area>.<what>, lower case.
    assert all(re.match(r"^[a-z_]+\.[a-z_]+$", code) for code in REASONS.REASONS)


@pytest.mark.parametrize("code", sorted(EXPECTED_CLASSES))
def test_a_reworded_finding_keeps_its_class(code):
    original = REASONS.finding(code, "the words it has today")
    for text in REWORDINGS:
        reworded = dict(original, text=text)
        assert METRICS.classify(REASONS.codes([reworded])) == [EXPECTED_CLASSES[code]], (code, text)
        # The report's live column follows the code too.
        assert REASONS.is_live(reworded) is code.startswith("live.")
    # The live reading's classes come from its codes as well.
    reading = {"reasons": [dict(original, text=REWORDINGS[1])]}
    if code.startswith("live."):
        assert LIVE._classified(reading)["classes"] == [EXPECTED_CLASSES[code]]


def test_findings_the_producers_make_keep_their_class_when_reworded():
    info = {"version": "0.5.9", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
            "internal_states": [{"avg_spec_accept_length": 1.2}]}
    expected = {"speculative_num_steps": 15, "version": "0.5.9"}
    made = []
    made += LIVE.judge(info, "/server_info", "", [], expected, 2.5, probe_error="timed out")["reasons"]
    made += LIVE.judge(None, "", LIVE.AUTH_REFUSED, [], expected, 2.5)["reasons"]
    made += LIVE.judge(None, "", LIVE.AUTH_MISSING, [], expected, 2.5)["reasons"]
    made += LIVE.judge(None, "", "ConnectionRefusedError", [], expected, 2.5)["reasons"]
    made += LIVE.gate_failures(info, expected, None, 2.5)
    row = ROWS.remediation_row("h", "0.5.9", fix={"release": "0.5.8", "compliant": False},
                               draft={"compliant": False}, unit={"changed": True}, environment={"changed": True},
                               api_keys={"changed": True}, fingerprint={"restart_needed": True}, audit=True)
    made += row["drift"]
    assert {f["code"] for f in made} >= {
        "live.settings_differ", "live.accept_length_low", "live.probe_failed", "live.auth_refused",
        "live.auth_missing", "live.unavailable", "release.not_pinned", "source.unpatched", "draft.ids_differ",
        "unit.differs", "environment.differs", "api_keys.differs", "server.differs"}
    before = METRICS.classify(REASONS.codes(made))
    reworded = [dict(f, text="reworded %d" % i) for i, f in enumerate(made)]
    assert METRICS.classify(REASONS.codes(reworded)) == before
    # Through the row too: the drift is the findings as they are.
    again = ROWS.remediation_row("h", "0.5.9", fix={"release": "0.5.9", "compliant": True},
                                 probe_live={"reasons": reworded[:1]})
    assert METRICS.classify(REASONS.codes(again["drift"])) == [EXPECTED_CLASSES[made[0]["code"]]]


def test_the_textfile_module_reads_codes_not_text(tmp_path):
    prom = tmp_path / "tf" / "sglang_remediation.prom"
    drift = [{"code": code, "text": REWORDINGS[i % len(REWORDINGS)]} for i, code in enumerate(sorted(EXPECTED_CLASSES))]
    rc, res = run_module(MODULES / "sglang_metrics.py", tmp_path, dict(
        path=str(prom), state_file=str(tmp_path / "state.json"), compliant=False, drift=drift), check_mode=True)
    assert rc == 0, res
    assert res["classes"] == [c for c in METRICS.FAILURE_CLASSES if c != "error"]
    rc, res = run_module(MODULES / "sglang_metrics.py", tmp_path, dict(
        path=str(prom), state_file=str(tmp_path / "state.json"), compliant=False,
        drift=[{"code": "live.accept_length_low", "text": "unit file"}]), check_mode=True)
    assert rc == 0 and res["classes"] == ["live_accept_length"], res
    assert 'sglang_remediation_failure{class="live_accept_length"} 1' in res["text"]
    assert 'sglang_remediation_failure{class="service_files"} 0' in res["text"]


def test_an_unknown_code_is_an_error_never_a_class():
    for code in ("unit.reworded", "unit file", "", None, "live"):
        with pytest.raises(ValueError, match="unknown reason code"):
            REASONS.finding(code, "x")
        with pytest.raises(ValueError, match="unknown reason code"):
            METRICS.classify([code])
    # A plain string where a finding belongs has no code: an error too.
    with pytest.raises(ValueError, match="unknown reason code"):
        METRICS.classify(REASONS.codes(["running server differs from the files"]))
    with pytest.raises(ValueError, match="unknown reason code"):
        LIVE._classified({"reasons": [{"code": "live.new", "text": "live: new"}]})


def test_one_finding_is_worded_one_way():
    """Another release than sglang_version: the probe and the report row said "pinned" and "wanted"."""
    row = ROWS.remediation_row("h", "0.5.9", fix={"release": "0.5.8", "compliant": True})
    assert row["drift"] == [REASONS.release_not_pinned("0.5.8", "0.5.9")]
    assert row["drift"][0] == {"code": "release.not_pinned", "text": "sglang 0.5.8 installed, 0.5.9 pinned"}
    probe = importlib.import_module("ansible_collections.fleetops.sglang.plugins.module_utils._probe")
    assert "release_not_pinned(" in (MODULES.parent / "module_utils" / "_probe.py").read_text()
    assert probe.release_not_pinned is REASONS.release_not_pinned


# --- the scan: every code in the source is in the table, every table entry is emitted ----------------


def _load_module(name):
    spec = importlib.util.spec_from_file_location("reason_codes_" + name, MODULES / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _table_keys(tree):
    """The key nodes of the REASONS dict literal: the table itself, not a use of a code."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "REASONS" for t in node.targets):
            return {id(k) for k in node.value.keys}
    raise AssertionError("no REASONS table in %s" % REASONS_FILE)


def _code_literals():
    """Every string constant of the plugins shaped like a code of one of the table's areas, with where."""
    areas = sorted({code.split(".", 1)[0] for code in REASONS.REASONS})
    shape = re.compile(r"^(%s)\.[a-z][a-z0-9_]*$" % "|".join(areas))
    found = {}
    for path in sorted(PLUGINS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        skip = _table_keys(tree) if path == REASONS_FILE else set()
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                    and shape.match(node.value)):
                found.setdefault(node.value, []).append("%s:%d" % (path.relative_to(REPO), node.lineno))
    return found


def test_every_code_the_plugins_emit_is_in_the_table_and_every_entry_is_emitted():
    found = _code_literals()
    assert sorted(set(found) - set(REASONS.REASONS)) == [], {c: found[c] for c in set(found) - set(REASONS.REASONS)}
    assert sorted(set(REASONS.REASONS) - set(found)) == [], "table entries no plugin emits"


def test_no_code_is_built_at_run_time():
    """finding()'s code is a literal (or a choice of literals, or a name bound to one): the scan sees them all."""
    calls = 0
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
                    == "finding"):
                continue
            calls += 1
            code = node.args[0] if node.args else None
            parts = [code.body, code.orelse] if isinstance(code, ast.IfExp) else [code]
            assert all(isinstance(p, (ast.Constant, ast.Name)) for p in parts), "%s:%d builds its code" % (
                path.relative_to(REPO), node.lineno)
    assert calls >= 20


def test_the_codes_the_molecule_scenarios_assert_on_are_in_the_table():
    areas = "|".join(sorted({code.split(".", 1)[0] for code in REASONS.REASONS}))
    quoted = re.compile(r"""["']((?:%s)\.[a-z][a-z0-9_]*)["']""" % areas)
    seen = set()
    for path in sorted((REPO / "molecule").rglob("*")):
        if path.suffix in (".py", ".yml") and path.is_file():
            seen |= set(quoted.findall(path.read_text()))
    seen = {code for code in seen if code.rsplit(".", 1)[1] not in ("yml", "yaml", "py", "json", "prom")}  # file names
    assert seen and seen <= set(REASONS.REASONS), seen - set(REASONS.REASONS)
