"""plugins/module_utils/_inputs*.py: the role's input contract, one rule at a time.

Every case starts from the role's real defaults (defaults/main.yml, with the
demo fleet's overrides where they matter) and changes one variable; the message
must name the variable and the value, and a valid value must pass.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import COLLECTIONS_PATH, REPO, ROLE  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.fleetops.sglang.plugins.module_utils import _inputs as si  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _inputs_values as siv  # noqa: E402


def defaults() -> dict:
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values["sglang_server_command"] = "/opt/sglang/venv/bin/python -m sglang.launch_server"
    return values


def errors(**changes) -> list:
    values = defaults()
    values.update(changes)
    return si.variable_errors(values)


def refused(var: str, value, *expect: str) -> str:
    found = errors(**{var: value})
    assert found, "%s=%r was accepted" % (var, value)
    text = " ".join(found)
    assert var in text, text
    for piece in expect:
        assert piece in text, text
    return text


def test_the_defaults_pass():
    assert si.variable_errors(defaults()) == []


def test_the_demo_fleet_passes(tmp_path):
    values = defaults()
    values.update(yaml.safe_load((REPO / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text()))
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    (wheels / "sglang-0.5.9-py3-none-any.whl").write_bytes(b"")
    values.update(sglang_wheelhouse=str(wheels),
                  sglang_server_command="/opt/sglang/venv/bin/python /usr/local/lib/x/sglang_test_double.py")
    assert si.variable_errors(values) == []


def test_every_variable_of_the_specs_has_a_rule():
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    assert set(si.VARIABLES) == set(spec["argument_specs"]["main"]["options"])
    assert all(rule.accepted for rule in si.VARIABLES.values())


def test_the_playbooks_hooks_and_the_roles_own_facts_are_known_names():
    values = defaults()
    values["sglang_serial"] = [1, "25%"]
    values["sglang_remediation"] = {"host": "x"}
    values["sglang_drain_flag"] = "/var/lib/sglang/drained"
    values["other_prefix_entirely"] = 1
    assert si.variable_errors(values) == []


@pytest.mark.parametrize("name, near", [
    ("sglang_speculative_numsteps", "sglang_speculative_num_steps"),
    ("sglang_eagle3_layer_id", "sglang_eagle3_layer_ids"),
    ("sglang_health_timout", "sglang_health_timeout"),
    ("sglang_max_fail_percent", "sglang_max_fail_percentage"),
    ("sglang_tp", "sglang_tp_size"),
    ("sglang_zzz_qqq", None),
])
def test_an_unknown_sglang_variable_is_refused_naming_the_nearest_one(name, near):
    """A typo in a fleet inventory would otherwise leave the role on the default, without a word."""
    values = defaults()
    values[name] = 7
    (msg,) = si.variable_errors(values)
    assert msg.startswith("%s is not a variable of the role, so its value would be ignored" % name), msg
    assert ("did you mean %s?" % near in msg) if near else "did you mean" not in msg, msg
    # Checking some variables by name leaves the others (and unknown names) alone.
    assert si.variable_errors(values, names=["sglang_port"]) == []


@pytest.mark.parametrize("name", si.REPLICA_NAMES)
def test_a_replicas_variables_are_refused_where_no_playbook_read_the_replicas(name):
    values = defaults()
    values[name] = 1
    (msg,) = si.variable_errors(values)
    assert msg.startswith("%s names a node of a multi-node replica (--nnodes), whose nodes must stop and start "
                          "together" % name), msg
    assert "once per node" in msg and "Run playbooks/remediate.yml, or remove %s." % name in msg
    assert "did you mean" not in msg
    # Read by the playbook (tasks/replicas.yml): its own rules judge them (plugin_utils/_replicas.py).
    assert si.variable_errors(values, replicas_read=True) == []


def test_message_style_names_variable_value_and_what_is_accepted():
    (msg,) = errors(sglang_port=70000)
    assert msg == "sglang_port=70000 is out of range; accepted: an integer from 1 to 65535."


@pytest.mark.parametrize("value", [0, 65536, 70000, "70000", -1, "abc", True, 1.5, None, [1]])
def test_port_range(value):
    refused("sglang_port", value, str(siv.shown(value)))


@pytest.mark.parametrize("value", [1, 65535, "8080"])
def test_port_accepted(value):
    assert errors(sglang_port=value) == []


@pytest.mark.parametrize("var", ["sglang_tp_size", "sglang_start_timeout", "sglang_health_timeout"])
@pytest.mark.parametrize("value", [0, -3, "x", 2.5, False, None])
def test_positive_ints(var, value):
    refused(var, value, "positive integer")


@pytest.mark.parametrize("value", [20, 5, 0, "abc"])
def test_health_request_timeout_above_sglangs_own_check(value):
    refused("sglang_health_request_timeout", value, "above 20")


@pytest.mark.parametrize("value", [0, 6, "many"])
def test_live_gate_requests_within_the_prompts(value):
    refused("sglang_live_gate_requests", value, "from 1 to 5")


@pytest.mark.parametrize("value", [-0.5, "high", 17, True])
def test_accept_length_min(value):
    refused("sglang_accept_length_min", value)


def test_accept_length_min_up_to_draft_tokens():
    assert errors(sglang_accept_length_min=16) == []
    refused("sglang_accept_length_min", 16.5, "sglang_speculative_num_draft_tokens=16")


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.1, "x", True, [0.5]])
def test_mem_fraction_in_open_interval(value):
    refused("sglang_mem_fraction_static", value, "between 0 and 1")


@pytest.mark.parametrize("value", [None, 0.85, "0.85", 0.5])
def test_mem_fraction_accepted(value):
    assert errors(sglang_mem_fraction_static=value) == []


@pytest.mark.parametrize("var", ["sglang_venv", "sglang_state_dir", "sglang_home", "sglang_model_path",
                                 "sglang_draft_model_path", "sglang_python", "sglang_wheelhouse_remote"])
@pytest.mark.parametrize("value", ["relative/path", "", "~/models", "/opt/../etc/x", 5])
def test_host_paths_absolute_and_normalised(var, value):
    refused(var, value)


@pytest.mark.parametrize("var", ["sglang_venv", "sglang_home", "sglang_python", "sglang_wheelhouse_remote"])
@pytest.mark.parametrize("value", ["/opt/my venv", "/opt/50%", "/opt/$HOME", "/opt/a;b"])
def test_paths_written_unquoted_have_no_syntax_characters(var, value):
    refused(var, value, "unquoted")


@pytest.mark.parametrize("var", ["sglang_venv", "sglang_state_dir", "sglang_home", "sglang_wheelhouse_remote"])
@pytest.mark.parametrize("value", ["/", "/etc", "/usr/", "/var/lib", "/etc/sglang"])
def test_owned_directories_are_not_system_directories(var, value):
    refused(var, value, "system directory")


def test_model_paths_may_hold_spaces_they_are_quoted():
    assert errors(sglang_model_path="/models/DeepSeek V3") == []


@pytest.mark.parametrize("home, other, path", [
    ("/opt/sglang", "sglang_venv", "/opt/sglang/venv"),
    ("/opt/sglang/venv", "sglang_venv", "/opt/sglang/venv"),
    ("/opt/sglang/", "sglang_wheelhouse_remote", "/opt/sglang/wheels"),
    ("/opt/py", "sglang_python", "/opt/py/bin/python3"),
])
def test_a_home_holding_what_root_runs_is_refused(home, other, path):
    text = " ".join(errors(sglang_home=home, **{other: path}))
    assert "sglang_home=" in text and "holds %s=%s" % (other, path) in text, text


def test_a_home_beside_the_venv_is_accepted():
    assert errors(sglang_home="/opt/sglang-home", sglang_venv="/opt/sglang/venv",
                  sglang_wheelhouse_remote="/opt/sglang/wheels") == []


def test_state_dir_and_home_stay_apart_and_out_of_the_venv():
    refused("sglang_home", "/var/lib/sglang-remediation/home", "overlaps sglang_state_dir")
    refused("sglang_state_dir", "/opt/sglang/venv/state", "inside sglang_venv")


@pytest.mark.parametrize("var", ["sglang_user", "sglang_group"])
@pytest.mark.parametrize("value", ["root", "Sglang", "-x", "a b", "1abc", "x" * 40, "", 7])
def test_posix_account_names(var, value):
    refused(var, value, "POSIX")


@pytest.mark.parametrize("value", ["sglang", "_svc", "sg-lang2"])
def test_posix_account_names_accepted(value):
    assert errors(sglang_user=value, sglang_group=value) == []


@pytest.mark.parametrize("value", ["sglang.service", "sg/lang", "sg@1", "", "a b"])
def test_service_name(value):
    refused("sglang_service_name", value, "systemd unit name")


@pytest.mark.parametrize("value", ["sglang-0", "sglang_v3.a"])
def test_service_name_accepted(value):
    assert errors(sglang_service_name=value) == []


@pytest.mark.parametrize("value", ["0.0.0.0", "::", "::1", "10.0.0.1", "localhost", "gpu-01.internal"])
def test_host_accepted(value):
    assert errors(sglang_host=value) == []


@pytest.mark.parametrize("value", ["", "300.1.1.1", "a b", "http://x", "-bad", 1])
def test_host_refused(value):
    refused("sglang_host", value, "IP address or host name")


def test_environment_keys_and_values():
    assert errors(sglang_environment={"HF_TOKEN": "hf_x", "N": 3, "F": 0.5}) == []
    refused("sglang_environment", {"HF-TOKEN": "x"}, "sglang_environment key=HF-TOKEN")
    refused("sglang_environment", {"1X": "x"}, "1X")
    text = refused("sglang_environment", {"FLAG": True}, "sglang_environment.FLAG", "bool")
    assert "value not shown" in text
    refused("sglang_environment", {"L": ["a"]}, "sglang_environment.L", "list")
    refused("sglang_environment", {"N": None}, "sglang_environment.N", "null")
    refused("sglang_environment", ["A=1"], "not a mapping")


def test_environment_values_are_never_shown():
    for value in ("hf_secret\nExecStartPre=/bin/sh", "s\u00e9cret_hf"):
        text = refused("sglang_environment", {"HF_TOKEN": value}, "sglang_environment.HF_TOKEN")
        assert "secret_hf" not in text and "hf_secret" not in text, text


KEY = "a-real-looking-secret-9f8e7d"


def test_the_logging_configuration_is_the_roles_where_a_key_is_set():
    own = {"SGLANG_LOGGING_CONFIG_PATH": "/etc/mine.json"}
    assert errors(sglang_environment=own) == []
    (text,) = errors(sglang_environment=own, sglang_api_key=KEY)
    assert text.startswith("sglang_environment.SGLANG_LOGGING_CONFIG_PATH is set, but with sglang_api_key"), text
    assert "remove SGLANG_LOGGING_CONFIG_PATH from sglang_environment" in text and KEY not in text
    assert errors(sglang_environment=own, sglang_admin_api_key=KEY)


@pytest.mark.parametrize("var", ["sglang_api_key", "sglang_admin_api_key"])
def test_api_keys_accepted(var):
    assert errors(**{var: KEY}) == [] and errors(**{var: ""}) == []
    assert errors(**{var: "!#$%&'()*+,-./:;<=>?@[]^_`{|}~\"\\x"}) == []


@pytest.mark.parametrize("var", ["sglang_api_key", "sglang_admin_api_key"])
@pytest.mark.parametrize("value, needle", [
    ("short-1", "7 characters long"), ("x" * 513, "513 characters long"),
    ("with space-123", "a space or a character outside printable ASCII"),
    ("caf\u00e9-secret-key", "outside printable ASCII"), (12345678, "is a int"), (["a-secret-key-1"], "is a list"),
    ("new\nline-secret-key", "control character \\n"),
])
def test_api_keys_refused_without_showing_them(var, value, needle):
    text = refused(var, value, needle, "value not shown")
    for piece in ("short-1", "xxxxxxxx", "with space", "secret-key", "12345678", "line-secret"):
        assert piece not in text, text


@pytest.mark.parametrize("extra, option, var", [
    (["--api-key", KEY], "--api-key", "sglang_api_key"),
    (["--log-level", "info", "--api-key=" + KEY], "--api-key", "sglang_api_key"),
    (["--api-k", KEY], "--api-key", "sglang_api_key"),
    (["--admin-api-key", KEY], "--admin-api-key", "sglang_admin_api_key"),
    (["--admin-api-k=" + KEY], "--admin-api-key", "sglang_admin_api_key"),
])
def test_key_flags_in_extra_args_are_refused_naming_the_variable(extra, option, var):
    text = refused("sglang_extra_args", extra, option, var, "value not shown", "--config")
    assert KEY not in text, text


def test_flags_that_only_look_like_key_flags_pass():
    """Too short to name a key flag by itself: the release's own table judges these on the host."""
    assert errors(sglang_extra_args=["--attention-backend", "fa3", "--ad", "--ap"]) == []


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\t", "\x1b", "\x7f"])
@pytest.mark.parametrize("var,wrap", [
    ("sglang_home", lambda c: "/var/lib/sg" + c + "x"),
    ("sglang_model_path", lambda c: "/models/x" + c + "y"),
    ("sglang_extra_args", lambda c: ["--log-level", "info" + c + "ExecStartPre=/bin/true"]),
    ("sglang_server_command", lambda c: "/opt/sglang/venv/bin/python" + c + "-m x"),
    ("sglang_pip_extra_args", lambda c: ["--pre" + c]),
    ("sglang_service_name", lambda c: "sglang" + c),
    ("sglang_host", lambda c: "127.0.0.1" + c),
])
def test_control_characters_are_refused_everywhere(var, wrap, char):
    text = refused(var, wrap(char), "control character")
    assert "\n" not in text and "\r" not in text, "the message itself must stay on one line"


