#!/usr/bin/env python3
"""TEST DOUBLE for an SGLang server. This is NOT SGLang and serves no model.

Why it exists: the project's role installs SGLang, patches
``sglang/srt/models/deepseek_v2.py``, writes the EAGLE-3 draft's
``config.json`` and launches ``python -m sglang.launch_server`` under systemd.
Molecule and the demo run without a GPU, so the systemd unit starts this file
instead (through the role's ``sglang_server_command``).  It accepts the same
launch flags, answers the HTTP endpoints the role gates on (health, server
info, generate) and reports a speculative *accept length* that is derived from
what is really on the host: the installed ``deepseek_v2.py``, the installed
``cuda_graph_runner.py``, the draft's ``eagle_config`` and the flags.  That way
a host that is wired like the incident reports ~1.6 tokens per step, and a
correctly remediated host reports a high value, without the role's own
verification code ever being consulted (nothing here imports from the role;
the one exception is opt-in: SGLANG_TEST_DOUBLE_FORWARD_HARNESS names the
forward-capture harness, which only EXECUTES the installed capture code on a
python with torch; the verdict on what it captured stays here).

The judgement is a small, explicit heuristic over source text plus one call of
SGLang's own pure-Python bookkeeping method (see ``layer_bookkeeping``).  It is
deterministic: no randomness, same inputs give the same numbers.

Test-double options come from the ENVIRONMENT, never from flags, so the flag
surface stays SGLang's:

  SGLANG_TEST_DOUBLE_STARTUP_DELAY   seconds of 503 before healthy (default 2)
  SGLANG_TEST_DOUBLE_FAIL_HEALTH     "1": /health* answers 503 forever
  SGLANG_TEST_DOUBLE_SITE_PACKAGES   site-packages holding the installed sglang
                                     (default: the running interpreter's, then
                                     /opt/sglang/venv/lib/python3*/site-packages)
  SGLANG_TEST_DOUBLE_START_LOG       file to append "<start> <healthy> <pid>"
                                     (epoch seconds, 3 decimals) once healthy
  SGLANG_TEST_DOUBLE_TRAINED_LAYERS  hidden states the draft was trained on
                                     (default "embed,2,30": embedding output,
                                     output of layer 2, output of layer 30)
  SGLANG_TEST_DOUBLE_FORWARD_HARNESS  path of the project's forward-capture
                                     harness (plugins/module_utils/
                                     _forward_harness.py, the files
                                     it imports next to it); where this
                                     python imports torch, the captured states are
                                     then EXECUTED with the installed code
                                     instead of judged from the source text
  SGLANG_TEST_DOUBLE_DEGRADE_AFTER   degrade at run time: after this many
                                     /generate requests the accept length drops,
                                     as if the draft were swapped under the
                                     running server (default: never)
  SGLANG_TEST_DOUBLE_DEGRADED_ACCEPT_LENGTH  accept length once degraded
                                     (default: what a draft fed other hidden
                                     states accepts with these flags, ~1.6)
  SGLANG_TEST_DOUBLE_EXIT_AT_START   "1": exit 1 at once, as a server whose
                                     launch fails (systemd then restarts it
                                     in a loop and it never answers)
  SGLANG_TEST_DOUBLE_API_KEY         the API key it holds instead of its flags'
                                     and --config file's, as a server given
                                     another key by something the role does
                                     not manage (a drop-in, a hand edit)
  SGLANG_TEST_DOUBLE_RUN_SETTINGS    "name=value,...": the resolved settings it
                                     runs and reports instead of its flags'
                                     (speculative_num_steps,
                                     speculative_eagle_topk,
                                     speculative_num_draft_tokens), as SGLang
                                     rewriting them silently would

API keys as SGLang 0.5.8+ (srt/utils/auth.py, decide_request_auth): --api-key and
--admin-api-key, on the command line or in the YAML file of --config, merged into argv
before the flags as SGLang's ConfigArgumentMerger does (so a flag on the command line
wins). With a key, every route but /health* and /metrics answers 401 without
"Authorization: Bearer <api key>"; the admin key opens no route the role reads (they are
all NORMAL). /server_info holds the server args, keys included, as SGLang's does.

With --enable-metrics, /metrics serves SGLang's own metric names
(sglang:spec_accept_length: the last decode interval, here the last request;
sglang:gen_throughput; sglang:num_requests_total), with HELP and TYPE.

Python standard library only; runs on Python 3.9 to 3.13.
"""

from __future__ import annotations

import argparse
import ast
import hmac
import glob
import json
import logging
import os
import re
import signal
import socket
import sys
import sysconfig
import textwrap
import threading
import time
import typing
from dataclasses import dataclass, field
from dataclasses import replace as dataclasses_replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

LOG = logging.getLogger("sglang_test_double")

ENV_STARTUP_DELAY = "SGLANG_TEST_DOUBLE_STARTUP_DELAY"
ENV_FAIL_HEALTH = "SGLANG_TEST_DOUBLE_FAIL_HEALTH"
ENV_SITE_PACKAGES = "SGLANG_TEST_DOUBLE_SITE_PACKAGES"
ENV_START_LOG = "SGLANG_TEST_DOUBLE_START_LOG"
ENV_TRAINED_LAYERS = "SGLANG_TEST_DOUBLE_TRAINED_LAYERS"
ENV_DEGRADE_AFTER = "SGLANG_TEST_DOUBLE_DEGRADE_AFTER"
ENV_DEGRADED_ACCEPT = "SGLANG_TEST_DOUBLE_DEGRADED_ACCEPT_LENGTH"
ENV_FORWARD_HARNESS = "SGLANG_TEST_DOUBLE_FORWARD_HARNESS"
ENV_EXIT_AT_START = "SGLANG_TEST_DOUBLE_EXIT_AT_START"
ENV_RUN_SETTINGS = "SGLANG_TEST_DOUBLE_RUN_SETTINGS"
ENV_API_KEY = "SGLANG_TEST_DOUBLE_API_KEY"
# Routes SGLang leaves open when the server has a key (prefixes; decide_request_auth).
OPEN_ROUTES = ("/health", "/metrics")
# The settings SGLANG_TEST_DOUBLE_RUN_SETTINGS may rewrite (what SGLang itself rewrites silently).
RUN_SETTINGS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")

