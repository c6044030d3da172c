"""plugins/plugin_utils/_rows.py: the report rows read as data (audit.yml's verdict)."""
from __future__ import annotations

from conftest import COLLECTIONS_PATH  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.fleetops.sglang.plugins.filter.sglang import FilterModule
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rows as R


def F(code, text):
    """A finding as the rows hold them (plugins/module_utils/_reasons.py)."""
    return {"code": code, "text": text}


def test_only_hosts_not_compliant_are_named_with_drift_and_error():
    rows = {
        "a": {"compliant": True, "drift": [], "error": ""},
        "b": {"compliant": False, "drift": [F("unit.differs", "unit file"),
                                            F("live.accept_length_low", "live: accept length 1.6 < 2.5")], "error": ""},
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
    assert row["live"] == GATE["reading"] and row["mode"] == "remediate" and row["check_mode"] is False


def test_drift_names_each_thing_not_as_it_should_be():
    row = build(fix=dict(FIX, release="0.5.8", compliant=False), draft={"compliant": False},
                unit={"changed": True}, environment={"changed": True},
                fingerprint={"restart_needed": True, "reasons": ["unit"]},
                probe_live={"reasons": [F("live.settings_differ", "live: x")]}, audit=True)
    assert row["drift"] == [F("release.not_pinned", "sglang 0.5.8 installed, 0.5.9 pinned"),
                            F("source.unpatched", "SGLang source not remediated"),
                            F("draft.ids_differ", "draft config layer ids"), F("unit.differs", "unit file"),
                            F("environment.differs", "service environment"),
                            F("server.differs", "running server differs from the files"),
                            F("live.settings_differ", "live: x")]
    assert row["compliant"] is False and row["mode"] == "audit" and row["health"] == "not checked"
    assert row["live"] == {"reasons": [F("live.settings_differ", "live: x")]}


def test_outside_audit_and_check_mode_written_files_are_not_drift_but_an_error_is():
    site = "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/models/deepseek_v2.py"
    undo = {"restored": ["/etc/systemd/system/sglang.service restored to sha256 %s (0644 root:root)" % ("a" * 64),
                         "%s restored to sha256 %s (0644 root:root)" % (site, "c" * 64)],
            "restored_files": [{"path": "/etc/systemd/system/sglang.service", "sha256": "a" * 64, "mode": "0644",
                                "owner": "root:root"},
                               {"path": site, "sha256": "c" * 64, "mode": "0644", "owner": "root:root"}],
            "left": ["user sglang (created by this run)"], "service": {"active": True, "enabled": True},
            "release": "0.5.9", "id": "000003"}
    row = build(fix=FIX, draft={"compliant": False, "changed": True}, unit={"changed": True},
                error="Gate: not healthy", failed_task="Fail when the server never became healthy",
                undo=undo, restarted=True, gate={"status": 503})
    assert row["drift"] == [] and row["compliant"] is False and row["health"] == "failed"
    assert row["rolled_back"] is True and row["rollback"] == undo["restored"]
    assert row["left"] == ["user sglang (created by this run)"]
    assert row["failed_task"] == "Fail when the server never became healthy"
    # The new server, then one on what was put back; the file in place is the one put back.
    assert row["restarted"] is True and row["restarts"] == 2
    assert row["sha256_after"] == "c" * 64 and row["sha256_before"] == FIX["sha256_before"]
    # Read from the records, never from the lines' wording.
    worded = build(fix=FIX, error="x", undo=dict(undo, restored=["deepseek_v2.py is back as it was"]))
    assert worded["sha256_after"] == "c" * 64
    assert build(fix=FIX, error="x", undo=dict(undo, restored_files=[]))["sha256_after"] == FIX["sha256_after"]
    assert row["live"] is None or isinstance(row["live"], dict)
    # A failed run that never restarted put the files back and made no restart.
    quiet = build(fix=FIX, error="Write the unit: read-only file system",
                  undo=dict(undo, restored=undo["restored"][:1], restored_files=undo["restored_files"][:1]))
    assert quiet["restarts"] == 0 and quiet["rolled_back"] is True and quiet["sha256_after"] == FIX["sha256_after"]
    # A putting-back that failed part-way lists what it put back, but the host is not rolled back
    # and nothing restarted on it.
    half = build(fix=FIX, error="Gate: not healthy; putting this run's change back FAILED", restarted=True,
                 undo={"failed": True, "restored": undo["restored"][:1], "left": ["/opt/sglang/venv with sglang x"]})
    assert half["rolled_back"] is False and half["rollback"] == undo["restored"][:1] and half["restarts"] == 1
    assert half["left"] == ["/opt/sglang/venv with sglang x"] and half["compliant"] is False


def test_a_run_that_kept_its_change_lists_it_and_the_rollback_row_names_what_it_put_back():
    row = build(fix=FIX, restarted=True, closed={"changes": ["/etc/sglang/sglang.env (absent) -> 0a1b2c3d4e5f"]})
    assert row["changes"] == ["/etc/sglang/sglang.env (absent) -> 0a1b2c3d4e5f"] and row["restarts"] == 1
    assert row["mode"] == "remediate" and row["rolled_back"] is False
    back = build(rollback_run=True, restarted=True,
                 undo={"id": "000004", "release": "0.5.9", "restored": ["x restored to sha256 c (0644 root:root)"],
                       "service": {"active": True}})
    assert (back["mode"], back["release"], back["decision"], back["restarts"]) == ("rollback", "0.5.9", "rollback", 1)
    assert back["drift"] == [] and back["compliant"] is True and back["rolled_back"] is True
    nothing = build(rollback_run=True, undo={"id": None, "restored": []})
    assert nothing["decision"] == "nothing to roll back" and nothing["restarts"] == 0


def test_check_mode_names_what_would_change_as_restart_reasons():
    row = build(fix=FIX, draft={"changed": True, "compliant": False}, unit={"changed": True}, environment=SKIPPED,
                fingerprint={"restart_needed": False, "reasons": []}, check_mode=True)
    assert row["restart_needed"] is True
    assert row["restart_reasons"] == ["SGLang source would change", "draft config would change", "unit would change"]
    assert row["mode"] == "remediate" and row["check_mode"] is True and F("unit.differs", "unit file") in row["drift"]
    # Without a managed service nothing would restart.
    assert build(fix=FIX, unit={"changed": True}, check_mode=True, service_manage=False)["restart_reasons"] == []


def test_a_host_whose_engine_never_ran_has_defaults_not_errors():
    row = build()
    assert row["release"] == "0.5.9" and row["decision"] == "unknown" and row["family"] == ""
    assert row["drift"] == [F("release.not_pinned", "sglang ? installed, 0.5.9 pinned"),
                            F("source.unpatched", "SGLang source not remediated")]
    assert build(check_mode=True)["decision"] == "pending-install"
    assert row["accept_length"] is None and row["tokens_per_s"] is None and row["server_args_warnings"] == []


def test_server_args_warnings_come_from_the_modules_resolution():
    # sglang_server_flags' result; the failed result of a refusal carries its resolution too.
    parse = {"failed": True, "resolved": True,
             "resolution": {"status": "refused", "warnings": ["speculative_num_draft_tokens was adjusted"]}}
    assert build(fix=FIX, parse=parse)["server_args_warnings"] == ["speculative_num_draft_tokens was adjusted"]
    unavailable = {"resolved": False, "resolution": {"status": "unavailable", "msg": "ImportError: no torch"}}
    assert build(fix=FIX, parse=unavailable)["server_args_warnings"] == []
    assert build(fix=FIX, parse={"skipped": True})["server_args_warnings"] == []


def test_the_probe_row_and_the_report_row_are_one_builder():
    probe = {"compliant": True, "release": "0.5.9", "decision": "patch", "draft_layer_ids": [-1, 2, 30],
             "eagle3": {k: FIX[k] for k in ("family", "file_state_before", "sha256_before", "sha256_after", "evidence")},
             "live": {"reasons": []}}
    a = R.probe_row("gpu-01", "0.5.9", probe, {"num_steps": 15})
    b = build(fix=dict(probe["eagle3"], release="0.5.9", decision="patch", draft_layer_ids=[-1, 2, 30], compliant=True),
              probe_live={"reasons": []}, speculative_flags={"num_steps": 15})
    assert a == b and set(a) == set(b)


def test_a_skipped_result_counts_as_a_task_that_did_not_run():
    """The transaction registers its put-back and its gate even where it skips them (a remediation
    puts nothing back; an undo on a host that served nothing gates nothing): a skipped result
    is no evidence, not a failed health check."""
    from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rows
    skipped = {"skipped": True, "changed": False, "false_condition": "_sglang_tx_serve | bool"}
    assert _rows._result(skipped) == {} and _rows._result(None) == {}
    assert _rows._result({"status": 200, "ready": True})["status"] == 200


def test_the_row_leaves_out_the_run_records_own_fields():
    """The run record (tasks/report.yml) carries whether the host is out of rotation and what the soak
    re-reads; the row built from it does not, and is the row of the same record without them."""
    soak = {"url": "http://127.0.0.1:30000", "api_key_file": "/etc/sglang/keys.yaml", "expected": {},
            "accept_length_min": 2.5, "request_timeout": 30, "prompts": ["p"]}
    with_own = build(drained=True, soak=soak, error="boom", failed_task="t")
    assert "drained" not in with_own and "soak" not in with_own
    assert with_own == build(error="boom", failed_task="t")


def test_time_out_of_rotation_and_restart_to_healthy():
    """From the drain (or stop) to the undrain (or healthy), and the server's start to healthy; none while out."""
    row = build(out_at="2026-12-05T10:00:00.000000+00:00", back_at="2026-12-05T10:07:30.250000+00:00",
                gate=dict(GATE, healthy_after=412.34), restarted=True)
    assert row["out_of_rotation_s"] == 450.2 and row["restart_to_healthy_s"] == 412.34
    assert (row["left_rotation_at"], row["back_in_rotation_at"]) == (
        "2026-12-05T10:00:00.000000+00:00", "2026-12-05T10:07:30.250000+00:00")
    still_out = build(out_at="2026-12-05T10:00:00+00:00", back_at=None, gate=dict(GATE, ready=False, status=503))
    assert still_out["out_of_rotation_s"] is None and still_out["restart_to_healthy_s"] is None
    assert still_out["left_rotation_at"] == "2026-12-05T10:00:00+00:00" and still_out["back_in_rotation_at"] is None
    assert build()["out_of_rotation_s"] is None


def test_a_dry_rows_carries_the_findings_only_the_probe_makes_and_no_other():
    """The audit timer's finding and the staged release's reach an audit's row from the probe, where no later task
    reads them again; the probe's other findings come from the tasks that re-read them, once."""
    timer = {"code": "timer.differs", "text": "the audit timer is not as the role installs it: sglang-audit.timer "
             "is-active: inactive"}
    seal = {"code": "release.not_sealed", "text": "sealed as nothing"}
    other = {"code": "unit.differs", "text": "unit differs from the rendered one"}
    fix = {"release": "0.5.9", "compliant": True}
    for audit in (True, False):
        row = R.remediation_row("h", "0.5.9", fix=fix, probe_reasons=[timer, seal, other], audit=audit)
        assert row["drift"] == ([timer, seal] if audit else []), row["drift"]