@pytest.mark.parametrize("value", ["python -m sglang", "", "   ", "/usr/bin/python -c 'print(\"%d\")'", 5,
                                   "/opt/venv/bin/python -m sglang.launch_server --api-key ${KEY}",
                                   "/opt/venv/bin/python -m sglang.launch_server --served-model-name $HF_TOKEN"])
def test_server_command(value):
    refused("sglang_server_command", value)


@pytest.mark.parametrize("var", ["sglang_pip_no_deps", "sglang_disable_cuda_graph", "sglang_enable_metrics",
                                 "sglang_service_manage", "sglang_restart_on_change", "sglang_audit",
                                 "sglang_fast_path", "sglang_audit_memo", "sglang_rollback_on_failure"])
def test_booleans(var):
    for good in (True, False, "yes", "false", "On", 0, 1):
        assert errors(**{var: good}) == [], (var, good)
    for bad in ("maybe", 2, None, [], "enabled"):
        refused(var, bad, "not a boolean")


def test_hook_files_must_exist_on_the_controller(tmp_path):
    hook = tmp_path / "drain.yml"
    hook.write_text("---\n[]\n")
    for var in ("sglang_pre_restart_tasks", "sglang_post_restart_tasks"):
        assert errors(**{var: str(hook)}) == []
        assert errors(**{var: ""}) == []
        refused(var, str(tmp_path / "missing.yml"), "does not exist on the controller")
        refused(var, "hooks/drain.yml", "absolute")


