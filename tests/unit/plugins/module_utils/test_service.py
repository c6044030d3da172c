"""The unit's sandbox: plugins/module_utils/_service.py and the rendered sglang.service.j2."""
from __future__ import annotations

import re

import jinja2
import pytest
from ansible.plugins.filter.core import FilterModule as CoreFilters

from conftest import COLLECTIONS_PATH, REPO as ROOT  # noqa: F401 (puts the collection on sys.path)

ROLE = ROOT / "roles" / "sglang"
from ansible_collections.fleetops.sglang.plugins.filter.sglang import FilterModule  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _service as svc  # noqa: E402

VAR = "sglang_service_extra_directives"

# What must never be in the default profile: each hides or breaks something a
# GPU server needs (docs/docsite/rst/guide_hardening.rst, Service hardening).
GPU_UNSAFE = ("MemoryDenyWriteExecute", "PrivateDevices", "DevicePolicy", "DeviceAllow", "SystemCallFilter",
              "ProcSubset", "PrivateIPC", "ProtectClock", "PrivateUsers", "PrivateNetwork", "IPAddressDeny")


# --------------------------------------------------------------------------- #
# sglang_service_extra_directives
# --------------------------------------------------------------------------- #


def test_a_valid_dict_of_sections_passes_and_renders_one_line_per_value():
    extra = {"Service": {"LimitNPROC": 65536, "DeviceAllow": ["char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw"],
                         "SendSIGKILL": True, "InaccessiblePaths": ""},
             "Unit": {"After": "nvidia-persistenced.service"}}
    assert svc.validate_extra_directives(extra) == []
    assert svc.directive_lines(extra, "Service") == [
        "LimitNPROC=65536", "DeviceAllow=char-infiniband_verbs rw", "DeviceAllow=/dev/infiniband/rdma_cm rw",
        "SendSIGKILL=yes", "InaccessiblePaths="]
    assert svc.directive_lines(extra, "Unit") == ["After=nvidia-persistenced.service"]
    assert svc.directive_lines(extra, "Install") == []
    assert svc.validate_extra_directives({}) == [] and svc.directive_lines({}, "Service") == []


@pytest.mark.parametrize("value, needle", [
    ({"Service": {"Nice": "1\nExecStartPre=/bin/sh -c id"}}, "control characters"),
    ({"Service": {"Nice": "1\r"}}, "control characters"),
    ({"Service": {"Nice": ["1", "2\t3"]}}, "[1]"),
    ({"Service": {"ReadOnlyPaths": "/data \\"}}, "trailing backslash"),
    ({"Service": {"Limit-NPROC": 1}}, "not a systemd directive name"),
    ({"Service": {"1Limit": 1}}, "not a systemd directive name"),
    ({"Service": {"Limit NPROC": 1}}, "not a systemd directive name"),
    ({"Service": {"Nice\n": 1}}, "not a systemd directive name"),
    ({"Socket": {"ListenStream": 80}}, "use one of Unit, Service, Install"),
    ({"service": {"Nice": 1}}, "use one of Unit, Service, Install"),
    ({"Service": ["Nice=1"]}, "must be a dict of directive name"),
    (["Service", "Nice=1"], "must be a dict of section"),
    ({"Service": {"Nice": None}}, "accepted are a string, number or boolean"),
    ({"Service": {"Nice": {"a": 1}}}, "accepted are a string, number or boolean"),
    ({"Service": {"ExecStart": "/bin/true"}}, "set sglang_server_command"),
    ({"Service": {"Environment": "HF_TOKEN=x"}}, "0600 environment file"),
    ({"Service": {"User": "root"}}, "set sglang_user instead"),
    # Anything that could weaken the sandbox, run a command or change who runs what is refused by name.
    ({"Service": {"ExecStartPre": "+/bin/sh -c id"}}, "ExecStartPre is not accepted"),
    ({"Service": {"ExecStopPost": "/bin/true"}}, "ExecStopPost is not accepted"),
    ({"Service": {"NoNewPrivileges": "no"}}, "NoNewPrivileges is not accepted"),
    ({"Service": {"CapabilityBoundingSet": ""}}, "CapabilityBoundingSet is not accepted"),
    ({"Service": {"AmbientCapabilities": "CAP_SYS_ADMIN"}}, "AmbientCapabilities is not accepted"),
    ({"Service": {"SupplementaryGroups": "root"}}, "SupplementaryGroups is not accepted"),
    ({"Service": {"DynamicUser": True}}, "DynamicUser is not accepted"),
    ({"Service": {"ProtectSystem": "false"}}, "ProtectSystem is not accepted"),
    ({"Service": {"ReadWritePaths": "/etc"}}, "ReadWritePaths is not accepted"),
    ({"Service": {"StandardOutput": "file:/etc/shadow"}}, "StandardOutput is not accepted"),
    ({"Service": {"WorkingDirectory": "/tmp"}}, "WorkingDirectory is not accepted"),
    ({"Service": {"PAMName": "login"}}, "PAMName is not accepted"),
    ({"Service": {"UMask": "0000"}}, "UMask is not accepted"),
    ({"Unit": {"StartLimitAction": "reboot-force"}}, "StartLimitAction is not accepted"),
    ({"Unit": {"LimitNPROC": 1}}, "Accepted in [Unit]: "),
    ({"Install": {"Also": "debug-shell.service"}}, "Also is not accepted"),
    ({"Service": {"ReadOnlyPaths": ["/data", ""]}}, "would reset the role's own ReadOnlyPaths"),
])
def test_bad_extra_directives_are_refused_naming_the_variable_and_the_value(value, needle):
    errors = svc.validate_extra_directives(value)
    assert errors, value
    assert all(e.startswith(VAR) for e in errors), errors
    assert any(needle in e for e in errors), errors