DEFAULT_STARTUP_DELAY = 2.0
DEFAULT_TRAINED_LAYERS = "embed,2,30"
# DeepSeek-V3 depth, used only when the target's config.json cannot be read.
FALLBACK_NUM_HIDDEN_LAYERS = 61
FALLBACK_SITE_PACKAGES_GLOB = "/opt/sglang/venv/lib/python3*/site-packages"
# First release whose DeepseekV2 decoder layer captures index 0 (the
# embedding output) natively, so no source patch is needed.
NATIVE_EMBED_CAPTURE_RELEASE = (0, 5, 14)

# Accept-length model.  Expected accepted tokens per verify step for a chain
# of L draft positions is 1 + sum_j prod_{i<=j} rate_i (the +1 is the bonus
# token the target always contributes).  A draft fed the hidden states it was
# trained on keeps a flat per-position rate (0.72 gives 3.55 for 15 steps,
# 1.72 when the draft is cut to 2 tokens).  A draft fed other hidden states
# still guesses its first token fairly often, but its own recurrent state is
# then off-distribution, so later positions almost never land: 1.60 for one
# step (the incident's number), 1.63 for fifteen.
MATCHED_ACCEPT_RATE = 0.72
MISMATCHED_FIRST_ACCEPT_RATE = 0.60
MISMATCHED_LATER_ACCEPT_RATE = 0.05
# Throughput: the incident measured 90 tok/s without speculation and
# 56.8 tok/s at 1.6 accepted tokens per step; 56.8 / 1.6 = 35.5.
BASELINE_TOKENS_PER_SECOND = 90.0
TOKENS_PER_SECOND_PER_ACCEPTED_TOKEN = 35.5

# SGLang 0.5.9's choices; other flags stay free strings because their choices
# change between releases and the double must not reject a valid value.
SPECULATIVE_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
DTYPES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
DEEPSEEK_ARCHITECTURES = {
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
}


class FatalStartup(Exception):
    """A condition under which real SGLang would die instead of serving."""


# --------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The subset of ``sglang.launch_server`` flags the role renders.

    Names, aliases, types and defaults follow SGLang 0.5.9's server_args.py.
    Unknown flags exit 2 exactly like SGLang's argparse.  One deliberate
    difference: abbreviations are refused (``allow_abbrev=False``) so that a
    role rendering a truncated flag name fails here instead of passing by luck.
    """
    p = argparse.ArgumentParser(
        prog="sglang_test_double",
        description="TEST DOUBLE of sglang.launch_server (no model, no GPU).",
        allow_abbrev=False,
    )
    p.add_argument("--model-path", "--model", type=str, required=True)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", type=str)
    p.add_argument("--speculative-algorithm", type=str, choices=SPECULATIVE_ALGORITHMS)
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--served-model-name", type=str)
    p.add_argument("--context-length", type=int)
    p.add_argument("--log-level", type=str, default="info")
    p.add_argument("--dtype", type=str, default="auto", choices=DTYPES)
    p.add_argument("--kv-cache-dtype", type=str, default="auto")
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--attention-backend", type=str)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--random-seed", type=int)
    p.add_argument("--watchdog-timeout", type=float, default=300.0)
    p.add_argument("--api-key", type=str)
    p.add_argument("--admin-api-key", type=str)
    p.add_argument("--config", type=str)
    return p


def _config_scalar(text: str) -> Any:
    """One value of the --config file: a JSON scalar (a quoted string, a number, true/false), else the text."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


def merge_config(argv: List[str], parser: argparse.ArgumentParser) -> List[str]:
    """argv with the --config file's options first, as SGLang's ConfigArgumentMerger merges them.

    The file is the YAML subset the role writes (``name: value`` lines, comments); the
    config's options go before the command line's, so a flag given there wins.
    """
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    if at == len(argv) - 1:
        raise SystemExit("No config file specified after --config flag!")
    path = argv[at + 1]
    if not path.endswith((".yaml", ".yml")):
        raise SystemExit("Config file must be YAML format, got: %s" % path)
    flags = {a.dest: a for a in parser._actions}  # noqa: SLF001 - what SGLang's merger reads too
    merged: List[str] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, _, raw = line.partition(":")
            value = _config_scalar(raw)
            action = flags.get(name.strip().replace("-", "_"))
            if isinstance(action, argparse._StoreTrueAction):  # noqa: SLF001
                merged += ["--" + name.strip()] if value is True else []
            else:
                merged += ["--" + name.strip(), str(value)]
    return merged + argv[:at] + argv[at + 2:]


@dataclass(frozen=True)
class SpecParams:
    """Speculative parameters after SGLang's own adjustments."""

    num_steps: Optional[int]
    eagle_topk: Optional[int]
    num_draft_tokens: Optional[int]
    adjusted: bool


