"""What a converged GPU-less host must look like (testinfra, ansible backend)."""
from __future__ import annotations

import json
import re
import secrets
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from scenario_helpers import PROJECT, run_playbook  # noqa: E402

sys.path.insert(0, str(PROJECT / "testbed"))
import checkout  # noqa: E402

checkout.importable()
from ansible_collections.fleetops.sglang.plugins.module_utils._sandbox import SYSTEMD_PROPERTIES  # noqa: E402

DEMO_VARS = PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml"
ENV_FILE = "/etc/sglang/sglang.env"
CHANGES = "/var/lib/sglang-remediation/changes"
# Everywhere on the host the role, the server or systemd could write a token.
HOST_PATHS = "/etc /var /run /tmp /root /opt /models /usr/local/lib/sglang-test-double"

DEEPSEEK = "/opt/sglang/venv/lib/python3.{minor}/site-packages/sglang/srt/models/deepseek_v2.py"


def _get(host, path: str) -> dict:
    cmd = ("python3 -c 'import json,sys,urllib.request;"
           "print(urllib.request.urlopen(\"http://127.0.0.1:30000%s\", timeout=30).read().decode())'" % path)
    return json.loads(host.check_output(cmd))


def _post_generate(host) -> dict:
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 32}})
    script = ("import sys,urllib.request;r=urllib.request.Request('http://127.0.0.1:30000/generate',"
              "data=sys.argv[1].encode(),headers={'Content-Type':'application/json'});"
              "print(urllib.request.urlopen(r,timeout=60).read().decode())")
    return json.loads(host.check_output("python3 -c %s %s" % (_quote(script), _quote(body))))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_systemd_is_pid_1(host):
    assert host.process.get(pid=1).comm == "systemd"


def test_service_runs_as_its_own_user(host):
    svc = host.service("sglang")
    assert svc.is_running and svc.is_enabled
    user = host.user("sglang")
    assert user.shell == "/usr/sbin/nologin" and user.uid < 1000
    main_pid = host.check_output("systemctl show -p MainPID --value sglang")
    assert host.check_output("ps -o user= -p %s" % main_pid).strip() == "sglang"


def test_unit_renders_the_fixed_flags_one_per_line(host):
    unit = host.file("/etc/systemd/system/sglang.service")
    assert unit.mode == 0o644 and unit.user == "root"
    text = unit.content_string
    for line in ("--speculative-algorithm EAGLE3 \\", "--speculative-num-steps 15 \\",
                 "--speculative-eagle-topk 1 \\", "--speculative-num-draft-tokens 16 \\",
                 "--speculative-draft-model-path /etc/sglang/sglang.draft \\"):
        assert "    " + line in text.splitlines()
    assert "EnvironmentFile=/etc/sglang/sglang.env" in text
    assert "NoNewPrivileges=true" in text
    assert "hf_demo_not_a_real_token" not in text


def test_secrets_only_in_the_0600_environment_file(host):
    env = host.file(ENV_FILE)
    assert env.mode == 0o600 and env.user == "root"
    # Only root lists it; the server's group passes through to its 0640 key file, when keys are set.
    etc = host.file("/etc/sglang")
    assert (etc.mode, etc.user, etc.group) == (0o710, "root", "sglang")
    assert 'HF_TOKEN="hf_demo_not_a_real_token"' in env.content_string
    journal = host.check_output("journalctl --no-pager -o cat")
    assert "hf_demo_not_a_real_token" not in journal


def _exposure(host) -> float:
    out = host.check_output("systemd-analyze security sglang.service")
    return float(re.search(r"Overall exposure level for sglang\.service: ([0-9.]+)", out).group(1))


def test_the_default_profile_exposes_at_most_4_5(host):
    # side_effect.yml measured the strict profile (lower) and came back to this one.
    unit = host.file("/etc/systemd/system/sglang.service").content_string
    assert "ProtectSystem=strict" in unit and "ReadWritePaths=/var/lib/sglang" in unit
    directives = {line.split("=", 1)[0] for line in unit.splitlines() if re.match(r"^[A-Za-z]+=", line)}
    assert not directives & {"DevicePolicy", "DeviceAllow", "PrivateDevices", "SystemCallFilter", "ProtectClock"}
    assert _exposure(host) <= 4.5


