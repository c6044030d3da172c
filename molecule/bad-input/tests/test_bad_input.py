"""Bad input against a converged host: every case fails, names its cause, and moves nothing.

Each case runs the converge playbook with its extra vars (as JSON, so types are
exact) and must end with rc != 0 and a failure message holding every expected
substring (the variable or file at fault). The host is snapshotted (file list with
modes, owners, sizes, mtimes; sha256 of every file the role or test bed writes;
the unit's state and start time) before and after. Cases that break the host to
get there put it back afterwards, and that is checked too.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import (  # noqa: E402
    DRAFT_CONFIG, PROJECT, SITE, DEEPSEEK_REL, UNIT, run_playbook, sha256, snapshot, snapshot_diff, starts,
)

sys.path.insert(0, str(PROJECT / "testbed"))
import checkout  # noqa: E402

checkout.importable()
# Every file the role checks against the published wheel.
from ansible_collections.fleetops.sglang.plugins.module_utils._anchors import FILES as ANCHORED  # noqa: E402

DRAFT_DIR = "/models/DeepSeek-V3-EAGLE3"
COMMUNICATOR_REL = "sglang/srt/layers/communicator.py"
# python3 -c: rewrite a file's RECORD line for its bytes (argv: file, RECORD, its relative path).
RECORD_AGREES = ("'import base64,hashlib,sys; f,r,rel=sys.argv[1:]; d=open(f,\"rb\").read(); "
                 "h=base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b\"=\").decode(); "
                 "L=[(\"%s,sha256=%s,%d\" % (rel,h,len(d))) if l.startswith(rel+\",\") else l "
                 "for l in open(r).read().splitlines()]; open(r,\"w\").write(\"\\n\".join(L)+\"\\n\")'")
STASH = "/root/bad-input-stash"  # outside every watched path
ENV_FILE = "/etc/sglang/sglang.env"
CHANGES_DIR = "/var/lib/sglang-remediation/changes"

# A task of host.yml (the steps after the probe), by its name in the output.
PATCH_TASK = "Remediate the EAGLE-3 embedding capture in the release this run deploys"

def report_row(report_dir: Path) -> Dict[str, Any]:
    """The one host's row of the fleet report the callback wrote for the last run."""
    rows = json.loads((report_dir / "latest" / "fleet.json").read_text())["hosts"]
    assert len(rows) == 1, rows
    return rows[0]


@dataclass
class Case:
    name: str
    extra_vars: Dict[str, Any]
    expect: List[str]
    # Shell run on the host before the playbook, and the one that undoes it.
    breaks: Optional[str] = None
    restore: Optional[str] = None
    tags: List[str] = field(default_factory=list)
    # Text that must appear nowhere in the run's output (a secret the case carries).
    hidden: List[str] = field(default_factory=list)