def resolve_speculative_params(
    algorithm: Optional[str],
    num_steps: Optional[int],
    eagle_topk: Optional[int],
    num_draft_tokens: Optional[int],
    architecture: Optional[str],
) -> SpecParams:
    """Apply SGLang's resolution of the speculative flags, silent rewrite included.

    SGLang auto-chooses (steps, topk, draft) only when all three are unset
    ((3, 1, 4) for DeepSeek and most models), asserts if only some are unset,
    and, when topk == 1 and draft != steps + 1, sets draft = steps + 1 with a
    mere warning.  That rewrite is half of the incident, so it is mirrored here.
    """
    if algorithm is None:
        return SpecParams(num_steps, eagle_topk, num_draft_tokens, False)
    if num_steps is None:
        if eagle_topk is not None or num_draft_tokens is not None:
            raise FatalStartup(
                "AssertionError: --speculative-num-steps unset while "
                "--speculative-eagle-topk/--speculative-num-draft-tokens are set"
            )
        num_steps, eagle_topk, num_draft_tokens = 3, 1, 4
        LOG.info("auto-chose speculative params (3, 1, 4) for %s", architecture)
    if eagle_topk is None:
        raise FatalStartup("TypeError: --speculative-eagle-topk unset (SGLang compares it with >)")
    adjusted = False
    if eagle_topk == 1 and num_draft_tokens != num_steps + 1:
        LOG.warning(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
            "when speculative_eagle_topk == 1 (%s -> %s)",
            num_draft_tokens,
            num_steps + 1,
        )
        num_draft_tokens = num_steps + 1
        adjusted = True
    if num_draft_tokens is None:
        raise FatalStartup("--speculative-num-draft-tokens unset with --speculative-eagle-topk > 1")
    return SpecParams(num_steps, eagle_topk, num_draft_tokens, adjusted)


def draft_tree_size(num_steps: int, eagle_topk: int) -> int:
    """Most tokens an EAGLE draft tree can hold: 1 + k + (s-1)*k^2."""
    return 1 + eagle_topk + max(num_steps - 1, 0) * eagle_topk * eagle_topk


# --------------------------------------------------------------------------
# What is installed on the host
# --------------------------------------------------------------------------


def _has_sglang(site_packages: str) -> bool:
    return os.path.isfile(os.path.join(site_packages, "sglang", "srt", "models", "deepseek_v2.py"))


def find_site_packages(environ: typing.Mapping[str, str]) -> Optional[str]:
    """Locate the site-packages directory whose sglang the real server would run.

    The explicit environment override wins; otherwise the interpreter running
    this file (the role's venv python), then the role's default venv location,
    so the double also works when started with the system python.
    """
    override = environ.get(ENV_SITE_PACKAGES)
    if override:
        return override if _has_sglang(override) else None
    candidates = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    candidates += [p for p in sys.path if p.endswith("site-packages")]
    candidates += sorted(glob.glob(FALLBACK_SITE_PACKAGES_GLOB))
    for candidate in candidates:
        if candidate and _has_sglang(candidate):
            return candidate
    return None


def read_installed_version(site_packages: str) -> str:
    """The installed sglang version from its dist-info METADATA, as pip recorded it."""
    for metadata in sorted(glob.glob(os.path.join(site_packages, "sglang-*.dist-info", "METADATA"))):
        with open(metadata, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():
                    break
    return "unknown"


def release_tuple(version: str) -> Tuple[int, ...]:
    """Numeric release part of a version ("0.5.10.post1" -> (0, 5, 10))."""
    match = re.match(r"^(\d+(?:\.\d+)*)", version)
    return tuple(int(x) for x in match.group(1).split(".")) if match else ()


def read_text(path: str) -> Optional[str]:
    """File text, or None when absent: absence is itself evidence here."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def read_json(path: str) -> Optional[Dict[str, Any]]:
    """A JSON object from disk, or None when missing or malformed."""
    text = read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def draft_eagle_settings(draft_path: Optional[str]) -> Tuple[bool, Optional[List[Any]]]:
    """(use_aux_hidden_state, layer ids) as SGLang reads them from the draft config.

    Mirrors SGLang's bare ``try/except``: any problem (missing file, missing
    ``eagle_config``, misspelt key) silently yields ``None`` ids, i.e. the
    defaults.  That silence is why the role must verify what it wrote.
    """
    config = read_json(os.path.join(draft_path, "config.json")) if draft_path else None
    eagle = config.get("eagle_config") if config else None
    if not isinstance(eagle, dict):
        return True, None
    use_aux = bool(eagle.get("use_aux_hidden_state", True))
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    return use_aux, (list(ids) if isinstance(ids, list) else None)


def target_model_facts(model_path: str) -> Tuple[int, Optional[str]]:
    """(num_hidden_layers, architecture) of the target, with a DeepSeek-V3 fallback."""
    config = read_json(os.path.join(model_path, "config.json")) or {}
    layers = config.get("num_hidden_layers")
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(layers, int):
        LOG.warning("no num_hidden_layers in %s/config.json; assuming %d", model_path, FALLBACK_NUM_HIDDEN_LAYERS)
        layers = FALLBACK_NUM_HIDDEN_LAYERS
    return layers, arch


# --------------------------------------------------------------------------
# Judging the wiring
# --------------------------------------------------------------------------

EMBED = "embed"


def capture_label(index: int) -> str:
    """Name the tensor captured at SGLang capture index ``index``.

    Index i is the input of decoder layer i, i.e. the output of layer i-1;
    index 0 is therefore the embedding output.
    """
    return EMBED if index == 0 else "L%d" % (index - 1)


def parse_trained_layers(spec: str) -> FrozenSet[str]:
    """"embed,2,30" -> {"embed", "L2", "L30"} (layer numbers are outputs)."""
    labels = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        labels.add(EMBED if part.lower() in ("embed", "embedding", "emb") else "L%d" % int(part))
    return frozenset(labels)


class _Anything:
    """Permissive stand-in: any attribute, call or truth test succeeds."""

    def __getattr__(self, name: str) -> "_Anything":
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> "_Anything":
        return _Anything()


class _Recorder(_Anything):
    """Stand-in ``self``/``self.model`` that keeps whatever the method assigns."""


def extract_method(source: str, class_name: str, method: str) -> Optional[str]:
    """Dedented source of ``class_name.method`` (any class as a fallback)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found: Optional[ast.FunctionDef] = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    if node.name == class_name or found is None:
                        found = item
    if found is None:
        return None
    segment = ast.get_source_segment(source, found, padded=True)
    return textwrap.dedent(segment) if segment else None


