"""The GPU-less SGLang test double (files/sglang_test_double) as the unit tests drive it:
the fake site-packages and model directories it inspects, its flags, and the double
itself as a subprocess on 127.0.0.1. The fixtures that start it (run_double) and
fetch SGLang 0.5.9's real files (real_059) are in conftest.py.

All traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
DOUBLE = REPO / "files" / "sglang_test_double" / "sglang_test_double.py"
WHEEL_CACHE = Path(
    os.environ.get("SGLANG_WHEEL_CACHE", str(Path.home() / ".cache" / "sglang-remediation" / "wheels"))
)
PRISTINE_059_SHA256 = "4071b9a6a6ac71e1143204708df42f2ba5bd163a5d7a020579242df56e490a35"
DEEPSEEK_V3_LAYERS = 61


def load_double(name: str) -> Any:
    """The test double's module, imported under ``name`` (its judgement called without a server)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, DOUBLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def patch_embedding_capture(source: str, clone: bool = True) -> str:
    """A test-local embedding-capture patch in the shape the facts describe.

    Independent of the role's templates on purpose: the double must recognise
    any patch of this shape, and these tests must not depend on the role.
    """
    appended = "hidden_states.clone()" if clone else "hidden_states"
    replacements = [
        ("        self.layers_to_capture = []\n",
         "        self.layers_to_capture = []\n        self.capture_embedding = False\n"),
        ("        aux_hidden_states = []\n",
         "        aux_hidden_states = []\n        if self.capture_embedding:\n"
         "            aux_hidden_states.append(%s)\n" % appended),
        ("            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]\n",
         "            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]\n"
         "            self.model.capture_embedding = False\n"),
        ("            self.model.layers_to_capture = [val + 1 for val in layer_ids]\n",
         "            self.model.capture_embedding = -1 in layer_ids\n"
         "            self.model.layers_to_capture = [val + 1 for val in layer_ids if val != -1]\n"),
    ]
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def companion_patch(graph_runner_source: str) -> str:
    """Pass the configured ids to the pre-capture call (the CUDA-graph companion)."""
    old = "self.model_runner.model.set_eagle3_layers_to_capture()"
    assert graph_runner_source.count(old) == 1
    return graph_runner_source.replace(
        old, "self.model_runner.model.set_eagle3_layers_to_capture(self.model_runner.eagle_aux_hidden_state_layer_ids)"
    )


def make_site(root: Path, version: str, model_source: str, graph_runner: Optional[str],
              metadata: Optional[str] = None, others: Optional[Dict[str, str]] = None) -> Path:
    """A site-packages tree holding just the files the double inspects.

    ``others``: more files by their path under site-packages (the layer's capture code,
    ``sglang/srt/layers/communicator.py``, for a native release).
    """
    site = root / "site-packages"
    (site / "sglang" / "srt" / "models").mkdir(parents=True)
    (site / "sglang" / "srt" / "model_executor").mkdir(parents=True)
    (site / "sglang" / "srt" / "models" / "deepseek_v2.py").write_text(model_source)
    if graph_runner is not None:
        (site / "sglang" / "srt" / "model_executor" / "cuda_graph_runner.py").write_text(graph_runner)
    for rel, text in (others or {}).items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    dist = site / ("sglang-%s.dist-info" % version)
    dist.mkdir()
    (dist / "METADATA").write_text(metadata or "Metadata-Version: 2.4\nName: sglang\nVersion: %s\n\n" % version)
    return site


def make_models(root: Path, layer_ids: Optional[List[int]], num_layers: int = DEEPSEEK_V3_LAYERS) -> Tuple[Path, Path]:
    """Target and draft model dirs with only their config.json."""
    target, draft = root / "target", root / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps(
        {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": num_layers}))
    config: Dict[str, Any] = {"architectures": ["LlamaForCausalLMEagle3"]}
    if layer_ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": layer_ids, "use_aux_hidden_state": True}
    (draft / "config.json").write_text(json.dumps(config))
    return target, draft


def spec_flags(target: Path, draft: Path, steps: int, topk: int, draft_tokens: int) -> List[str]:
    return [
        "--model-path", str(target), "--speculative-draft-model-path", str(draft),
        "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(draft_tokens),
        "--tp-size", "8", "--trust-remote-code", "--mem-fraction-static", "0.8",
    ]


# --------------------------------------------------------------------------
# Running the double
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port: int, path: str, body: Optional[Dict[str, Any]] = None,
         headers: Optional[Dict[str, str]] = None) -> Tuple[int, Any]:
    """GET or POST to the double on loopback; returns (status, parsed body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        raw, status = err.read(), err.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode()


class Double:
    """The double as a subprocess on 127.0.0.1 with a free port."""

    def __init__(self, tmp: Path, flags: List[str], site: Optional[Path], **env: str) -> None:
        self.port = free_port()
        self.log = tmp / ("double-%d.log" % self.port)
        environ = dict(os.environ)
        environ.update({"SGLANG_TEST_DOUBLE_STARTUP_DELAY": "0.3"})
        if site is not None:
            environ["SGLANG_TEST_DOUBLE_SITE_PACKAGES"] = str(site)
        environ.update(env)
        self._fh = open(self.log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(DOUBLE), *flags, "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._fh, stderr=subprocess.STDOUT, env=environ,
        )

    def wait_listening(self, timeout: float = 15) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("double never listened:\n" + self.output())

    def wait_healthy(self, timeout: float = 15) -> None:
        self.wait_listening(timeout)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if http(self.port, "/health")[0] == 200:
                return
            assert self.proc.poll() is None, self.output()
            time.sleep(0.05)
        raise AssertionError("double never became healthy:\n" + self.output())

    def wait_logged(self, text: str, timeout: float = 15) -> str:
        """Its output once it holds ``text``: the line a code path logs proves the double got there, where
        a sleep would only guess (it fails, with the output, if the double exits or never logs it)."""
        deadline = time.time() + timeout
        while True:
            exited = self.proc.poll() is not None  # before the read: an exit's last lines are in it
            out = self.output()
            if text in out:
                return out
            assert not exited, "exited before logging %r:\n%s" % (text, out)
            if time.time() >= deadline:
                raise AssertionError("never logged %r within %ss:\n%s" % (text, timeout, out))
            time.sleep(0.05)

    def output(self) -> str:
        if not self._fh.closed:
            self._fh.flush()
        return self.log.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=10)
        self._fh.close()
        return code


def remediated_double(root: Path, run_double: Any, real_059: Dict[str, str], steps: int = 15, draft_tokens: int = 16,
                      extra_flags: Sequence[str] = (), **env: str) -> "Double":
    """The double serving the real 0.5.9 as the role remediates it (patch and companion), draft trained on
    [-1, 2, 30], with the speculative flags ``steps``/1/``draft_tokens``."""
    site = make_site(root, "0.5.9", patch_embedding_capture(real_059["deepseek_v2"]),
                     companion_patch(real_059["cuda_graph_runner"]), real_059["metadata"])
    target, draft = make_models(root, [-1, 2, 30])
    return run_double(spec_flags(target, draft, steps, 1, draft_tokens) + list(extra_flags), site, **env)