CASES = [
    Case("embedding_id_not_first", {"sglang_eagle3_layer_ids": [2, -1, 30]},
         ["sglang_eagle3_layer_ids[1] is -1", "only accepted as the first id"]),
    Case("duplicate_embedding_id", {"sglang_eagle3_layer_ids": [-1, -1, 2]},
         ["sglang_eagle3_layer_ids", "[-1, -1, 2]"]),
    Case("id_as_string", {"sglang_eagle3_layer_ids": ["2"]},
         ["sglang_eagle3_layer_ids[0] is '2' (str)"]),
    Case("id_as_bool", {"sglang_eagle3_layer_ids": [True, 2, 30]},
         ["sglang_eagle3_layer_ids[0] is True (bool)"]),
    Case("id_below_minus_one", {"sglang_eagle3_layer_ids": [-2, 2, 30]},
         ["sglang_eagle3_layer_ids[0] is -2"]),
    Case("ids_empty", {"sglang_eagle3_layer_ids": []},
         ["sglang_eagle3_layer_ids must not be empty"]),
    Case("id_beyond_target_depth", {"sglang_eagle3_layer_ids": [-1, 2, 61]},
         ["sglang_eagle3_layer_ids", "61", "61 hidden layers"]),
    Case("topk1_silently_cut_draft_tokens",
         {"sglang_speculative_num_steps": 1, "sglang_speculative_eagle_topk": 1,
          "sglang_speculative_num_draft_tokens": 16},
         ["sglang_speculative_num_draft_tokens=16", "silently set"]),
    Case("draft_tokens_beyond_tree_capacity",
         {"sglang_speculative_num_steps": 1, "sglang_speculative_eagle_topk": 4,
          "sglang_speculative_num_draft_tokens": 16},
         ["sglang_speculative_num_draft_tokens=16 exceeds the draft tree capacity 5"]),
    Case("release_without_deepseek_eagle3", {"sglang_version": "0.5.4.post1"},
         ["sglang_version=0.5.4.post1", "0.5.4.post2"]),
    Case("unknown_release_string", {"sglang_version": "0.5.9-hotfix"},
         ["sglang_version=0.5.9-hotfix", "not an SGLang release string"]),
    Case("release_as_number", {"sglang_version": 0.6},
         ["sglang_version=0.6", "quote it"]),
    Case("wheelhouse_without_pinned_version", {"sglang_version": "0.5.10"},
         ["sglang_wheelhouse=", "no wheel for sglang 0.5.10"]),
    Case("pipeline_parallelism", {"sglang_pp_size": 2},
         ["sglang_pp_size=2"]),
    Case("unknown_install_source", {"sglang_install_source": "ftp"},
         ["value of sglang_install_source must be one of: index, wheelhouse, got: ftp"]),
    Case("locally_edited_deepseek_v2", {},
         ["deepseek_v2.py", "refused", "matches neither RECORD"],
         breaks=("f=$(ls -d {site}/{rel}) && cp -p \"$f\" {stash}/deepseek_v2.py && "
                 "echo '# local hotfix' >> \"$f\"").format(site=SITE, rel=DEEPSEEK_REL, stash=STASH),
         restore="f=$(ls -d {site}/{rel}) && cp -p {stash}/deepseek_v2.py \"$f\"".format(
             site=SITE, rel=DEEPSEEK_REL, stash=STASH)),
    # A tampered package ships a RECORD that agrees with its files: the published wheel's hashes
    # (plugins/module_utils/_anchors_table.py) refuse it. Here a file the forward check executes.
    Case("tampered_package_with_its_record_agreeing", {},
         ["not the package its publisher shipped for sglang", COMMUNICATOR_REL, "RECORD says sha256"],
         breaks=("f=$(ls -d {site}/{rel}) && r=$(ls -d {site}/sglang-*.dist-info/RECORD) && "
                 "cp -p \"$f\" {stash}/communicator.py && cp -p \"$r\" {stash}/RECORD && "
                 "echo 'import os as _t' >> \"$f\" && python3 -c {fix} \"$f\" \"$r\" {rel}").format(
                     site=SITE, rel=COMMUNICATOR_REL, stash=STASH, fix=RECORD_AGREES),
         restore=("f=$(ls -d {site}/{rel}) && r=$(ls -d {site}/sglang-*.dist-info/RECORD) && "
                  "cp -p {stash}/communicator.py \"$f\" && cp -p {stash}/RECORD \"$r\"").format(
                      site=SITE, rel=COMMUNICATOR_REL, stash=STASH)),
    Case("release_anchor_that_would_change_a_shipped_one",
         {"sglang_release_anchors": {"0.5.9": {rel: "0" * 64 for rel in ANCHORED}}},
         ["sglang_release_anchors['0.5.9']", "anchored by the collection", "remove it"]),
    Case("draft_config_not_json", {},
         [DRAFT_CONFIG, "is not valid JSON"],
         breaks="cp -p {c} {s}/config.json && printf '{{not json\\n' > {c}".format(c=DRAFT_CONFIG, s=STASH),
         restore="cp -p {s}/config.json {c}".format(c=DRAFT_CONFIG, s=STASH)),
    # Whoever writes model storage points the draft's config.json at a file only root may read: refused on the
    # file opened (plugins/module_utils/_modeldirs.py open_model_file), never copied into the draft's view.
    Case("draft_config_linked_out_of_its_tree", {},
         ["refusing to read %s" % DRAFT_CONFIG, "leads to /etc/sglang/sglang.env, outside the model's tree"],
         breaks="cp -p {c} {s}/linked-config.json && rm {c} && ln -s /etc/sglang/sglang.env {c}".format(
             c=DRAFT_CONFIG, s=STASH),
         restore="rm {c} && cp -p {s}/linked-config.json {c}".format(c=DRAFT_CONFIG, s=STASH),
         hidden=["hf_demo_not_a_real_token"]),
    # The server's user owns its home: a link where the cache directory was is never followed by root
    # (its owner and mode would go to /etc/sglang); a change makes the run reach the directories.
    Case("service_home_cache_swapped_for_a_link", {"sglang_mem_fraction_static": 0.61},
         ["/var/lib/sglang/cache already exists as a link"],
         breaks="mv /var/lib/sglang/cache {s}/cache && ln -s /etc/sglang /var/lib/sglang/cache".format(s=STASH),
         restore="rm /var/lib/sglang/cache && mv {s}/cache /var/lib/sglang/cache".format(s=STASH)),
    Case("draft_directory_missing_on_host", {},
         [DRAFT_CONFIG, "does not exist"],
         breaks="mv {d} {s}/draft".format(d=DRAFT_DIR, s=STASH),
         restore="mv {s}/draft {d}".format(d=DRAFT_DIR, s=STASH)),
    Case("draft_path_variable_points_nowhere", {"sglang_draft_model_path": "/models/no-such-draft"},
         ["/models/no-such-draft/config.json does not exist"]),
    # The draft must be a draft of its own (the role writes its config.json), and a
    # misspelt variable would be ignored.
    Case("draft_is_the_target", {"sglang_draft_model_path": "/models/DeepSeek-V3"},
         ["sglang_draft_model_path=/models/DeepSeek-V3 is the target's own directory",
          "sglang_model_path=/models/DeepSeek-V3"]),
    Case("variable_name_misspelt", {"sglang_speculative_numsteps": 7},
         ["sglang_speculative_numsteps is not a variable of the role",
          "did you mean sglang_speculative_num_steps?"]),
]