def test_root_never_started_the_releases_python_its_checks_ran_sandboxed(host):
    """The test bed's tripwire (playbooks/testbed-prepare.yml) makes a venv's Python started with -c exit 97 as
    root and 98 when it reaches the server's port; the converge got through, its checks in transient services."""
    fired = host.run("/opt/sglang/venv/bin/python -c pass")
    assert fired.rc == 97 and "TRIPWIRE: root started the Python of" in fired.stderr, fired
    journal = host.check_output("journalctl --no-pager -o cat")
    # systemd logs each transient service's end (the flag check exits 3 here: no numpy, "cannot be checked");
    # systemd 252 names them run-u<N>.service, 257 run-p<PID>-i<ID>.service.
    assert re.search(r"run-[A-Za-z0-9-]+\.service: (Deactivated successfully|Main process exited)", journal), \
        "no check ran as a transient service"
    # The role's sandbox, as _sandbox.py builds it: the service user, no network (the tripwire exits 98 on a
    # connection to the server, which serves on 30000), a read-only file system.
    uid = host.check_output("id -u sglang")
    script = "import os; print(os.getuid()); open('/var/lib/sglang/written', 'w')"
    sandboxed = host.run("systemd-run --quiet --wait --pipe --collect --service-type=exec --property=User=sglang %s "
                         "-- /opt/sglang/venv/bin/python -c %s"
                         % (" ".join("--property=%s" % p for p in SYSTEMD_PROPERTIES), _quote(script)))
    assert sandboxed.rc != 0 and sandboxed.stdout.strip() == uid, sandboxed
    assert "Read-only file system" in sandboxed.stderr and "TRIPWIRE" not in sandboxed.stderr, sandboxed.stderr


def test_patched_file_carries_the_embedding_capture(host):
    minor = host.check_output("python3 -c 'import sys; print(sys.version_info.minor)'")
    text = host.file(DEEPSEEK.format(minor=minor)).content_string
    assert "self.capture_embedding_for_eagle3 = False" in text
    assert "hidden_states.clone()" in text
    assert host.run("/opt/sglang/venv/bin/python -m py_compile %s" % DEEPSEEK.format(minor=minor)).rc == 0


def test_no_deps_copies_and_installs_only_the_sglang_wheel(host):
    """sglang_pip_no_deps: true (the test bed's, DEMO_VARS): only the pinned SGLang wheels reach the host's
    wheelhouse, not the controller's whole one (which also holds packaging, the closure image-build locks), and
    pip resolves none of sglang's dependencies: the serving release holds sglang's dist-info and what the host's
    python3 -m venv ships (pip, and setuptools on Debian 12), nothing else."""
    demo = yaml.safe_load(DEMO_VARS.read_text())
    assert demo["sglang_pip_no_deps"] is True and demo["sglang_install_source"] == "wheelhouse"
    version = demo["sglang_version"]
    defaults = yaml.safe_load((PROJECT / "roles" / "sglang" / "defaults" / "main.yml").read_text())
    pinned = re.compile(r"sglang-%s-.+\.whl" % re.escape(version))
    # A copy of the whole wheelhouse would show: the controller's holds other wheels than the pinned ones
    # (scripts/wheelhouse: packaging, other releases).
    others = [w.name for w in (PROJECT / ".cache" / "wheelhouse").glob("*.whl") if not pinned.fullmatch(w.name)]
    assert others, "the controller's wheelhouse holds only the pinned wheels: nothing to tell a whole copy by"
    copied = host.file(defaults["sglang_wheelhouse_remote"]).listdir()
    assert copied and all(pinned.fullmatch(name) for name in copied), copied
    site = host.check_output("ls -d /opt/sglang/venv/lib/python3*/site-packages")
    dists = {name.split("-", 1)[0].lower() for name in host.file(site).listdir() if name.endswith(".dist-info")}
    assert {"sglang", "pip"} <= dists <= {"sglang", "pip", "setuptools"}, dists


def test_draft_config_lists_the_trained_layers(host):
    """The server reads the draft's view: its config.json with the ids, a link to each other file;
    the draft itself is as it arrived from training."""
    cfg = json.loads(host.file("/etc/sglang/sglang.draft/config.json").content_string)
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]  # other keys preserved
    link = host.file("/etc/sglang/sglang.draft/generation_config.json")
    assert link.is_symlink and link.linked_to == "/models/DeepSeek-V3-EAGLE3/generation_config.json"
    arrived = (PROJECT / "files" / "models" / "deepseek-v3-eagle3" / "config.json").read_text()
    assert host.file("/models/DeepSeek-V3-EAGLE3/config.json").content_string == arrived


def test_server_answers_health_and_reports_what_was_rendered(host):
    assert host.run("python3 -c 'import urllib.request;"
                    "urllib.request.urlopen(\"http://127.0.0.1:30000/health_generate\", timeout=30)'").rc == 0
    info = _get(host, "/get_server_info")
    assert info["version"] == "0.5.9"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (15, 1, 16)