def test_the_error_shows_the_bad_value_with_its_type():
    (error,) = svc.validate_extra_directives({"Service": {"Nice": "1\nUser=root"}})
    assert "'1\\nUser=root' (str)" in error and "sglang_service_extra_directives['Service']['Nice']" in error


def test_every_error_is_reported_at_once():
    errors = svc.validate_extra_directives({"Socket": {}, "Service": {"a-b": 1, "Nice": "x\n"}})
    assert len(errors) == 3, errors


def test_the_filter_plugin_exposes_the_rules():
    filters = FilterModule().filters()
    # The rules themselves reach the role through variable_errors (preflight).
    assert "service_extra_directive_errors" not in filters
    assert filters["service_directive_lines"]({"Unit": {"Wants": "a"}}, "Unit") == ["Wants=a"]


# --------------------------------------------------------------------------- #
# Sandbox paths
# --------------------------------------------------------------------------- #


def test_paths_for_the_defaults():
    paths = svc.service_paths("/var/lib/sglang", ["/models/DeepSeek-V3", "/models/DeepSeek-V3-EAGLE3/"], {})
    assert paths == {"read_write": ["/var/lib/sglang"],
                     "read_only": ["/models/DeepSeek-V3", "/models/DeepSeek-V3-EAGLE3"],
                     "read_write_words": ["/var/lib/sglang"],
                     "read_only_words": ["-/models/DeepSeek-V3", "-/models/DeepSeek-V3-EAGLE3"],
                     "protect_home": "true"}


@pytest.mark.parametrize("path, prefix, word", [
    ("/models/DeepSeek-V3", "-", "-/models/DeepSeek-V3"),          # as before: no quotes, no unit change
    ("/models/DeepSeek V3", "-", '"-/models/DeepSeek V3"'),        # one word, not two paths
    ("/models/50%", "-", "-/models/50%%"),                          # not a specifier
    ('/models/a"b\\c', "", '"/models/a\\"b\\\\c"'),                 # quote and backslash escaped
    ("/data/it's", "-", '"-/data/it\'s"'),
])
def test_a_path_is_one_word_of_the_units_path_list(path, prefix, word):
    assert svc.unit_path_word(path, prefix) == word


def test_a_cache_moved_out_of_the_home_stays_writable_and_secrets_are_not_read():
    env = {"HF_HOME": "/data/hf", "TRITON_CACHE_DIR": "/var/lib/sglang/triton", "HF_TOKEN": "/looks/like/a/path",
           "XDG_CACHE_HOME": "relative/ignored"}
    paths = svc.service_paths("/var/lib/sglang", ["/models/a"], env)
    assert paths["read_write"] == ["/var/lib/sglang", "/data/hf"]


@pytest.mark.parametrize("home, models", [("/home/sglang", ["/models/a"]), ("/var/lib/sglang", ["/root/models/a"]),
                                          ("/var/lib/sglang", ["/home"])])
def test_protect_home_turns_read_only_when_a_needed_path_is_below_home(home, models):
    assert svc.service_paths(home, models)["protect_home"] == "read-only"


def test_homeless_lookalikes_keep_home_hidden():
    assert svc.service_paths("/var/lib/sglang", ["/homes/a", "/rooted"])["protect_home"] == "true"


# --------------------------------------------------------------------------- #
# The rendered unit
# --------------------------------------------------------------------------- #


