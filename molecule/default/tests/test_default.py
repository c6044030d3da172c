"""What a converged GPU-less host must look like (testinfra, ansible backend)."""
from __future__ import annotations

import json

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
                 "--speculative-draft-model-path /models/DeepSeek-V3-EAGLE3 \\"):
        assert "    " + line in text.splitlines()
    assert "EnvironmentFile=/etc/sglang/sglang.env" in text
    assert "NoNewPrivileges=true" in text
    assert "hf_demo_not_a_real_token" not in text


def test_secrets_only_in_the_0600_environment_file(host):
    env = host.file("/etc/sglang/sglang.env")
    assert env.mode == 0o600 and env.user == "root"
    assert 'HF_TOKEN="hf_demo_not_a_real_token"' in env.content_string
    journal = host.check_output("journalctl --no-pager -o cat")
    assert "hf_demo_not_a_real_token" not in journal


def test_patched_file_carries_the_embedding_capture(host):
    minor = host.check_output("python3 -c 'import sys; print(sys.version_info.minor)'")
    text = host.file(DEEPSEEK.format(minor=minor)).content_string
    assert "self.capture_embedding_for_eagle3 = False" in text
    assert "hidden_states.clone()" in text
    assert host.run("/opt/sglang/venv/bin/python -m py_compile %s" % DEEPSEEK.format(minor=minor)).rc == 0


def test_draft_config_lists_the_trained_layers(host):
    cfg = json.loads(host.file("/models/DeepSeek-V3-EAGLE3/config.json").content_string)
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]  # other keys preserved


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