def test_pip_inputs(tmp_path):
    good = "a" * 64
    assert errors(sglang_pip_hashes=[good]) == []
    refused("sglang_pip_hashes", ["sha256:" + good], "sha256 hex digest")
    refused("sglang_pip_hashes", "abc", "not a list")
    refused("sglang_pip_index_url", "mirror.internal/simple", "index URL")
    refused("sglang_pip_index_url", "https://m/ simple", "index URL")
    assert errors(sglang_pip_index_url="https://mirror.internal/simple") == []
    refused("sglang_pip_extra_args", "--pre", "not a list")
    refused("sglang_extra_args", [["--x"]], "sglang_extra_args[0]")
    # Credentials: an index URL may hold them (pip reads it from a 0600 config file); no message shows them.
    assert errors(sglang_pip_index_url="https://bot:t0ken@mirror.internal/simple") == []
    text = refused("sglang_pip_index_url", "https://bot:t0ken@mirror.internal/ simple", "index URL")
    assert "t0ken" not in text and "https://***@mirror.internal/ simple" in text
    # ... but pip's arguments are everyone's to read: a URL with credentials there is refused, without them shown.
    for arg in ("https://bot:t0ken@mirror.internal/simple", "--extra-index-url=http://t0ken@m.internal/s",
                "git+https://bot:t0ken@git.internal/x.git"):
        text = refused("sglang_pip_extra_args", ["--pre", arg], "sglang_pip_extra_args[1]", "credentials",
                       "sglang_pip_index_url", "~/.netrc")
        assert "t0ken" not in text, text
    assert errors(sglang_pip_extra_args=["--extra-index-url", "https://mirror.internal/simple",
                                         "--trusted-host", "mirror.internal"]) == []
    text = refused("sglang_pip_extra_args", ["https://bot:t0ken@m/s", 3], "sglang_pip_extra_args[1]", "not a string")
    assert "t0ken" not in text