TARGET_CONFIG = "/models/DeepSeek-V3/config.json"
LLAMA = ("python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); "
         "c.update(architectures=[\"LlamaForCausalLM\"], model_type=\"llama\"); "
         "json.dump(c, open(sys.argv[1], \"w\"), indent=2)' ")

# One case for every class of input the preflight contract refuses (controller
# side: type, range, format, control characters), the target check on the host, and the
# release-aware layer ids. Each must fail before any write or restart.
CASES += [
    # ports, positive ints, timeouts, ranges
    Case("port_out_of_range_as_the_cli_gives_it", {"sglang_port": "70000"},
         ["sglang_port=70000", "from 1 to 65535"]),
    Case("port_zero", {"sglang_port": 0}, ["sglang_port=0", "from 1 to 65535"]),
    Case("port_not_a_number", {"sglang_port": "abc"}, ["sglang_port", "'abc'"]),
    Case("port_as_bool", {"sglang_port": True}, ["sglang_port=true", "from 1 to 65535"]),
    Case("tp_size_zero", {"sglang_tp_size": 0}, ["sglang_tp_size=0", "positive integer"]),
    Case("start_timeout_negative", {"sglang_start_timeout": -5}, ["sglang_start_timeout=-5", "positive integer"]),
    Case("health_timeout_zero", {"sglang_health_timeout": 0}, ["sglang_health_timeout=0", "positive integer"]),
    Case("health_request_timeout_below_sglangs_check", {"sglang_health_request_timeout": 10},
         ["sglang_health_request_timeout=10", "above 20"]),
    Case("live_gate_requests_beyond_the_prompts", {"sglang_live_gate_requests": 9},
         ["sglang_live_gate_requests=9", "from 1 to 5"]),
    Case("accept_length_min_no_step_can_reach", {"sglang_accept_length_min": 20},
         ["sglang_accept_length_min=20", "sglang_speculative_num_draft_tokens=16"]),
    Case("mem_fraction_above_one", {"sglang_mem_fraction_static": 1.5},
         ["sglang_mem_fraction_static=1.5", "between 0 and 1"]),
    Case("mem_fraction_zero", {"sglang_mem_fraction_static": 0}, ["sglang_mem_fraction_static=0", "between 0 and 1"]),
    # Refused by the argument spec already (it names the variable and the value).
    Case("speculative_triple_left_to_sglang", {"sglang_speculative_num_steps": None},
         ["sglang_speculative_num_steps", "None"]),
    Case("bool_that_is_not_one", {"sglang_fast_path": "maybe"}, ["sglang_fast_path", "'maybe'"]),
    # host paths
    Case("venv_relative", {"sglang_venv": "opt/sglang/venv"}, ["sglang_venv=opt/sglang/venv", "absolute path"]),
    Case("python_relative", {"sglang_python": "python3"}, ["sglang_python=python3", "absolute path"]),
    Case("model_path_relative", {"sglang_model_path": "models/DeepSeek-V3"},
         ["sglang_model_path=models/DeepSeek-V3", "absolute path"]),
    Case("wheelhouse_remote_with_dotdot", {"sglang_wheelhouse_remote": "/var/cache/../../etc"},
         ["sglang_wheelhouse_remote=/var/cache/../../etc", ". or .."]),
    Case("state_dir_is_etc", {"sglang_state_dir": "/etc"}, ["sglang_state_dir=/etc", "system directory"]),
    Case("home_with_a_space", {"sglang_home": "/var/lib/my sglang"},
         ["sglang_home=/var/lib/my sglang", "unquoted"]),
    Case("home_inside_state_dir", {"sglang_home": "/var/lib/sglang-remediation/home"},
         ["sglang_home=/var/lib/sglang-remediation/home", "overlaps sglang_state_dir"]),
    # The service user's writable home holding the code root installs and runs.
    Case("home_holding_the_venv", {"sglang_home": "/opt/sglang"},
         ["sglang_home=/opt/sglang", "holds sglang_venv=/opt/sglang/venv"]),
    # host side: what root runs or trusts, under a directory someone else than root can change
    Case("venv_under_a_directory_the_service_user_owns", {},
         ["sglang_venv=/opt/sglang/venv lies under /opt/sglang, owned by sglang", "chown root:root"],
         breaks="chown sglang /opt/sglang", restore="chown root /opt/sglang"),
    Case("wheelhouse_under_a_directory_everyone_writes", {},
         ["sglang_wheelhouse_remote=/var/cache/sglang/wheelhouse lies under /var/cache/sglang",
          "writable by every user (mode 0777)"],
         breaks="chmod 0777 /var/cache/sglang", restore="chmod 0755 /var/cache/sglang"),
    # Remote code: refused without the opt-in; with it, a model directory holding a file another user owns.
    Case("remote_code_without_the_opt_in", {"sglang_extra_args": ["--trust-remote-code"]},
         ["sglang_extra_args[0] is '--trust-remote-code'", "set sglang_trust_remote_code: true"]),
    Case("remote_code_in_a_draft_directory_the_service_user_can_write",
         {"sglang_extra_args": ["--trust-remote-code"], "sglang_trust_remote_code": True},
         ["sglang_draft_model_path=%s holds %s/config.json, owned by sglang" % (DRAFT_DIR, DRAFT_DIR)],
         breaks="chown sglang %s/config.json" % DRAFT_DIR, restore="chown root %s/config.json" % DRAFT_DIR),
    Case("extra_directive_running_a_command_as_root",
         {"sglang_service_extra_directives": {"Service": {"ExecStartPre": "+/bin/touch /pwned"}}},
         ["sglang_service_extra_directives['Service']: ExecStartPre is not accepted"]),
    Case("server_command_not_absolute", {"sglang_server_command": "python -m sglang.launch_server"},
         ["sglang_server_command=python -m sglang.launch_server", "absolute program path"]),
    Case("pre_restart_hook_missing", {"sglang_pre_restart_tasks": "/nonexistent/drain.yml"},
         ["sglang_pre_restart_tasks=/nonexistent/drain.yml", "does not exist on the controller"]),
    # names and formats
    Case("user_root", {"sglang_user": "root"}, ["sglang_user=root", "not root"]),
    Case("user_not_posix", {"sglang_user": "SGLang User"}, ["sglang_user=SGLang User", "POSIX user name"]),
    Case("group_not_posix", {"sglang_group": "9group"}, ["sglang_group=9group", "POSIX group name"]),
    Case("service_name_with_a_slash", {"sglang_service_name": "../sglang"},
         ["sglang_service_name=../sglang", "systemd unit name"]),
    Case("host_not_an_address", {"sglang_host": "not a host"}, ["sglang_host=not a host", "IP address"]),
    Case("pip_hash_with_prefix", {"sglang_pip_hashes": ["sha256:" + "a" * 64]},
         ["sglang_pip_hashes[0]=sha256:aaaa", "sha256 hex digest"]),
    Case("index_url_without_scheme", {"sglang_pip_index_url": "mirror.internal/simple"},
         ["sglang_pip_index_url=mirror.internal/simple", "URL"]),
    Case("environment_key_not_a_name", {"sglang_environment": {"HF-TOKEN": "x"}},
         ["sglang_environment key=HF-TOKEN", "environment variable name"]),
    Case("environment_value_bool", {"sglang_environment": {"SGLANG_FLAG": True}},
         ["sglang_environment.SGLANG_FLAG is a bool"]),
    # control characters: a newline would inject a directive into the unit or the env file
    Case("newline_in_extra_args", {"sglang_extra_args": ["--log-level", "info\nExecStartPre=/bin/touch /pwned"]},
         ["sglang_extra_args=", "ExecStartPre=/bin/touch /pwned", "control character \\\\n"]),
    Case("newline_in_home", {"sglang_home": "/var/lib/sglang\n[Service]"},
         ["sglang_home=", "[Service]", "control character \\\\n"]),
    Case("carriage_return_in_server_command",
         {"sglang_server_command": "/opt/sglang/venv/bin/python\r -m sglang.launch_server"},
         ["sglang_server_command=", "control character \\\\r"]),
    Case("newline_in_an_environment_secret", {"sglang_environment": {"HF_TOKEN": "hf_s3cret\nLD_PRELOAD=/x.so"}},
         ["sglang_environment", "sglang_environment.HF_TOKEN", "control character \\\\n", "value not shown"],
         hidden=["hf_s3cret", "LD_PRELOAD"]),
    # API keys: never shown, never on the command line
    Case("api_key_with_a_space", {"sglang_api_key": "s3cret key value"},
         ["sglang_api_key", "a space or a character outside printable ASCII", "value not shown"],
         hidden=["s3cret key value"]),
    Case("api_key_in_extra_args", {"sglang_extra_args": ["--log-level", "info", "--api-key=s3cretKeyValue9"]},
         ["sglang_extra_args[2] gives --api-key", "set sglang_api_key instead", "value not shown"],
         hidden=["s3cretKeyValue9"]),
    # host side: the target must be served by deepseek_v2.py (the probe sees it on a converged host)
    Case("target_swapped_for_llama", {},
         ["sglang_model_path=/models/DeepSeek-V3", "LlamaForCausalLM", "deepseek_v2.py"],
         breaks="cp -p {t} {s}/target-config.json && {llama}{t}".format(t=TARGET_CONFIG, s=STASH, llama=LLAMA),
         restore="cp -p {s}/target-config.json {t}".format(t=TARGET_CONFIG, s=STASH)),
    Case("target_path_without_config", {"sglang_model_path": "/models/no-such-target"},
         ["sglang_model_path=/models/no-such-target", "does not exist on the host"]),
    # release-aware ids: on 0.5.9 (loop family) the last layer's output is never captured
    Case("id_of_the_last_layer_never_captured", {"sglang_eagle3_layer_ids": [-1, 2, 60]},
         ["sglang_eagle3_layer_ids has [60]", "sglang 0.5.9 (forward family L)", "then 0..59"]),
]