@dataclass(frozen=True)
class Bookkeeping:
    """What ``set_eagle3_layers_to_capture`` leaves on the model."""

    layers_to_capture: Tuple[int, ...]
    true_flags: FrozenSet[str]


def layer_bookkeeping(method_source: str, layer_ids: Optional[List[Any]], num_layers: int) -> Bookkeeping:
    """Run the installed ``set_eagle3_layers_to_capture`` against a stub model.

    Why run it instead of pattern-matching it: the method is pure list
    arithmetic on its arguments (``[val + 1 for val in layer_ids]`` up to
    0.5.12.post1, a conditional ``+1`` from 0.5.13, whatever a patch made of
    it), and SGLang's own code is the only faithful description of that
    arithmetic for every release.  Only this one method is executed, with a
    stub ``self`` on the last pipeline rank; nothing else from SGLang runs.
    """
    namespace: Dict[str, Any] = {name: getattr(typing, name) for name in typing.__all__}
    namespace["logger"] = _Anything()
    exec(compile(method_source, "<installed set_eagle3_layers_to_capture>", "exec"), namespace)
    method = namespace["set_eagle3_layers_to_capture"]
    model = _Recorder()
    model.layers_to_capture = []
    this = _Recorder()
    this.model = model
    this.pp_group = _Recorder()
    this.pp_group.is_last_rank = True
    this.pp_group.is_first_rank = True
    this.config = _Recorder()
    this.config.num_hidden_layers = num_layers
    if layer_ids is None:
        method(this)
    else:
        method(this, list(layer_ids))
    # Only flags on the DeepseekV2Model count: that is the object whose
    # forward() reads them.
    flags = {k for k, v in vars(model).items() if v is True}
    return Bookkeeping(tuple(int(i) for i in model.layers_to_capture), frozenset(flags))


_LOOP_CAPTURE = re.compile(
    r"if\s+i\s+in\s+self\.layers_to_capture\s*:[\s\S]{0,600}?"
    r"aux_hidden_states\.append\(\s*hidden_states\s*\+\s*residual\s*\)"
)


def forward_style(model_source: str, version: str) -> str:
    """How the installed DeepseekV2 forward captures hidden states.

    "loop": before layer i it appends ``hidden_states + residual`` (up to
    0.5.13.post1); index 0 would add ``None`` and raise.  "native": the
    capture lives in the decoder layer and index 0 is the embedding output
    (0.5.14 and later).  "unknown": neither; the double will not guess.
    """
    if _LOOP_CAPTURE.search(model_source):
        return "loop"
    if release_tuple(version) >= NATIVE_EMBED_CAPTURE_RELEASE:
        return "native"
    return "unknown"


def embedding_append(model_source: str, flag: str) -> Optional[str]:
    """Whether the forward appends the embedding under ``if self.<flag>``.

    Returns "clone" for ``aux_hidden_states.append(hidden_states.clone())``,
    "alias" for an append of ``hidden_states`` itself (layer 0's in-place
    ``fused_add_rmsnorm`` then overwrites it, so the draft never sees the
    embedding), None when there is no such guarded append.
    """
    guard = r"if\s+[^\n:]*\bself\.%s\b[^\n]*:\s*\n\s*" % re.escape(flag)
    if re.search(guard + r"aux_hidden_states\.append\(\s*hidden_states\.clone\(\)\s*\)", model_source):
        return "clone"
    if re.search(guard + r"aux_hidden_states\.append\(\s*hidden_states\s*\)", model_source):
        return "alias"
    return None


_NO_ARG_RESET = re.compile(r"\.set_eagle3_layers_to_capture\(\s*\)")


def graph_capture_resets_ids(cuda_graph_runner_source: Optional[str]) -> bool:
    """True when CUDA-graph capture runs with the default ids (<= 0.5.10.post1).

    ``CudaGraphRunner.__init__`` calls ``set_eagle3_layers_to_capture()`` with
    no arguments before capturing, and the draft's ids are applied only after
    capture, so every graph-replayed decode step uses the defaults.
    (``ModelRunner._dummy_run`` does the same, but only for the flashinfer
    MoE autotune, which needs a --moe-runner-backend this double does not take.)
    """
    return bool(cuda_graph_runner_source and _NO_ARG_RESET.search(cuda_graph_runner_source))


@dataclass(frozen=True)
class Wiring:
    """The hidden states that reach the draft, per path, and why."""

    prefill: Tuple[str, ...]
    decode: Tuple[str, ...]
    trained: Tuple[str, ...]
    fatal: Optional[str] = None
    notes: Tuple[str, ...] = field(default_factory=tuple)

    @property
    def matches_training(self) -> bool:
        """Decode dominates generation, so decode's inputs decide acceptance."""
        return self.fatal is None and set(self.decode) == set(self.trained)


def _depth(label: str) -> int:
    """Sort key: embedding first, then layers by depth, anything odd last."""
    if label == EMBED:
        return -1
    return int(label[1:]) if label[1:].isdigit() else 10**6


