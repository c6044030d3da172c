"""plugins/action/sglang_probe.py and plugin_utils/_fastpath.py: the fast path's controller side.

The action must refuse what the role's own argument validation and its preflight task
refuse, with the same messages (the same code: ArgumentSpecValidator on the role's
meta/argument_specs.yml, and _inputs.variable_errors); a compliant host's row
must carry what the role's report task would record for it.
"""
from __future__ import annotations

import yaml

from conftest import COLLECTIONS_PATH, ROLE  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.fleetops.sglang.plugins.action import sglang_probe as action  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.filter import sglang as filters  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _fastpath as fp  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _inputs as si  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rows as rows  # noqa: E402


def spec() -> dict:
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def defaults() -> dict:
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values["sglang_server_command"] = "/opt/sglang/venv/bin/python -m sglang.launch_server"
    return values


PROBE = {
    "compliant": True, "reasons": [], "release": "0.5.9", "decision": "patch", "draft_layer_ids": [-1, 2, 30],
    "eagle3": {"family": "v2_loop", "file_state_before": "ours", "sha256_before": "a" * 64, "sha256_after": "a" * 64,
               "evidence": [{"line": 2634, "text": "x"}, {"line": 2978, "text": "y"}], "memo": "hit"},
    "live": {"reasons": [], "accept_length": 3.5},
    "textfile": "/var/lib/node/sglang.prom",
}
FLAGS = {"num_steps": 15, "eagle_topk": 1, "num_draft_tokens": 16}


def test_the_role_defaults_pass_both_checks():
    assert action.spec_errors(spec(), {k: v for k, v in defaults().items() if k in spec()}) == []
    assert si.variable_errors(defaults()) == []


def test_spec_errors_are_the_role_validation_messages():
    values = {k: v for k, v in defaults().items() if k in spec()}
    values["sglang_port"] = "abc"
    errors = action.spec_errors(spec(), values)
    assert len(errors) == 1 and "sglang_port" in errors[0] and "int" in errors[0], errors
    values["sglang_service_hardening"] = "paranoid"
    assert any("sglang_service_hardening" in e and "paranoid" in e for e in action.spec_errors(spec(), values))


def test_variable_checks_are_the_preflight_function_not_a_copy():
    # The preflight task calls the filter, the filter calls _inputs; so does the action.
    assert action._inputs.variable_errors is si.variable_errors
    values = dict(defaults(), sglang_eagle3_layer_ids=[2, -1, 30], sglang_model_path="relative")
    via_preflight = filters.variable_errors(values, live_prompts=5)
    via_action = action._inputs.variable_errors(dict(values), live_prompts=5)
    assert via_preflight == via_action and len(via_action) >= 2
    assert any("sglang_model_path=relative" in e for e in via_action)


def test_task_args_are_left_for_run_to_template_after_the_checks():
    template = "{{ 'http://' ~ sglang_host }}"
    assert action.ActionModule.finalize_task_arg("live", template, templar=None, context=None) is template


def test_controller_options_are_documented_and_accepted_by_the_module():
    from ansible_collections.fleetops.sglang.plugins.modules import sglang_probe as module
    doc = yaml.safe_load(module.DOCUMENTATION)
    for name in action.CONTROLLER_OPTIONS:
        assert name in doc["options"], name
    assert doc["attributes"]["action"]["support"] == "full"


def test_compliant_row_is_what_the_report_records_for_a_host_that_ends_at_its_probe():
    row = rows.probe_row("gpu-01", "0.5.9", PROBE, FLAGS, audit=False, check_mode=False)
    assert row["host"] == "gpu-01" and row["release"] == "0.5.9" and row["decision"] == "patch"
    assert row["family"] == "v2_loop" and row["file_state_before"] == "ours"
    assert row["evidence"] == [2634, 2978]
    assert row["compliant"] is True and row["drift"] == [] and row["error"] == ""
    assert row["speculative_flags"] == FLAGS
    assert row["restarted"] is False and row["restart_needed"] is False and row["health"] == "not checked"
    assert row["mode"] == "remediate" and row["textfile"] == PROBE["textfile"]


def test_a_live_finding_makes_the_row_noncompliant_and_names_it():
    finding = {"code": "live.accept_length_low", "text": "live: accept length 1.2 < 2.5"}
    probe = dict(PROBE, live={"reasons": [finding]})
    row = rows.probe_row("gpu-01", "0.5.9", probe, FLAGS, audit=True)
    assert row["compliant"] is False and row["drift"] == [finding]
    assert row["mode"] == "audit"
    # Check mode is a flag of its own: the mode says what the run was.
    checked = rows.probe_row("h", "0.5.9", dict(PROBE, live=None), FLAGS, check_mode=True)
    assert checked["mode"] == "remediate" and checked["check_mode"] is True


def test_only_a_compliant_host_on_the_fast_path_ends_at_its_probe():
    assert fp.ends_here(PROBE, True)
    assert not fp.ends_here(PROBE, False)
    assert not fp.ends_here(dict(PROBE, compliant=False), True)
    assert not fp.ends_here({"probed": False, "compliant": False}, False)


def test_the_role_reads_the_actions_one_decision_not_a_copy_of_it():
    main = (ROLE / "tasks" / "main.yml").read_text()
    assert "_sglang_probe.ends_here" in main and "_sglang_probe.compliant" not in main


def test_the_spec_is_the_roles_main_entry_point_read_through_the_loaders_public_api(tmp_path):
    from types import SimpleNamespace

    from ansible.parsing.dataloader import DataLoader

    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._loader = DataLoader()
    assert plugin._main_spec(SimpleNamespace(get_role_path=lambda: str(ROLE))) == spec()
    # A role without the file (a copy without meta/argument_specs.yml) has no spec to apply.
    assert plugin._main_spec(SimpleNamespace(get_role_path=lambda: str(tmp_path))) == {}
