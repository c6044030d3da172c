"""Tests for the GPU-less SGLang TEST DOUBLE (files/sglang_test_double).

The double stands in for ``python -m sglang.launch_server`` in Molecule and
the demo, so these tests pin down the behaviour the role's gates rely on: the
flag surface, health during and after start-up, /get_server_info (including
SGLang's silent rewrite of the draft-token count) and an accept length that
follows the wiring really installed on the host.  The incident and remediation
cases run against the real, pristine ``deepseek_v2.py`` and
``cuda_graph_runner.py`` of SGLang 0.5.9, taken from the released wheel.

All traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from double_harness import (DEEPSEEK_V3_LAYERS, DOUBLE, REPO, Double, companion_patch, free_port, http, make_models,
                            make_site, patch_embedding_capture, remediated_double, spec_flags)


def _load_module() -> Any:
    spec = importlib.util.spec_from_file_location("sglang_test_double", DOUBLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["sglang_test_double"] = module
    spec.loader.exec_module(module)
    return module


td = _load_module()


# --------------------------------------------------------------------------
# Fake installs.  The fake sources mimic the shapes SGLang releases have (docs/docsite/rst/guide_releases.rst, "What the
# role decides, per release"); the real 0.5.9 files come from the wheel.
# --------------------------------------------------------------------------

# Up to the line where body A and the native 0.5.14 body differ.
SET_EAGLE3_HEAD = '''
    def set_eagle3_layers_to_capture(self, layer_ids: Optional[List[int]] = None):
        if not self.pp_group.is_last_rank:
            return

        if layer_ids is None:
            self.capture_aux_hidden_states = True
            num_layers = self.config.num_hidden_layers
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            self.capture_aux_hidden_states = True
'''
SET_EAGLE3_BODY_A = SET_EAGLE3_HEAD + "            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"

LOOP_FORWARD = '''
class DeepseekV2Model(nn.Module):
    def __init__(self, config):
        self.layers_to_capture = []

    def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
        if self.pp_group.is_first_rank:
            hidden_states = self.embed_tokens(input_ids)
            residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                aux_hidden_states.append(hidden_states + residual)
            hidden_states, residual = self.layers[i](positions, hidden_states, forward_batch, residual)
        return hidden_states, aux_hidden_states


class DeepseekV2ForCausalLM(nn.Module):
'''

FAKE_PRISTINE_059 = "from typing import List, Optional\n" + LOOP_FORWARD + SET_EAGLE3_BODY_A

# 0.5.14's shape: the model hands the capture list to the decoder layer, whose communicator
# appends the residual it prepares (the layer's input; index 0: the embedding output).
FAKE_NATIVE_0514 = '''from typing import List, Optional


class DeepseekV2DecoderLayer(nn.Module):
    def forward(self, positions, hidden_states, forward_batch, residual, captured_last_layer_outputs=None):
        hidden_states, residual = self.layer_communicator.prepare_attn_and_capture_last_layer_outputs(
            hidden_states, residual, forward_batch, captured_last_layer_outputs=captured_last_layer_outputs
        )
        return self.mlp(self.self_attn(positions, hidden_states, forward_batch)), residual


class DeepseekV2Model(nn.Module):
    def __init__(self, config):
        self.layers_to_capture = []

    def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
        hidden_states = self.embed_tokens(input_ids)
        residual = None
        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](
                positions, hidden_states, forward_batch, residual,
                captured_last_layer_outputs=(aux_hidden_states if i in self.layers_to_capture else None),
            )
        return hidden_states, aux_hidden_states


class DeepseekV2ForCausalLM(nn.Module):''' + SET_EAGLE3_HEAD + '''\
            if layer_ids and layer_ids[0] == 1:
                self.model.layers_to_capture = [val + 1 for val in layer_ids]
            else:
                self.model.layers_to_capture = list(layer_ids)
'''

FAKE_COMMUNICATOR_0514 = {"sglang/srt/layers/communicator.py": '''
class LayerCommunicator:
    def prepare_attn_and_capture_last_layer_outputs(self, hidden_states, residual, forward_batch,
                                                    captured_last_layer_outputs=None):
        hidden_states, residual = self.prepare_attn(hidden_states, residual, forward_batch)
        if captured_last_layer_outputs is not None:
            captured_last_layer_outputs.append(residual.clone())
        return hidden_states, residual
'''}

GRAPH_RUNNER_RESETS = '''
class CudaGraphRunner:
    def __init__(self, model_runner):
        if model_runner.spec_algorithm.is_eagle3() and model_runner.eagle_use_aux_hidden_state:
            self.model_runner.model.set_eagle3_layers_to_capture()
        self.capture()
'''
GRAPH_RUNNER_FIXED = '''
class CudaGraphRunner:
    def __init__(self, model_runner):
        self.capture()
'''


def accept_length_after_generate(double: Double, tokens: int = 256) -> Tuple[float, Dict[str, Any], Dict[str, Any]]:
    """Send one /generate and read avg_spec_accept_length back from /get_server_info."""
    double.wait_healthy()
    status, out = http(double.port, "/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": tokens}})
    assert status == 200, out
    status, info = http(double.port, "/get_server_info")
    assert status == 200
    return info["internal_states"][0]["avg_spec_accept_length"], out["meta_info"], info


# --------------------------------------------------------------------------
# Flags, health, server info
# --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [["--no-such-flag"], ["--speculative-num-step", "3"], ["--dtype", "int3"]])
def test_unknown_or_invalid_flag_exits_2_like_argparse(tmp_path: Path, bad: List[str]) -> None:
    proc = subprocess.run([sys.executable, str(DOUBLE), "--model-path", str(tmp_path), *bad],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "error" in proc.stderr


def _line_of(path: Path, timeout: float = 15) -> str:
    """The one whole line of ``path``, once it is there."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, "no line in %s within %ss" % (path, timeout)
        time.sleep(0.05)
    (line,) = path.read_text().splitlines()
    return line