def _depth_order(labels: Sequence[str]) -> Tuple[str, ...]:
    """Captured tensors in the order they are concatenated (shallowest first)."""
    return tuple(sorted(set(labels), key=_depth))


def captured_states(
    model_source: str,
    style: str,
    layer_ids: Optional[List[Any]],
    num_layers: int,
    pp_size: int,
) -> Tuple[Tuple[str, ...], List[str], Optional[str]]:
    """Tensors one forward pass hands the draft for these ids: (labels, notes, fatal)."""
    notes: List[str] = []
    method = extract_method(model_source, "DeepseekV2ForCausalLM", "set_eagle3_layers_to_capture")
    if method is None:
        return (), ["deepseek_v2.py has no set_eagle3_layers_to_capture"], "EAGLE3 unsupported for DeepseekV2 here"
    try:
        book = layer_bookkeeping(method, layer_ids, num_layers)
    except Exception as exc:  # the installed method is foreign code: any failure is a finding
        return (), ["set_eagle3_layers_to_capture(%r) raised %r" % (layer_ids, exc)], "set_eagle3_layers_to_capture raised"
    notes.append("layers_to_capture=%s flags=%s for ids %s" % (list(book.layers_to_capture), sorted(book.true_flags), layer_ids))
    labels: List[str] = []
    for flag in sorted(book.true_flags):
        kind = embedding_append(model_source, flag)
        if kind == "clone":
            labels.append(EMBED if pp_size == 1 else "pp_proxy_hidden_states")
            if pp_size > 1:
                notes.append("pp_size > 1: the embedding lives on the first rank, capture on the last")
        elif kind == "alias":
            labels.append("embed_overwritten_in_place")
            notes.append("embedding appended without .clone(): layer 0 overwrites it in place")
    fatal = None
    for index in book.layers_to_capture:
        if not 0 <= index < num_layers:
            notes.append("capture index %d outside 0..%d: never captured" % (index, num_layers - 1))
            continue
        if index == 0 and style == "loop":
            fatal = "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType' (capture index 0, residual is None)"
            continue
        if index == 0 and pp_size > 1:
            labels.append("pp_proxy_hidden_states")
            continue
        labels.append(capture_label(index))
    return _depth_order(labels), notes, fatal


def _label(name: str) -> str:
    """The harness's names ("embedding", "output of layer 2") as this file's labels."""
    prefix = "output of layer "
    if name == "embedding":
        return EMBED
    return "L" + name[len(prefix):] if name.startswith(prefix) else name


# The harness's files import each other by the collection's name.
HARNESS_PACKAGE = "ansible_collections.fleetops.sglang.plugins.module_utils"


