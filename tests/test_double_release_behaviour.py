"""The test double held to what SGLang's own code does where a kinder double would hide a bug.

Each behaviour is read from the released 0.5.9 wheel (the one the scenarios install), then the double
is run and made to show it:

- the port opens only after the model is loaded: ``launch_server`` calls ``_launch_subprocesses``
  (which returns once the schedulers loaded the model) before ``uvicorn.run``; until then nothing
  listens, so another process can take the port;
- a port already taken ends the start, after the load, with uvicorn's message and exit status 1;
- a warm-up that fails ends the server by its own SIGKILL: ``_execute_server_warmup`` logs
  "Initialization failed. warmup error" and calls ``kill_process_tree(os.getpid())``, whose
  ``itself.kill()`` is psutil's SIGKILL of the calling process.
"""
from __future__ import annotations

import ast
import signal
import socket
import time
import zipfile
from pathlib import Path
from typing import Any, Dict

import pytest

from conftest import wheel_059
from double_harness import make_models, make_site, spec_flags
from test_test_double import FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS


@pytest.fixture(scope="module")
def release_059() -> Dict[str, str]:
    with zipfile.ZipFile(wheel_059()) as zf:
        return {rel: zf.read(rel).decode() for rel in ("sglang/srt/entrypoints/http_server.py",
                                                        "sglang/srt/utils/common.py")}


def _function(source: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError("no function %s" % name)


def _calls(fn: ast.FunctionDef) -> list:
    """(line, dotted name) of every call in ``fn``, in source order."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            out.append((node.lineno, ast.unparse(node.func)))
    return sorted(out)


def test_the_release_opens_its_port_only_after_the_model_is_loaded(release_059: Dict[str, str]) -> None:
    calls = _calls(_function(release_059["sglang/srt/entrypoints/http_server.py"], "launch_server"))
    launch = min(line for line, name in calls if name == "_launch_subprocesses")
    listen = min(line for line, name in calls if name == "uvicorn.run")
    assert launch < listen


def test_the_release_kills_itself_when_its_warmup_fails(release_059: Dict[str, str]) -> None:
    warmup = _function(release_059["sglang/srt/entrypoints/http_server.py"], "_execute_server_warmup")
    text = ast.unparse(warmup)
    assert "Initialization failed. warmup error" in text
    assert "kill_process_tree(os.getpid())" in text
    kill = ast.unparse(_function(release_059["sglang/srt/utils/common.py"], "kill_process_tree"))
    # With the calling process as the parent (include_parent defaults to True): psutil's kill, SIGKILL.
    assert "if parent_pid == os.getpid():\n                itself.kill()" in kill


def _refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except ConnectionRefusedError:
        return True


def test_nothing_listens_while_the_double_loads_its_model(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    double = run_double(spec_flags(target, draft, 15, 1, 16), site, SGLANG_TEST_DOUBLE_STARTUP_DELAY="3")
    double.wait_logged("loading the model")
    loading_since = time.monotonic()
    # Looked at while the load goes on (the log line above proves it began; the port is checked
    # before the load's 3 s can have passed).
    assert _refused(double.port)
    assert time.monotonic() - loading_since < 3, "the check came too late to prove anything"
    double.wait_healthy(timeout=30)
    assert "Uvicorn running on http://127.0.0.1:%d" % double.port in double.output()


def test_a_port_taken_during_the_load_ends_the_start_with_status_1(tmp_path: Path, run_double: Any) -> None:
    site = make_site(tmp_path, "0.5.9", FAKE_PRISTINE_059, GRAPH_RUNNER_RESETS)
    target, draft = make_models(tmp_path, None)
    double = run_double(spec_flags(target, draft, 15, 1, 16), site, SGLANG_TEST_DOUBLE_STARTUP_DELAY="1")
    double.wait_logged("loading the model")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", double.port))
        squatter.listen(1)
        assert double.proc.wait(timeout=30) == 1
    assert "error while attempting to bind on address ('127.0.0.1', %d)" % double.port in double.output()


def test_a_failed_warmup_ends_the_double_by_its_own_sigkill(tmp_path: Path, run_double: Any,
                                                             real_059: Dict[str, str]) -> None:
    """Unpatched 0.5.9 with -1 in the ids: capture index 0, residual None, a TypeError in warm-up."""
    site = make_site(tmp_path, "0.5.9", real_059["deepseek_v2"], real_059["cuda_graph_runner"], real_059["metadata"])
    target, draft = make_models(tmp_path, [-1, 2, 30])
    double = run_double(spec_flags(target, draft, 15, 1, 16) + ["--disable-cuda-graph"], site,
                        SGLANG_TEST_DOUBLE_STARTUP_DELAY="0.2")
    assert double.proc.wait(timeout=30) == -signal.SIGKILL
    out = double.output()
    assert "Initialization failed. warmup error" in out and "TypeError" in out
    assert "Uvicorn running on" in out  # as in SGLang, the warm-up runs once the port is open