def test_health_is_503_during_the_warmup_then_200_and_start_is_logged(tmp_path: Path, run_double: Any) -> None:
    """The port opens once the model is loaded (tests/test_double_release_behaviour.py); the warm-up
    follows, during which every route answers 503, as SGLang's server_status Starting does."""
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    start_log = tmp_path / "starts.log"
    double = run_double(spec_flags(target, draft, 15, 1, 16), site, SGLANG_TEST_DOUBLE_STARTUP_DELAY="1.5",
                        SGLANG_TEST_DOUBLE_WARMUP_DELAY="3", SGLANG_TEST_DOUBLE_START_LOG=str(start_log))
    double.wait_listening()
    assert http(double.port, "/health")[0] == 503
    assert http(double.port, "/health_generate")[0] == 503
    assert http(double.port, "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4}})[0] == 503
    assert not start_log.exists()
    double.wait_healthy()
    assert http(double.port, "/health_generate")[0] == 200
    started, healthy, pid = _line_of(start_log).split()  # written just after it turns healthy
    assert int(pid) == double.proc.pid
    assert float(healthy) - float(started) >= 1.5 + 3
    assert double.stop() == 0
    assert "NOT SGLANG" in double.output()


def test_fail_health_keeps_503(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    start_log = tmp_path / "starts.log"
    double = run_double(spec_flags(target, draft, 15, 1, 16), site, SGLANG_TEST_DOUBLE_FAIL_HEALTH="1",
                        SGLANG_TEST_DOUBLE_START_LOG=str(start_log))
    # Its start is over: it logged the branch that keeps 503, instead of the one that turns it healthy and logs it.
    double.wait_logged("SGLANG_TEST_DOUBLE_FAIL_HEALTH=1: health stays 503")
    assert http(double.port, "/health")[0] == 503
    assert http(double.port, "/health_generate")[0] == 503
    assert not start_log.exists()
    assert double.stop() == 0
    assert "The server is fired up" not in double.output()


def test_server_info_reports_version_args_and_the_silent_rewrite(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    double = run_double(spec_flags(target, draft, 1, 1, 16), site)
    double.wait_healthy()
    for path in ("/get_server_info", "/server_info"):
        status, info = http(double.port, path)
        assert status == 200
        assert info["version"] == "0.5.9"
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_steps"] == 1
        assert info["speculative_eagle_topk"] == 1
        assert info["speculative_num_draft_tokens"] == 2  # 16 silently cut to steps + 1
        assert info["speculative_draft_model_path"] == str(draft)
        assert info["model_path"] == str(target)
        assert info["tp_size"] == 8
        assert info["port"] == double.port
        assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert "adjusted to speculative_num_steps + 1" in double.output()
    status, out = http(double.port, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 32}})
    assert status == 200 and out["meta_info"]["completion_tokens"] == 32
    assert out["meta_info"]["spec_verify_ct"] > 0
    assert "avg_spec_accept_length" in http(double.port, "/get_server_info")[1]["internal_states"][0]


KEY, ADMIN = "k3y-Of-the-test \\\"quoted\\\"", "adm1n-key-of-the-test"


def _bearer(key: str) -> Dict[str, str]:
    return {"Authorization": "Bearer " + key}


@pytest.mark.parametrize("route", ["command line", "config file"])
def test_a_key_closes_every_route_but_health_and_metrics(tmp_path: Path, run_double: Any, route: str) -> None:
    """As SGLang 0.5.8+'s decide_request_auth for NORMAL routes; the key by flag or by --config alike."""
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    flags = spec_flags(target, draft, 15, 1, 16) + ["--enable-metrics"]
    if route == "command line":
        flags += ["--api-key", KEY, "--admin-api-key", ADMIN]
    else:
        config = tmp_path / "keys.yaml"
        config.write_text("# the role's format\napi-key: %s\nadmin-api-key: %s\n" % (json.dumps(KEY), json.dumps(ADMIN)))
        flags += ["--config", str(config)]
    double = run_double(flags, site)
    double.wait_healthy()
    for path in ("/health", "/health_generate", "/metrics"):
        assert http(double.port, path)[0] == 200, path
    generate = {"text": "x", "sampling_params": {"max_new_tokens": 4}}
    for headers in (None, _bearer("wrong"), _bearer(ADMIN), {"Authorization": KEY}):
        assert http(double.port, "/server_info", headers=headers)[0] == 401, headers
        assert http(double.port, "/generate", generate, headers=headers)[0] == 401, headers
    status, info = http(double.port, "/server_info", headers=_bearer(KEY))
    assert status == 200 and info["api_key"] == KEY and info["admin_api_key"] == ADMIN
    assert "config" not in info
    assert http(double.port, "/generate", generate, headers={"Authorization": "bearer " + KEY})[0] == 200
    # As the release: server_args=ServerArgs(...) at INFO, on the engine's logger, the keys in its repr.
    line = next(x for x in double.output().splitlines() if "server_args=ServerArgs(" in x)
    assert "api_key=%r" % KEY in line and "admin_api_key=%r" % ADMIN in line


def _roles_logging_config(tmp_path: Path) -> Path:
    """The role's own logging configuration (roles/sglang/vars/main.yml, _sglang_logging_config), as the role writes it."""
    import yaml
    doc = yaml.safe_load((REPO / "roles" / "sglang" / "vars" / "main.yml").read_text())["_sglang_logging_config"]
    path = tmp_path / "sglang.logging.json"
    path.write_text(json.dumps(doc, indent=4, sort_keys=True))
    return path


def test_the_roles_logging_configuration_keeps_the_keys_out_and_the_rest_of_the_log_in(tmp_path: Path,
                                                                                         run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    flags = spec_flags(target, draft, 15, 1, 16) + ["--api-key", KEY, "--admin-api-key", ADMIN]
    double = run_double(flags, site, SGLANG_LOGGING_CONFIG_PATH=str(_roles_logging_config(tmp_path)))
    double.wait_healthy()
    out = double.wait_logged("The server is fired up and ready to roll!")  # logged just after it turns healthy
    assert KEY not in out and ADMIN not in out and "server_args=" not in out
    # The other INFO lines stay, in SGLang's format.
    assert "The server is fired up and ready to roll!" in out
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] installed sglang: 0\.5\.9", out, re.M), out


def test_a_logging_configuration_that_is_not_there_fails_the_start(tmp_path: Path) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    env = dict(os.environ, SGLANG_TEST_DOUBLE_SITE_PACKAGES=str(site),
               SGLANG_LOGGING_CONFIG_PATH=str(tmp_path / "missing.json"))
    proc = subprocess.run([sys.executable, str(DOUBLE), *spec_flags(target, draft, 15, 1, 16)], capture_output=True,
                          text=True, timeout=30, env=env)
    assert proc.returncode == 1
    assert "SGLANG_LOGGING_CONFIG_PATH from env with %s but it does not exist!" % (tmp_path / "missing.json") \
        in proc.stderr


def test_a_flag_on_the_command_line_wins_over_the_config_file(tmp_path: Path, run_double: Any) -> None:
    """ConfigArgumentMerger puts the file's options before the command line's (SGLang 0.5.4.post2 to 0.5.23)."""
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    config = tmp_path / "keys.yaml"
    config.write_text('api-key: "from-the-file-1"\nspeculative-num-steps: 3\n')
    double = run_double(spec_flags(target, draft, 15, 1, 16) + ["--config", str(config)], site)
    double.wait_healthy()
    status, info = http(double.port, "/server_info", headers=_bearer("from-the-file-1"))
    assert status == 200 and info["speculative_num_steps"] == 15


def test_the_environment_override_is_a_key_the_role_does_not_manage(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    double = run_double(spec_flags(target, draft, 15, 1, 16) + ["--api-key", KEY], site,
                        SGLANG_TEST_DOUBLE_API_KEY="held-by-hand-key")
    double.wait_healthy()
    assert http(double.port, "/server_info", headers=_bearer(KEY))[0] == 401
    assert http(double.port, "/server_info", headers=_bearer("held-by-hand-key"))[0] == 200


def test_exit_at_start_exits_1_before_it_listens(tmp_path: Path) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    port = free_port()
    env = dict(os.environ, SGLANG_TEST_DOUBLE_SITE_PACKAGES=str(site), SGLANG_TEST_DOUBLE_EXIT_AT_START="1")
    proc = subprocess.run([sys.executable, str(DOUBLE), *spec_flags(target, draft, 15, 1, 16), "--port", str(port)],
                          capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 1 and "SGLANG_TEST_DOUBLE_EXIT_AT_START=1" in proc.stdout


def test_run_settings_are_what_it_runs_and_reports_instead_of_its_flags(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    double = run_double(spec_flags(target, draft, 15, 1, 16), site,
                        SGLANG_TEST_DOUBLE_RUN_SETTINGS="speculative_num_steps=3,speculative_num_draft_tokens=4")
    double.wait_healthy()
    status, info = http(double.port, "/server_info")
    assert status == 200
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert double.stop() == 0
    env = dict(os.environ, SGLANG_TEST_DOUBLE_SITE_PACKAGES=str(site), SGLANG_TEST_DOUBLE_RUN_SETTINGS="tp_size=2")
    proc = subprocess.run([sys.executable, str(DOUBLE), *spec_flags(target, draft, 15, 1, 16), "--port", str(free_port())],
                          capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 1 and "expected name=integer" in proc.stdout


def test_missing_sglang_install_exits_1(tmp_path: Path) -> None:
    env = dict(os.environ, SGLANG_TEST_DOUBLE_SITE_PACKAGES=str(tmp_path))
    proc = subprocess.run([sys.executable, str(DOUBLE), "--model-path", str(tmp_path), "--port", str(free_port())],
                          capture_output=True, text=True, timeout=30, env=env)
    assert proc.returncode == 1
    assert "No module named 'sglang'" in proc.stdout


def test_sigterm_stops_cleanly(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, _ = make_models(tmp_path, None)
    double = run_double(["--model-path", str(target)], site)
    double.wait_healthy()
    assert double.stop() == 0
    assert "shutting down" in double.output()


# --------------------------------------------------------------------------
# Accept length on the real SGLang 0.5.9 files
# --------------------------------------------------------------------------


def test_incident_wiring_on_real_059_accepts_about_1_6(tmp_path: Path, run_double: Any, real_059: Dict[str, str]) -> None:
    """Pristine 0.5.9, no ids in the draft config (defaults), steps 1 / topk 1 / draft 16."""
    site = make_site(tmp_path, "0.5.9", real_059["deepseek_v2"], real_059["cuda_graph_runner"], real_059["metadata"])
    target, draft = make_models(tmp_path, None)
    double = run_double(spec_flags(target, draft, 1, 1, 16), site)
    accept, meta, info = accept_length_after_generate(double)
    assert accept == pytest.approx(1.6, abs=0.05)
    assert meta["spec_accept_length"] == pytest.approx(1.6, abs=0.05)
    assert meta["test_double_tokens_per_second"] == pytest.approx(56.8, abs=1.0)
    assert info["version"] == "0.5.9"
    assert info["speculative_num_draft_tokens"] == 2
    assert info["test_double"]["decode_hidden_states"] == ["L1", "L29", "L57"]


def test_remediated_wiring_on_real_059_accepts_high(tmp_path: Path, run_double: Any, real_059: Dict[str, str]) -> None:
    """Patched 0.5.9 + CUDA-graph companion, ids [-1, 2, 30], steps 15 / topk 1 / draft 16."""
    double = remediated_double(tmp_path, run_double, real_059)
    accept, meta, info = accept_length_after_generate(double)
    assert 3.2 <= accept <= 3.7
    assert meta["test_double_tokens_per_second"] > 90
    assert info["speculative_num_draft_tokens"] == 16
    assert info["test_double"]["decode_hidden_states"] == ["embed", "L2", "L30"]


@pytest.mark.parametrize(
    "companion, disable_graph, matched",
    [
        (False, False, False),  # graphs captured with the default ids: decode mismatch
        (False, True, True),    # --disable-cuda-graph: eager decode uses the patched ids
        (True, False, True),    # companion patch: graphs captured with the configured ids
    ],
)
def test_cuda_graph_companion_decides_decode_wiring_on_real_059(
    tmp_path: Path, real_059: Dict[str, str], companion: bool, disable_graph: bool, matched: bool
) -> None:
    runner = real_059["cuda_graph_runner"]
    site = make_site(tmp_path, "0.5.9", patch_embedding_capture(real_059["deepseek_v2"]),
                     companion_patch(runner) if companion else runner, real_059["metadata"])
    _, draft = make_models(tmp_path, [-1, 2, 30])
    wiring = td.judge_wiring(str(site), "0.5.9", "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS,
                             disable_graph, 1, td.parse_trained_layers("embed,2,30"))
    assert wiring.prefill == ("embed", "L2", "L30")
    assert wiring.matches_training is matched
    params = td.resolve_speculative_params("EAGLE3", 15, 1, 16, "DeepseekV3ForCausalLM")
    accept = td.expected_accept_length(wiring.matches_training, params)
    assert (accept > 3.2) if matched else (accept == pytest.approx(1.6, abs=0.05))


def test_patch_without_clone_is_a_mismatch(tmp_path: Path, real_059: Dict[str, str]) -> None:
    site = make_site(tmp_path, "0.5.9", patch_embedding_capture(real_059["deepseek_v2"], clone=False),
                     companion_patch(real_059["cuda_graph_runner"]), real_059["metadata"])
    _, draft = make_models(tmp_path, [-1, 2, 30])
    wiring = td.judge_wiring(str(site), "0.5.9", "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS, False, 1,
                             td.parse_trained_layers("embed,2,30"))
    assert "embed_overwritten_in_place" in wiring.decode
    assert not wiring.matches_training


def test_pipeline_parallel_cannot_deliver_the_embedding(tmp_path: Path, real_059: Dict[str, str]) -> None:
    site = make_site(tmp_path, "0.5.9", patch_embedding_capture(real_059["deepseek_v2"]),
                     companion_patch(real_059["cuda_graph_runner"]), real_059["metadata"])
    _, draft = make_models(tmp_path, [-1, 2, 30])
    wiring = td.judge_wiring(str(site), "0.5.9", "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS, False, 2,
                             td.parse_trained_layers("embed,2,30"))
    assert not wiring.matches_training


# --------------------------------------------------------------------------
# Native embedding capture (0.5.14-like)
# --------------------------------------------------------------------------


def test_native_0514_like_release_with_0_3_31_accepts_high(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.14", FAKE_NATIVE_0514, GRAPH_RUNNER_FIXED, others=FAKE_COMMUNICATOR_0514)
    target, draft = make_models(tmp_path, [0, 3, 31])
    double = run_double(spec_flags(target, draft, 15, 1, 16), site)
    accept, _, info = accept_length_after_generate(double)
    assert 3.2 <= accept <= 3.7
    assert info["version"] == "0.5.14"
    assert info["test_double"]["decode_hidden_states"] == ["embed", "L2", "L30"]


@pytest.mark.parametrize("ids, fatal", [(None, False), ([2, 30, 58], False), ([-1, 2, 30], True)])
def test_native_0514_like_release_with_other_ids_does_not_match(tmp_path: Path, ids: Optional[List[int]], fatal: bool) -> None:
    site = make_site(tmp_path, "0.5.14", FAKE_NATIVE_0514, GRAPH_RUNNER_FIXED, others=FAKE_COMMUNICATOR_0514)
    _, draft = make_models(tmp_path, ids)
    wiring = td.judge_wiring(str(site), "0.5.14", "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS, False, 1,
                             td.parse_trained_layers("embed,2,30"))
    assert not wiring.matches_training
    assert (wiring.fatal is not None) is fatal


@pytest.mark.parametrize("version, others, matched", [
    ("0.5.14", None, False),                     # the layer's capture code is not there: not guessed
    ("0.5.13", FAKE_COMMUNICATOR_0514, True),    # the structure decides, not the version number
])
def test_native_capture_is_judged_by_its_code_not_the_version(tmp_path: Path, version: str,
                                                              others: Optional[Dict[str, str]], matched: bool) -> None:
    site = make_site(tmp_path, version, FAKE_NATIVE_0514, GRAPH_RUNNER_FIXED, others=others)
    _, draft = make_models(tmp_path, [0, 3, 31])
    wiring = td.judge_wiring(str(site), version, "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS, False, 1,
                             td.parse_trained_layers("embed,2,30"))
    assert wiring.matches_training is matched, wiring.notes


# Shapes beyond the forward-capture check's list (tests/test_double_capture_variants.py runs that list),
# each on a fake release that is correct without the edit: (name, version, base, edits, draft ids).
_LOOP_PATCHED = patch_embedding_capture(FAKE_PRISTINE_059)
STRUCTURAL_BREAKS = [
    ("loop capture after the layer call", "0.5.9", _LOOP_PATCHED,
     [("            if i in self.layers_to_capture:\n                aux_hidden_states.append(hidden_states + residual)\n",
       ""),
      ("forward_batch, residual)\n", "forward_batch, residual)\n"
       "            if i in self.layers_to_capture:\n                aux_hidden_states.append(hidden_states + residual)\n")],
     [-1, 2, 30]),
    ("embedding captured only in prefill", "0.5.9", _LOOP_PATCHED,
     [("if self.capture_embedding:", "if self.capture_embedding and forward_batch.forward_mode.is_extend():")],
     [-1, 2, 30]),
    ("embedding appended twice", "0.5.9", _LOOP_PATCHED,
     [("            aux_hidden_states.append(hidden_states.clone())\n",
       "            aux_hidden_states.append(hidden_states.clone())\n" * 2)], [-1, 2, 30]),
    ("capture list rebound in the decoder layer", "0.5.14", FAKE_NATIVE_0514,
     [("    def forward(self, positions, hidden_states, forward_batch, residual, captured_last_layer_outputs=None):\n",
       "    def forward(self, positions, hidden_states, forward_batch, residual, captured_last_layer_outputs=None):\n"
       "        captured_last_layer_outputs = None\n")], [0, 3, 31]),
    ("every layer captured", "0.5.14", FAKE_NATIVE_0514,
     [("(aux_hidden_states if i in self.layers_to_capture else None)", "aux_hidden_states")], [0, 3, 31]),
    ("the layer after the loop index called", "0.5.14", FAKE_NATIVE_0514,
     [("self.layers[i](", "self.layers[i + 1](")], [0, 3, 31]),
]


@pytest.mark.parametrize("name, version, base, edits, ids", STRUCTURAL_BREAKS, ids=[c[0] for c in STRUCTURAL_BREAKS])
def test_structural_breaks_are_mismatches(tmp_path: Path, name: str, version: str, base: str,
                                          edits: List[Tuple[str, str]], ids: List[int]) -> None:
    others = FAKE_COMMUNICATOR_0514 if base is FAKE_NATIVE_0514 else None
    good = make_site(tmp_path / "good", version, base, GRAPH_RUNNER_FIXED, others=others)
    source = base
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    bad = make_site(tmp_path / "bad", version, source, GRAPH_RUNNER_FIXED, others=others)
    _, draft = make_models(tmp_path, ids)
    trained = td.parse_trained_layers("embed,2,30")
    assert td.judge_wiring(str(good), version, "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS, False, 1, trained).matches_training
    wiring = td.judge_wiring(str(bad), version, "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS, False, 1, trained)
    assert not wiring.matches_training, wiring.notes


def test_a_loop_capture_is_a_loop_capture_on_any_version(tmp_path: Path) -> None:
    """A 0.5.14-numbered file that still captures in the loop: index 0 dies as on 0.5.9."""
    site = make_site(tmp_path, "0.5.14", FAKE_PRISTINE_059, GRAPH_RUNNER_FIXED)
    _, draft = make_models(tmp_path, [-1, 2, 30])  # body A: capture index 0
    wiring = td.judge_wiring(str(site), "0.5.14", "EAGLE3", str(draft), DEEPSEEK_V3_LAYERS, False, 1,
                             td.parse_trained_layers("embed,2,30"))
    assert not wiring.matches_training and wiring.fatal.startswith("TypeError"), wiring.fatal


# --------------------------------------------------------------------------
# Pure rules
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps, topk, draft, expected",
    [(1, 1, 16, 2), (15, 1, 16, 16), (3, 1, 4, 4), (2, 4, 8, 8), (None, None, None, 4)],
)
def test_speculative_params_follow_sglang_resolution(steps: Any, topk: Any, draft: Any, expected: int) -> None:
    params = td.resolve_speculative_params("EAGLE3", steps, topk, draft, "DeepseekV3ForCausalLM")
    assert params.num_draft_tokens == expected


def test_partially_set_speculative_params_are_fatal_like_sglang() -> None:
    with pytest.raises(td.FatalStartup):
        td.resolve_speculative_params("EAGLE3", None, 1, 16, "DeepseekV3ForCausalLM")


def test_accept_length_model() -> None:
    full = td.resolve_speculative_params("EAGLE3", 15, 1, 16, None)
    cut = td.resolve_speculative_params("EAGLE3", 1, 1, 16, None)
    assert td.expected_accept_length(True, full) == pytest.approx(3.55, abs=0.01)
    assert 1.6 < td.expected_accept_length(True, cut) < 2.0
    assert td.expected_accept_length(False, cut) == pytest.approx(1.6, abs=0.001)
    assert td.expected_accept_length(False, full) == pytest.approx(1.6, abs=0.05)
    assert td.tokens_per_second(1.6) == pytest.approx(56.8)
    assert td.draft_tree_size(3, 4) == 1 + 4 + 2 * 16


def test_trained_layers_can_be_reconfigured() -> None:
    assert td.parse_trained_layers("embed,2,30") == frozenset({"embed", "L2", "L30"})
    assert td.parse_trained_layers(" 1, 29 ,57") == frozenset({"L1", "L29", "L57"})