def load_harness(path: str) -> Any:
    """The harness file at ``path``, loaded after the files next to it that it imports.

    Each file runs under its module name in the collection, so the next one's
    imports find it on a python where no collection is installed.
    """
    import importlib.util
    name = HARNESS_PACKAGE + "." + os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:
        return sys.modules[name]
    for node in ast.parse(read_text(path) or "").body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(HARNESS_PACKAGE + "."):
            load_harness(os.path.join(os.path.dirname(path), node.module.rsplit(".", 1)[-1] + ".py"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def executed_wiring(
    harness_path: Optional[str],
    site_packages: str,
    style: str,
    layer_ids: Optional[List[Any]],
    disable_cuda_graph: bool,
) -> Optional[Tuple[Tuple[str, ...], Tuple[str, ...], Optional[str], List[str]]]:
    """(prefill, decode, fatal, notes) from EXECUTING the installed capture code, or None.

    None when this python has no torch or no harness was named: the text
    heuristics then judge as before.  The harness runs the installed
    release's own set_eagle3_layers_to_capture, DeepseekV2Model.forward and
    (0.5.14+) decoder-layer capture on CPU tensors, in the state CUDA graphs
    are captured in and in the eager state.  Only what it captured is used
    here; whether that matches training is still this file's judgement.
    """
    if not harness_path or not os.path.isfile(harness_path):
        return None
    try:
        import torch  # noqa: F401  (only to know whether the executed judgement is possible)
    except ImportError:
        return None
    harness = load_harness(harness_path)
    texts = {rel: read_text(os.path.join(site_packages, rel)) for rel in harness.FORWARD_FILES}
    route = "patch" if style == "loop" else "native"
    with torch.inference_mode():
        res = harness.run_capture_check(torch, texts, route, layer_ids, [])
    notes = ["forward EXECUTED with torch %s (%s): %s" % (torch.__version__, harness_path, res["captured"])]
    notes += ["executed: %s" % e for e in res.get("events", [])]
    raised = res.get("raised", {})
    fatal = None
    for stage in ("plain", "eager", "graph"):
        if stage in raised:
            fatal = "%s (executed, %s)" % (raised[stage], stage)
            break
    prefill = tuple(_label(n) for n in res["captured"].get("eager", []))
    graph = res["captured"].get("graph")
    decode = prefill if (disable_cuda_graph or graph is None) else tuple(_label(n) for n in graph)
    if decode != prefill:
        notes.append("CUDA graphs captured with other ids than eager; decode sees %s" % (list(decode),))
    return _depth_order(prefill) if prefill else (), _depth_order(decode) if decode else (), fatal, notes


def judge_wiring(
    site_packages: Optional[str],
    version: str,
    algorithm: Optional[str],
    draft_path: Optional[str],
    num_layers: int,
    disable_cuda_graph: bool,
    pp_size: int,
    trained: FrozenSet[str],
    harness_path: Optional[str] = None,
) -> Wiring:
    """Decide which hidden states the draft really receives on this host."""
    trained_t = _depth_order(trained)
    if algorithm is None:
        return Wiring((), (), trained_t, notes=("no speculative decoding",))
    if algorithm != "EAGLE3":
        return Wiring((), (), trained_t, notes=("only EAGLE3 wiring is modelled; %s treated as mismatched" % algorithm,))
    if site_packages is None:
        return Wiring((), (), trained_t, fatal="ModuleNotFoundError: No module named 'sglang'")
    srt = os.path.join(site_packages, "sglang", "srt")
    model_source = read_text(os.path.join(srt, "models", "deepseek_v2.py")) or ""
    style = forward_style(model_source, version)
    use_aux, layer_ids = draft_eagle_settings(draft_path)
    notes = ["sglang %s, forward capture style %r, draft ids %s%s" % (
        version, style, layer_ids, "" if layer_ids is not None else " (defaults [2, n//2, n-3])")]
    if not use_aux:
        return Wiring((), (), trained_t, notes=tuple(notes + ["use_aux_hidden_state is false"]))
    if style == "unknown":
        return Wiring((), (), trained_t, notes=tuple(notes + ["unrecognised forward capture; not guessing"]))
    executed = executed_wiring(harness_path, site_packages, style, layer_ids, disable_cuda_graph) \
        if pp_size == 1 and num_layers == FALLBACK_NUM_HIDDEN_LAYERS else None
    if executed is not None:
        prefill, decode, fatal, more = executed
        if fatal is None and len(prefill) != len(trained_t):
            fatal = "RuntimeError: draft fc expects %d hidden states, got %d" % (len(trained_t), len(prefill))
        return Wiring(prefill, decode, trained_t, fatal, tuple(notes + more))
    prefill, more, fatal = captured_states(model_source, style, layer_ids, num_layers, pp_size)
    notes += more
    decode = prefill
    graph_runner = read_text(os.path.join(srt, "model_executor", "cuda_graph_runner.py"))
    if not disable_cuda_graph and graph_capture_resets_ids(graph_runner):
        decode, more, _ = captured_states(model_source, style, None, num_layers, pp_size)
        notes.append("CUDA graphs captured with default ids (no-argument set_eagle3_layers_to_capture()); decode sees %s" % (list(decode),))
    if fatal is None and len(prefill) != len(trained_t):
        fatal = "RuntimeError: draft fc expects %d hidden states, got %d" % (len(trained_t), len(prefill))
    return Wiring(prefill, decode, trained_t, fatal, tuple(notes))


# --------------------------------------------------------------------------
# Accept length and throughput
# --------------------------------------------------------------------------


def expected_accept_length(matched: bool, params: SpecParams) -> float:
    """Mean tokens per verify step (accepted drafts + the target's bonus token).

    Draft positions = min(num_draft_tokens after the rewrite, tree size) - 1,
    further bounded by num_steps.  topk only matters through the tree size.
    """
    if params.num_steps is None or params.eagle_topk is None or params.num_draft_tokens is None:
        return 1.0
    effective = min(params.num_draft_tokens, draft_tree_size(params.num_steps, params.eagle_topk))
    positions = max(0, min(params.num_steps, effective - 1))
    total, survive = 1.0, 1.0
    for j in range(positions):
        if matched:
            rate = MATCHED_ACCEPT_RATE
        else:
            rate = MISMATCHED_FIRST_ACCEPT_RATE if j == 0 else MISMATCHED_LATER_ACCEPT_RATE
        survive *= rate
        total += survive
    return round(total, 4)


def tokens_per_second(accept_length: Optional[float]) -> float:
    """Simulated decode throughput, calibrated on the incident's numbers."""
    if accept_length is None:
        return BASELINE_TOKENS_PER_SECOND
    return round(TOKENS_PER_SECOND_PER_ACCEPTED_TOKEN * accept_length, 2)


# --------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------


class DoubleState:
    """Everything the HTTP handlers read; counters guarded by a lock."""

    def __init__(self, args: argparse.Namespace, params: SpecParams, version: str,
                 wiring: Wiring, accept_length: Optional[float], fail_health: bool,
                 degrade_after: Optional[int] = None, degraded_accept_length: Optional[float] = None) -> None:
        self.args = args
        self.params = params
        self.version = version
        self.wiring = wiring
        self.accept_length = accept_length
        self.fail_health = fail_health
        # Run-time degradation: the files stay as they are, what the server accepts drops.
        self.degrade_after = degrade_after
        self.degraded_accept_length = degraded_accept_length
        self.healthy = threading.Event()
        self.lock = threading.Lock()
        self.completion_tokens = 0
        self.verify_ct = 0
        self.requests = 0
        self.last_accept_length: Optional[float] = None
        self.api_key: Optional[str] = None

    def current_accept_length(self) -> Optional[float]:
        """The accept length the next request gets (call with the lock held)."""
        if (self.accept_length is not None and self.degrade_after is not None
                and self.requests >= self.degrade_after and self.degraded_accept_length is not None):
            return self.degraded_accept_length
        return self.accept_length

    def server_args(self) -> Dict[str, Any]:
        """The resolved args as SGLang reports them (flag names with underscores)."""
        resolved = dict(vars(self.args))
        resolved.pop("config", None)
        resolved["speculative_num_steps"] = self.params.num_steps
        resolved["speculative_eagle_topk"] = self.params.eagle_topk
        resolved["speculative_num_draft_tokens"] = self.params.num_draft_tokens
        if not resolved.get("served_model_name"):
            resolved["served_model_name"] = resolved["model_path"]
        return resolved

    def server_info(self) -> Dict[str, Any]:
        args = self.server_args()
        internal: Dict[str, Any] = dict(args)
        internal["last_gen_throughput"] = tokens_per_second(self.accept_length) if self.requests else 0.0
        with self.lock:
            if self.accept_length is not None and self.verify_ct > 0:
                internal["avg_spec_accept_length"] = self.completion_tokens / self.verify_ct
        info = dict(args)
        info["internal_states"] = [internal]
        info["version"] = self.version
        info["test_double"] = {
            "note": "TEST DOUBLE, not SGLang",
            "prefill_hidden_states": list(self.wiring.prefill),
            "decode_hidden_states": list(self.wiring.decode),
            "trained_hidden_states": list(self.wiring.trained),
            "wiring_matches_training": self.wiring.matches_training,
            "expected_accept_length": self.accept_length,
            "requests": self.requests,
            "degrade_after": self.degrade_after,
            "degraded": self.degrade_after is not None and self.requests >= self.degrade_after,
            "notes": list(self.wiring.notes),
        }
        return info

    def generate_one(self, text: str, max_new_tokens: int) -> Dict[str, Any]:
        """Deterministic fake completion whose meta_info follows the accept-length model."""
        tokens = max(0, int(max_new_tokens))
        words = ["double"] * tokens
        with self.lock:
            accept = self.current_accept_length()
        tps = tokens_per_second(accept)
        meta: Dict[str, Any] = {
            "id": "test-double-%d" % self.requests,
            "finish_reason": {"type": "length", "length": tokens},
            "prompt_tokens": len(text.split()),
            "completion_tokens": tokens,
            "cached_tokens": 0,
            "e2e_latency": round(tokens / tps, 4),
            "test_double_tokens_per_second": tps,
        }
        with self.lock:
            self.requests += 1
            if accept is not None:
                verify = max(1, int(round(tokens / accept))) if tokens else 0
                meta["spec_verify_ct"] = verify
                meta["spec_accept_length"] = round(tokens / verify, 4) if verify else 0.0
                meta["spec_accept_rate"] = round((tokens / verify - 1) / max(1, (self.params.num_draft_tokens or 1) - 1), 4) if verify else 0.0
                self.completion_tokens += tokens
                self.verify_ct += verify
                if verify:
                    self.last_accept_length = tokens / verify
        return {"text": " ".join(words), "meta_info": meta}

    def metrics(self) -> str:
        """SGLang's own names and help texts (0.5.9 collector.py); the gauge is the last interval's."""
        name = self.server_args()["served_model_name"].replace("\\", "\\\\").replace('"', '\\"')
        with self.lock:
            last, requests = self.last_accept_length, self.requests
        throughput = tokens_per_second(last) if requests else 0.0
        lines = [
            "# HELP sglang:gen_throughput The generation throughput (token/s).",
            "# TYPE sglang:gen_throughput gauge",
            'sglang:gen_throughput{model_name="%s"} %s' % (name, throughput),
            "# HELP sglang:num_requests_total Number of requests processed.",
            "# TYPE sglang:num_requests_total counter",
            'sglang:num_requests_total{model_name="%s"} %d' % (name, requests),
        ]
        if self.params.num_steps is not None and self.accept_length is not None:
            lines += ["# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.",
                      "# TYPE sglang:spec_accept_length gauge",
                      'sglang:spec_accept_length{model_name="%s"} %s' % (name, round(last or 0.0, 4))]
        return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    """HTTP surface of the double; ``server.state`` is the DoubleState."""

    server_version = "sglang-test-double"
    protocol_version = "HTTP/1.1"

    @property
    def state(self) -> DoubleState:
        return self.server.state  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: Any) -> None:
        LOG.info("%s - %s", self.address_string(), fmt % args)

    def _send(self, status: int, body: Any = None, content_type: str = "application/json") -> None:
        if body is None:
            data = b""
        elif isinstance(body, str):
            data = body.encode("utf-8")
        else:
            data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _ready(self) -> bool:
        return self.state.healthy.is_set() and not self.state.fail_health

    def _authorized(self, path: str) -> bool:
        """decide_request_auth for a NORMAL route: open without an api key, else Bearer <api key> only."""
        key = self.state.api_key
        if not key or path.startswith(OPEN_ROUTES):
            return True
        got = self.headers.get("Authorization") or ""
        scheme, _, token = got.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token, key)

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            self._send(401, {"error": "Unauthorized"})
        elif path in ("/health", "/health_generate"):
            self._send(200 if self._ready() else 503)
        elif path in ("/get_server_info", "/server_info"):
            self._send(200, self.state.server_info())
        elif path == "/get_model_info" or path == "/model_info":
            self._send(200, {"model_path": self.state.args.model_path, "is_generation": True})
        elif path == "/metrics" and self.state.args.enable_metrics:
            self._send(200, self.state.metrics(), "text/plain; version=0.0.4")
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized(path):
            self._send(401, {"error": "Unauthorized"})
            return
        if path != "/generate":
            self._send(404, {"detail": "Not Found"})
            return
        if not self._ready():
            self._send(503, {"error": "server is starting (test double)"})
            return
        try:
            req = json.loads(raw or b"{}")
            params = req.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens", 128))
            text = req.get("text", "")
        except (ValueError, AttributeError, TypeError) as exc:
            self._send(400, {"error": "bad request: %s" % exc})
            return
        if isinstance(text, list):
            self._send(200, [self.state.generate_one(str(t), max_new) for t in text])
        else:
            self._send(200, self.state.generate_one(str(text), max_new))