def _render(**overrides) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters.update(CoreFilters().filters())  # regex_replace, comment, quote as Ansible has them
    env.filters.update({"fleetops.sglang." + k: v for k, v in FilterModule().filters().items()})
    values = {"ansible_managed": "managed", "sglang_speculative_algorithm": "EAGLE3", "sglang_user": "sglang",
              "sglang_group": "sglang", "sglang_home": "/var/lib/sglang", "_sglang_env_path": "/etc/sglang/sglang.env",
              "sglang_server_command": "/opt/sglang/venv/bin/python -m sglang.launch_server",
              "_sglang_launch_args": ["--model-path", "/models/DeepSeek-V3"], "sglang_start_timeout": 1800,
              "sglang_model_path": "/models/DeepSeek-V3", "sglang_draft_model_path": "/models/DeepSeek-V3-EAGLE3",
              "sglang_environment": {}, "sglang_service_hardening": "default", "sglang_service_extra_directives": {}}
    values.update(overrides)
    return env.from_string((ROLE / "templates" / "sglang.service.j2").read_text()).render(**values)


def _directives(text: str, section: str = "Service") -> list[str]:
    body = text.split("[%s]" % section, 1)[1].split("\n[", 1)[0]
    return [line.split("=", 1)[0] for line in body.splitlines() if re.match(r"^[A-Za-z]+=", line)]


@pytest.mark.parametrize("profile", ["default", "strict"])
def test_every_sandbox_directive_carries_a_comment(profile):
    lines = _render(sglang_service_hardening=profile).split("[Service]", 1)[1].split("\n[", 1)[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NoNewPrivileges="))
    for prev, line in zip(lines[start - 1:], lines[start:]):
        if re.match(r"^[A-Za-z]+=", line) and not line.startswith("ReadWritePaths=-"):
            assert prev.startswith("#"), "no reason given above " + line


def test_the_default_profile_holds_nothing_that_could_hide_or_break_the_gpu():
    keys = _directives(_render())
    assert not set(keys) & set(GPU_UNSAFE), set(keys) & set(GPU_UNSAFE)
    for key in ("CapabilityBoundingSet", "RestrictNamespaces", "ProtectKernelLogs", "ProtectProc", "UMask",
                "RemoveIPC", "SystemCallArchitectures", "RestrictAddressFamilies", "ProtectSystem"):
        assert key in keys, key
    text = _render()
    assert "ProtectSystem=strict\n" in text and "ReadWritePaths=/var/lib/sglang\n" in text
    assert "ReadOnlyPaths=-/models/DeepSeek-V3 -/models/DeepSeek-V3-EAGLE3\n" in text
    assert "ProtectProc=invisible\n" in text


def test_the_strict_profile_adds_the_nvidia_allow_list_and_the_syscall_filter():
    default, strict = _directives(_render()), _directives(_render(sglang_service_hardening="strict"))
    added = [k for k in strict if k not in default]
    assert added == ["DevicePolicy", "DeviceAllow", "ProtectClock", "SystemCallFilter", "SystemCallFilter",
                     "SystemCallErrorNumber"]
    text = _render(sglang_service_hardening="strict")
    assert "\nDevicePolicy=closed\n" in text and "\nDeviceAllow=char-nvidia* rw\n" in text
    assert "SystemCallFilter=@system-service pidfd_getfd\n" in text and "SystemCallFilter=~@privileged\n" in text


def test_extra_directives_follow_the_role_s_own_in_their_section():
    text = _render(sglang_service_extra_directives={"Service": {"TimeoutStopSec": 300},
                                                    "Unit": {"After": "nvidia-persistenced.service"},
                                                    "Install": {"Alias": "llm.service"}})
    service = _directives(text)
    assert service[-1] == "TimeoutStopSec" and service.count("TimeoutStopSec") == 2
    assert _directives(text, "Unit")[-1] == "After" and _directives(text, "Install")[-1] == "Alias"


def test_systemd_expands_nothing_in_the_launch_arguments():
    """systemd substitutes $NAME and ${NAME} from the environment file, and % specifiers, even inside
    quotes: a $ is written $$ and a % %%, so the server's argv is the argument as given."""
    text = _render(_sglang_launch_args=["--model-path", "/models/DeepSeek-V3", "--served-model-name",
                                        "ds-${HF_TOKEN}-$HOME-50%"])
    assert "--served-model-name 'ds-$${HF_TOKEN}-$$HOME-50%%'" in text, text


def test_model_and_cache_paths_with_spaces_stay_one_path_each():
    text = _render(sglang_model_path="/models/Deep Seek", sglang_draft_model_path="/models/draft",
                   sglang_environment={"HF_HOME": "/data/hf cache"})
    assert '\nReadOnlyPaths="-/models/Deep Seek" -/models/draft\n' in text, text
    assert '\nReadWritePaths="-/data/hf cache"\n' in text, text


def test_the_server_runs_from_roots_directory_isolated_from_its_writable_home():
    """`python -m` puts the working directory first on sys.path: from the service user's writable home, a
    module planted there would shadow the venv. The unit runs from /, and the default command is isolated."""
    import yaml
    text = _render()
    assert "\nWorkingDirectory=/\n" in text and "WorkingDirectory=/var/lib/sglang" not in text
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["sglang_server_command"] == "{{ sglang_venv }}/bin/python -I -m sglang.launch_server"