def test_speculative_decoding_accepts_more_than_the_incident(host):
    meta = _post_generate(host)["meta_info"]
    assert meta["spec_accept_length"] > 2.5  # the incident accepted ~1.6
    states = _get(host, "/get_server_info")["internal_states"]
    assert states[0]["avg_spec_accept_length"] > 2.5


# --------------------------------------------------------------------------- #
# A fake token through remediate, --check --diff, audit and rollback
# --------------------------------------------------------------------------- #


def _grep_host(host, *needles: str) -> list:
    """Files on the host holding any needle, with mode and owner."""
    pattern = " ".join("-e %s" % n for n in needles)
    res = host.run("grep -rlsF %s %s | xargs -r stat -c '%%a %%U %%n'" % (pattern, HOST_PATHS))
    return sorted(res.stdout.splitlines())


def test_a_token_reaches_only_the_0600_environment_file(host):
    """Remediate, check, audit and roll back with fake tokens; grep all that was written or printed.

    Runs last and leaves the host rolled back (pristine file, previous unit): a
    second ``molecule verify`` needs a ``molecule converge`` first. Converging
    back here would cost every CI run another restart.
    """
    token, drift_token = ("fake-token-" + secrets.token_hex(8) for _ in range(2))
    demo = yaml.safe_load(DEMO_VARS.read_text())
    base_env = dict(demo["sglang_environment"])
    with tempfile.TemporaryDirectory() as reports:
        callbacks = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks,fleetops.sglang.sglang_report",
                     "SGLANG_REPORT_DIR": reports}
        demo_vars = ["-e", "@%s" % DEMO_VARS]

        def play(name: str, env: dict, *args: str):
            return run_playbook(PROJECT / "playbooks" / name, extra_vars={"sglang_environment": env},
                                args=[*demo_vars, *args], env=callbacks)

        runs = {"remediate --diff -v": play("remediate.yml", dict(base_env, HF_TOKEN=token), "--diff", "-v")}
        assert runs["remediate --diff -v"].rc == 0, runs["remediate --diff -v"].tail()
        # The release is sealed (built, patched, verified by the converge): this run only audits it, and
        # runs no SGLang code (the forward check runs on a release being built: the image-build scenario).
        assert "forward: not executed (state=audit)" in runs["remediate --diff -v"].output
        # The replaced file (the demo token) was kept in the run's change set, 0600 root's under
        # the state dir, not next to the live one.
        # (Beside it, the draft view the server reads, a directory of the role's own, and the spec of the host's
        # audit timer, which names the environment file but holds none of it.)
        assert host.run("ls /etc/sglang").stdout.split() == ["sglang.audit.json", "sglang.draft", "sglang.env"]
        assert "hf_demo_not_a_real_token" not in host.file("/etc/sglang/sglang.audit.json").content_string
        assert token not in host.file("/etc/sglang/sglang.audit.json").content_string
        kept = host.run("grep -rlsF hf_demo_not_a_real_token %s | xargs -r stat -c '%%a %%U %%n'"
                        % CHANGES).stdout.splitlines()
        assert kept and all(line.startswith("600 root %s/" % CHANGES) for line in kept), kept

        drifted = dict(base_env, HF_TOKEN=drift_token)
        runs["remediate --check --diff"] = play("remediate.yml", drifted, "--check", "--diff")
        assert runs["remediate --check --diff"].rc == 0, runs["remediate --check --diff"].tail()
        runs["audit"] = play("audit.yml", drifted)
        assert runs["audit"].rc != 0 and "environment" in runs["audit"].output, runs["audit"].tail()
        assert _grep_host(host, token, drift_token) == ["600 root %s" % ENV_FILE]

        runs["rollback"] = play("rollback.yml", dict(base_env, HF_TOKEN=token))
        assert runs["rollback"].rc == 0, runs["rollback"].tail()
        assert 'HF_TOKEN="hf_demo_not_a_real_token"' in host.file(ENV_FILE).content_string
        assert host.service("sglang").is_running

        for name, run in runs.items():
            assert token not in run.output and drift_token not in run.output, name
        written = [str(p) for p in Path(reports).rglob("*") if p.is_file()]
        assert written, "the report callback wrote nothing"
        assert any("forward: not executed (state=audit)" in Path(p).read_text(errors="replace") for p in written)
        for path in written:
            text = Path(path).read_text(errors="replace")
            assert token not in text and drift_token not in text, path
    assert _grep_host(host, token, drift_token) == []
    journal = host.check_output("journalctl --no-pager -o cat")
    assert token not in journal and drift_token not in journal