_FATAL = re.compile(r"^(?:fatal|failed): \[[^\]]+\].*$", re.M)


def failure_text(output: str) -> str:
    """The failure lines Ansible printed, where the message must name the culprit."""
    return "\n".join(_FATAL.findall(output))


# Whether the host was last seen, by a finished case, exactly as converged. A case that
# stopped on a failed assertion leaves it False, and the next case looks again first.
_clean = {"verified": False}


@pytest.fixture(scope="module")
def converged(host):
    """The state every case must leave behind, taken once from the converged host."""
    host.run_expect([0], "mkdir -p %s" % STASH)
    assert starts(host) == 1
    state = snapshot(host)
    _clean["verified"] = True
    return state


def test_the_table_is_big_enough():
    assert len(CASES) >= 50
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_fails_naming_the_cause_and_leaves_the_host_alone(host, converged, case):
    # The previous case ended by checking the host against the converged snapshot; only
    # when it stopped before that is the host looked at again here.
    if not _clean["verified"]:
        assert snapshot_diff(converged, snapshot(host)) == [], "a previous case left the host changed"
    _clean["verified"] = False
    broken = None
    try:
        if case.breaks:
            host.run_expect([0], case.breaks)
            broken = snapshot(host)
        before = broken or converged
        run = run_playbook(extra_vars=case.extra_vars)
        fatal = failure_text(run.output)
        assert run.rc != 0, run.tail()
        assert fatal, run.tail()
        for text in case.expect:
            assert text in fatal, "%r not in the failure:\n%s" % (text, fatal)
        # Noticed by the contract, never first by a filter or a module's argument handling.
        assert "Finalization of task args" not in run.output and "filter plugin" not in fatal, fatal
        for text in case.hidden:
            assert text not in run.output, "%r leaked into the output" % text
        after = snapshot(host)
        assert snapshot_diff(before, after) == []
    finally:
        if case.restore:
            host.run_expect([0], case.restore)
    # Without a break, the snapshot after the run is the host as the case leaves it.
    assert snapshot_diff(converged, after if broken is None else snapshot(host)) == []
    assert starts(host) == 1
    _clean["verified"] = True