def test_a_lock_of_the_closure_is_read_on_the_controller(tmp_path):
    lock = tmp_path / "closure.lock"
    lock.write_text("sglang==0.5.9 --hash=sha256:%s\npackaging==24.2 --hash=sha256:%s\n" % ("a" * 64, "b" * 64))
    assert errors(sglang_pip_lock=str(lock)) == []
    refused("sglang_pip_lock", "closure.lock", "not an absolute path")
    refused("sglang_pip_lock", str(tmp_path / "none.lock"), "cannot be read on the controller")
    assert "not sglang==0.5.12.post1 (sglang_version)" in " ".join(
        errors(sglang_pip_lock=str(lock), sglang_version="0.5.12.post1"))
    assert "give one of them" in " ".join(errors(sglang_pip_lock=str(lock), sglang_pip_hashes=["c" * 64]))
    lock.write_text("sglang==0.5.9 --hash=sha256:%s\n--extra-index-url https://mirror.internal/simple\n" % ("a" * 64))
    refused("sglang_pip_lock", str(lock), "line 2 (--extra-index-url", "not one package pinned")


def test_wheelhouse(tmp_path):
    # "ftp" never gets here: argument_specs' choices refuse it (molecule/bad-input).
    text = " ".join(errors(sglang_install_source="wheelhouse", sglang_wheelhouse=""))
    assert "sglang_install_source=wheelhouse" in text
    text = " ".join(errors(sglang_install_source="wheelhouse", sglang_wheelhouse=str(tmp_path / "nope")))
    assert "sglang_wheelhouse=" in text and "not a directory on the controller" in text
    text = " ".join(errors(sglang_install_source="wheelhouse", sglang_wheelhouse=str(tmp_path)))
    assert "no wheel for sglang 0.5.9" in text


