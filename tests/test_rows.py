"""plugins/module_utils/sglang_rows.py: the report rows read as data (audit.yml's verdict)."""
from __future__ import annotations

from conftest import COLLECTIONS_PATH  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.fleetops.sglang.plugins.filter.sglang import FilterModule
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_rows as R


def test_only_hosts_not_compliant_are_named_with_drift_and_error():
    rows = {
        "a": {"compliant": True, "drift": [], "error": ""},
        "b": {"compliant": False, "drift": ["unit file", "live: accept length 1.6 < 2.5"], "error": ""},
        "c": {"compliant": False, "drift": [], "error": "Install SGLang: pip failed"},
        "d": None,  # never set a row (failed before it)
        "e": {"compliant": True},
    }
    assert R.noncompliant(rows) == [
        "b is not compliant: unit file; live: accept length 1.6 < 2.5 ",
        "c is not compliant:  Install SGLang: pip failed",
        "d is not compliant:  ",
    ]


def test_the_filter_keeps_play_order():
    filt = FilterModule().filters()["noncompliant_hosts"]
    assert filt(["z", "a"], [{}, {"compliant": True}]) == ["z is not compliant:  "]
    assert filt(["a"], [{"compliant": True}]) == []


# --- the one row builder (tasks/report.yml through the filter, the probe's action) ---------

FIX = {"release": "0.5.9", "decision": "patch", "family": "v2_loop", "compliant": True, "changed": True,
       "file_state_before": "pristine", "sha256_before": "a" * 64, "sha256_after": "b" * 64,
       "evidence": [{"line": 2634, "text": "x"}], "forward": {"summary": "forward: embedding, L2, L30 (executed)"},
       "companion": {"template": "companion_cg_attr"}, "draft_layer_ids": [2, 30]}
GATE = {"status": 200, "ready": True, "reading": {"read": True, "reasons": [], "accept_length": 3.1}}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def build(**kw):
    return FilterModule().filters()["remediation_row"](dict({"host": "gpu-01", "wanted_release": "0.5.9"}, **kw))


def test_a_remediated_and_restarted_host_is_compliant_with_typed_columns():
    row = build(fix=FIX, draft={"layer_ids_after": [-1, 2, 30], "compliant": True, "changed": True},
                unit=SKIPPED, environment={"changed": False}, fingerprint={"restart_needed": True, "reasons": ["unit"]},
                gate=GATE, live_metrics={"accept_length": "3.1", "tokens_per_s": 88}, probe_live={"reasons": ["old"]},
                restarted=True, speculative_flags={"num_steps": 15})
    assert row["compliant"] is True and row["drift"] == [] and row["error"] == ""
    assert row["evidence"] == [2634] and row["forward"].endswith("(executed)") and row["companion"] == "companion_cg_attr"
    assert row["draft_layer_ids"] == [-1, 2, 30]
    assert row["restart_needed"] is True and row["restart_reasons"] == ["unit"] and row["restarted"] is True
    assert row["health"] == "ok" and row["accept_length"] == 3.1 and row["tokens_per_s"] == 88.0
    # After a restart the live column is the gate's reading, never the probe's of the old server.
    assert row["live"] == GATE["reading"] and row["mode"] == "apply" and row["check_mode"] is False


def test_drift_names_each_thing_not_as_it_should_be():
    row = build(fix=dict(FIX, release="0.5.8", compliant=False), draft={"compliant": False},
                unit={"changed": True}, environment={"changed": True},
                fingerprint={"restart_needed": True, "reasons": ["unit"]}, probe_live={"reasons": ["live: x"]},
                audit=True)
    assert row["drift"] == ["sglang 0.5.8 installed, 0.5.9 wanted", "SGLang source not remediated",
                            "draft config layer ids", "unit file", "service environment",
                            "running server differs from the files", "live: x"]
    assert row["compliant"] is False and row["mode"] == "audit" and row["health"] == "not checked"
    assert row["live"] == {"reasons": ["live: x"]}


def test_outside_audit_and_check_mode_written_files_are_not_drift_but_an_error_is():
    row = build(fix=FIX, draft={"compliant": False, "changed": True}, unit={"changed": True},
                error="restart: gate failed (rolled back to the previous state)", rolled_back=True,
                rollback=["restored deepseek_v2.py"], gate={"status": 503})
    assert row["drift"] == [] and row["compliant"] is False and row["health"] == "failed"
    assert row["rolled_back"] is True and row["rollback"] == ["restored deepseek_v2.py"]
    assert row["live"] is None or isinstance(row["live"], dict)


def test_check_mode_names_what_would_change_as_restart_reasons():
    row = build(fix=FIX, draft={"changed": True, "compliant": False}, unit={"changed": True}, environment=SKIPPED,
                fingerprint={"restart_needed": False, "reasons": []}, check_mode=True)
    assert row["restart_needed"] is True
    assert row["restart_reasons"] == ["SGLang source would change", "draft config would change", "unit would change"]
    assert row["mode"] == "check" and "unit file" in row["drift"]
    # Without a managed service nothing would restart.
    assert build(fix=FIX, unit={"changed": True}, check_mode=True, service_manage=False)["restart_reasons"] == []


def test_a_host_whose_engine_never_ran_has_defaults_not_errors():
    row = build()
    assert row["release"] == "0.5.9" and row["decision"] == "unknown" and row["family"] == ""
    assert row["drift"] == ["sglang ? installed, 0.5.9 wanted", "SGLang source not remediated"]
    assert build(check_mode=True)["decision"] == "pending-install"
    assert row["accept_length"] is None and row["tokens_per_s"] is None and row["server_args_warnings"] == []


def test_server_args_warnings_come_from_the_parser_json_only_when_it_answered():
    parse = {"rc": 4, "stdout": '{"warnings": ["speculative_num_draft_tokens was adjusted"]}'}
    assert build(fix=FIX, parse=parse)["server_args_warnings"] == ["speculative_num_draft_tokens was adjusted"]
    assert build(fix=FIX, parse=dict(parse, rc=1))["server_args_warnings"] == []
    assert build(fix=FIX, parse={"rc": 0, "stdout": "not json"})["server_args_warnings"] == []


def test_the_probe_row_and_the_report_row_are_one_builder():
    probe = {"compliant": True, "release": "0.5.9", "decision": "patch", "draft_layer_ids": [-1, 2, 30],
             "eagle3": {k: FIX[k] for k in ("family", "file_state_before", "sha256_before", "sha256_after", "evidence")},
             "live": {"reasons": []}}
    a = R.probe_row("gpu-01", "0.5.9", probe, {"num_steps": 15})
    b = build(fix=dict(probe["eagle3"], release="0.5.9", decision="patch", draft_layer_ids=[-1, 2, 30], compliant=True),
              probe_live={"reasons": []}, speculative_flags={"num_steps": 15})
    assert a == b and set(a) == set(b)


def test_a_stopped_run_textfile_row_names_the_task():
    row = FilterModule().filters()["stopped_row"](None, {"release": "0.5.9", "decision": "patch", "live": None},
                                                   "Install SGLang")
    assert row["compliant"] is False and row["release"] == "0.5.9" and row["decision"] == "patch"
    assert row["error"] == "the run stopped at: Install SGLang"
    assert R.stopped_row({"release": "0.5.14"}, None, None)["error"] == "the run stopped at: an earlier task"