def test_the_host_is_still_compliant_after_the_table(host):
    run = run_playbook()
    assert run.rc == 0 and run.changed() == 0, run.tail(120)
    assert starts(host) == 1
    # On the fast path the compliant host ended at its probe: no step after it was even loaded.
    assert PATCH_TASK not in run.output, run.tail(120)
    # sglang_fast_path=false: the same compliant host goes through every step (host.yml: install, patch,
    # configure, service) and still changes nothing and starts nothing.
    full = run_playbook(extra_vars={"sglang_fast_path": False})
    assert full.rc == 0 and full.changed() == 0, full.tail(120)
    assert PATCH_TASK in full.output and "Write the draft's view with the layer ids" in full.output, full.tail(120)
    assert starts(host) == 1


def test_a_failed_gate_rolls_back_and_leaves_no_file_outside_the_state_dir(host, monkeypatch, tmp_path):
    """A valid change whose gate fails: the unit and environment come back byte for byte,
    no backup stays next to them, and what the change set kept is root's (sets 0700, their
    files 0600) under sglang_state_dir."""
    before = snapshot(host)
    unit_before, env_before = sha256(host, UNIT), sha256(host, ENV_FILE)
    changed = {
        "sglang_enable_metrics": True,  # a unit change
        "sglang_environment": {"SGLANG_TEST_DOUBLE_STARTUP_DELAY": "2",
                               "SGLANG_TEST_DOUBLE_START_LOG": "/var/lib/sglang/starts.log",
                               "HF_TOKEN": "hf_demo_not_a_real_token", "EXTRA": "1"},  # an environment change
        # Valid (at most the 16 draft tokens) but above what the test double's ~3.5 reaches.
        "sglang_accept_length_min": 15,
    }
    # The scenario's Ansible config enables only profile_tasks; the report says what the rollback did.
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks,fleetops.sglang.sglang_report")
    monkeypatch.setenv("SGLANG_REPORT_DIR", str(tmp_path))
    run = run_playbook(extra_vars=changed)
    assert run.rc != 0, run.tail()
    assert "Fail when the server does not run the installed release" in run.output, run.tail()
    assert sha256(host, UNIT) == unit_before and sha256(host, ENV_FILE) == env_before
    stray = host.run("find /etc/systemd/system /etc/sglang -name '*~' -o -name '*.[0-9]*.*@*'"
                     " -o -name '*.sglang-backup'")
    assert stray.rc == 0 and stray.stdout.split() == [], stray
    kept = host.run("find %s -mindepth 1 | xargs -r stat -c '%%F %%a %%U %%n'" % CHANGES_DIR).stdout.splitlines()
    assert any(line.startswith("regular file") for line in kept), kept
    assert all(line.startswith(("directory 700 root ", "regular file 600 root ")) for line in kept), kept
    # Outside the state dir only the service's own start log moved (two starts: the
    # failed one and the rollback's).
    outside = [d for d in snapshot_diff(before, snapshot(host))
               if "/var/lib/sglang-remediation" not in d and not d.startswith("service ")]
    assert all("/var/lib/sglang/starts.log" in d or " /etc/systemd/system/sglang.service" in d
               or " /etc/sglang/sglang.env" in d or "/var/lib/sglang/cache" in d for d in outside), outside
    row = report_row(tmp_path)
    assert row["rolled_back"] is True and row["action"].startswith("rolled back: "), row
    assert "%s restored to sha256 %s" % (UNIT, unit_before) in row["action"], row["action"]
    assert row["restarts"] == 2 and row["failed_task"].startswith("Fail when the server does not run"), row
    # And the host is compliant again on the original variables.
    rerun = run_playbook()
    assert rerun.rc == 0 and rerun.changed() == 0, rerun.tail(80)