def test_versions():
    refused("sglang_version", "0.5.4.post1", "0.5.4.post2")
    refused("sglang_version", 0.6, "quote it")
    refused("sglang_version", "0.5.9-hotfix", "not an SGLang release string")
    refused("sglang_version", "0.5.4rc1", "0.5.4.post2")
    for good in ("0.5.4.post2", "0.5.9", "0.5.12.post1", "0.5.23", "0.6.0rc1"):
        assert errors(sglang_version=good) == [], good


def test_version_order_is_pep440():
    order = ["0.5.4.dev1", "0.5.4a1", "0.5.4rc1", "0.5.4", "0.5.4.post1", "0.5.4.post2", "0.5.10", "0.6.0"]
    assert sorted(order, key=siv.version_key) == order


def test_speculative_triple():
    refused("sglang_speculative_num_steps", 1, "silently set")
    for var in ("sglang_speculative_num_steps", "sglang_speculative_eagle_topk",
                "sglang_speculative_num_draft_tokens"):
        refused(var, None, "%s=null" % var)
        refused(var, 0, "positive int")
    assert errors(sglang_speculative_num_steps="15", sglang_speculative_num_draft_tokens="16") == []


def test_layer_ids_and_pp():
    refused("sglang_eagle3_layer_ids", ["2"], "sglang_eagle3_layer_ids[0] is '2' (str)")
    refused("sglang_pp_size", 2, "sglang_pp_size=2")
    assert errors(sglang_pp_size="1") == []


def test_every_finding_is_listed_at_once():
    found = errors(sglang_port=0, sglang_tp_size=0, sglang_user="root")
    assert [m.split("=")[0] for m in found] == ["sglang_tp_size", "sglang_port", "sglang_user"]


# ----------------------------------------------- hardening, live reading, textfile


@pytest.mark.parametrize("value", ["paranoid", "", None, True])
def test_hardening_profile_is_a_choice(value):
    refused("sglang_service_hardening", value, "default, strict")


def test_extra_directives_are_judged_by_the_unit_rules():
    refused("sglang_service_extra_directives", {"Servce": {"LimitNPROC": 1}}, "Servce")
    refused("sglang_service_extra_directives", {"Service": {"LimitNPROC": "1\nExecStartPre=/bin/sh"}},
            "control character")
    assert errors(sglang_service_extra_directives={"Service": {"LimitNPROC": 65536}}) == []


@pytest.mark.parametrize("value", [-1, 6, "x", 1.5])
def test_live_probe_requests_within_the_prompts(value):
    refused("sglang_live_probe_requests", value, "from 0 to 5")


@pytest.mark.parametrize("value", [0, 1025, "many"])
def test_live_probe_tokens_bounded(value):
    refused("sglang_live_probe_tokens", value, "from 1 to 1024")


@pytest.mark.parametrize("value", ["relative.prom", "/var/lib/node/x.txt", "/var/lib/node/.prom",
                                   "/var/lib/a b/x.prom", "/var/lib/../x.prom"])
def test_textfile_path_is_an_absolute_prom_file(value):
    refused("sglang_metrics_textfile_path", value, ".prom")


def test_new_booleans_are_booleans():
    refused("sglang_live_check", "maybe", "true or false")
    refused("sglang_metrics_textfile", "maybe", "true or false")