def make_server(host: str, port: int, state: DoubleState) -> ThreadingHTTPServer:
    """Bind exactly the requested address (IPv6 literal hosts included)."""

    class _Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True

    server = _Server((host, port), Handler)
    server.state = state  # type: ignore[attr-defined]
    return server


def env_float(environ: typing.Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit("%s must be a number, got %r" % (name, raw))


def rewritten_params(params: "SpecParams", spec: str) -> "SpecParams":
    """``params`` with the settings ``spec`` ("name=value,...") names: what the server runs."""
    if not spec.strip():
        return params
    changes: Dict[str, int] = {}
    for item in spec.split(","):
        name, _, value = item.strip().partition("=")
        if name not in RUN_SETTINGS or not value.strip().lstrip("-").isdigit():
            raise ValueError("%r: expected name=integer, name one of %s" % (item, ", ".join(RUN_SETTINGS)))
        changes[name[len("speculative_"):]] = int(value)
    fields = {"num_steps": params.num_steps, "eagle_topk": params.eagle_topk,
              "num_draft_tokens": params.num_draft_tokens}
    fields.update(changes)
    return dataclasses_replace(params, **fields)


def append_start_log(path: str, started: float, healthy: float) -> None:
    """One line per healthy start; fleet tests use it to prove batches don't overlap."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("%.3f %.3f %d\n" % (started, healthy, os.getpid()))


def main(argv: Optional[Sequence[str]] = None, environ: Optional[typing.Mapping[str, str]] = None) -> int:
    """Parse, judge the host, serve until SIGTERM; exit codes follow SGLang's."""
    started = time.time()
    environ = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args(merge_config(list(sys.argv[1:] if argv is None else argv), parser))
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    logging.basicConfig(stream=sys.stdout, level=level, format="[%(asctime)s] [test-double] %(levelname)s %(message)s")
    LOG.warning("THIS IS THE SGLANG TEST DOUBLE, NOT SGLANG: no model is loaded")

    if environ.get(ENV_EXIT_AT_START) == "1":
        LOG.error("%s=1: exiting at once, as a server whose launch fails", ENV_EXIT_AT_START)
        return 1
    delay = env_float(environ, ENV_STARTUP_DELAY, DEFAULT_STARTUP_DELAY)
    fail_health = environ.get(ENV_FAIL_HEALTH) == "1"
    trained = parse_trained_layers(environ.get(ENV_TRAINED_LAYERS) or DEFAULT_TRAINED_LAYERS)
    num_layers, arch = target_model_facts(args.model_path)
    try:
        params = resolve_speculative_params(
            args.speculative_algorithm, args.speculative_num_steps, args.speculative_eagle_topk,
            args.speculative_num_draft_tokens, arch)
    except FatalStartup as exc:
        LOG.error("server args rejected: %s", exc)
        return 1
    try:
        params = rewritten_params(params, environ.get(ENV_RUN_SETTINGS) or "")
    except ValueError as exc:
        LOG.error("%s: %s", ENV_RUN_SETTINGS, exc)
        return 1
    site = find_site_packages(environ)
    if site is None:
        # `python -m sglang.launch_server` fails at once without the package.
        LOG.error("ModuleNotFoundError: No module named 'sglang' (set %s or install sglang)", ENV_SITE_PACKAGES)
        return 1
    version = read_installed_version(site)
    LOG.info("installed sglang: %s at %s", version, site)
    wiring = judge_wiring(site, version, args.speculative_algorithm, args.speculative_draft_model_path,
                          num_layers, args.disable_cuda_graph, args.pp_size, trained,
                          harness_path=environ.get(ENV_FORWARD_HARNESS))
    for note in wiring.notes:
        LOG.info("wiring: %s", note)
    accept: Optional[float] = None
    if args.speculative_algorithm is not None:
        accept = expected_accept_length(wiring.matches_training, params)
        LOG.info("draft receives %s (trained on %s): %s; expected accept length %.4f",
                 list(wiring.decode), list(wiring.trained),
                 "MATCH" if wiring.matches_training else "MISMATCH", accept)

    degrade_after: Optional[int] = None
    degraded: Optional[float] = None
    if environ.get(ENV_DEGRADE_AFTER):
        degrade_after = int(env_float(environ, ENV_DEGRADE_AFTER, 0))
        if accept is not None:
            degraded = env_float(environ, ENV_DEGRADED_ACCEPT, expected_accept_length(False, params))
        LOG.info("%s=%s: accept length drops to %s after %d requests", ENV_DEGRADE_AFTER,
                 environ[ENV_DEGRADE_AFTER], degraded, degrade_after)
    state = DoubleState(args, params, version, wiring, accept, fail_health, degrade_after, degraded)
    state.api_key = environ.get(ENV_API_KEY) or args.api_key or None
    try:
        server = make_server(args.host, args.port, state)
    except OSError as exc:
        LOG.error("cannot bind %s:%s: %s", args.host, args.port, exc)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    LOG.info("listening on %s:%s (startup delay %.1fs)", args.host, args.port, delay)

    code = 0
    if not stop.wait(max(0.0, delay)):
        if wiring.fatal:
            LOG.error("model warmup failed, as SGLang would: %s", wiring.fatal)
            code = 1
        elif fail_health:
            LOG.warning("%s=1: health stays 503", ENV_FAIL_HEALTH)
        else:
            state.healthy.set()
            healthy = time.time()
            LOG.info("The server is fired up and ready to roll!")
            start_log = environ.get(ENV_START_LOG)
            if start_log:
                append_start_log(start_log, started, healthy)
        if code == 0:
            stop.wait()
    LOG.info("shutting down")
    server.shutdown()
    server.server_close()
    return code


if __name__ == "__main__":
    sys.exit(main())
