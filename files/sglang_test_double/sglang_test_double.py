#!/usr/bin/env python3
"""TEST DOUBLE for an SGLang server. This is NOT SGLang and serves no model.

Why it exists: the project's role installs SGLang, patches
``sglang/srt/models/deepseek_v2.py``, writes the EAGLE-3 draft's
``config.json`` and launches ``python -m sglang.launch_server`` under systemd.
Molecule and the demo run without a GPU, so the systemd unit starts this file
instead (through the role's ``sglang_server_command``).  It accepts the same
launch flags, answers the HTTP endpoints the role gates on (health, server
info, generate) and reports a speculative *accept length* that is derived from
what is really on the host: the installed ``deepseek_v2.py`` (and, from
0.5.14, the layer capture code it calls: ``layers/communicator.py``,
``layers/layer_boundary/stage.py``), the installed ``cuda_graph_runner.py``,
the draft's ``eagle_config`` and the flags.  That way
a host that is wired like the incident reports ~1.6 tokens per step, and a
correctly remediated host reports a high value, without the role's own
verification code ever being consulted (nothing here imports from the role;
the one exception is opt-in: SGLANG_TEST_DOUBLE_FORWARD_HARNESS names the
forward-capture harness, which only EXECUTES the installed capture code on a
python with torch; the verdict on what it captured stays here).

The judgement reads the installed capture code's structure with Python's ast
(see ``read_capture``: where each append sits relative to the layer loop and the
layer call, under which layer-id test and capture flag, what value it appends)
plus one call of SGLang's own pure-Python bookkeeping method (see
``layer_bookkeeping``); the release's version number decides nothing.  Every
broken wiring that the role's executed forward-capture check fails, this
reading fails too (tests/test_double_capture_variants.py).  It is
deterministic: no randomness, same inputs give the same numbers.

Test-double options come from the ENVIRONMENT, never from flags, so the flag
surface stays SGLang's:

  SGLANG_TEST_DOUBLE_STARTUP_DELAY   seconds of model load before the port opens and
                                     the server turns healthy (default 2); as in
                                     SGLang (0.5.9 http_server.launch_server: uvicorn
                                     starts after _launch_subprocesses returns, the
                                     model loaded), nothing listens on --port meanwhile
  SGLANG_TEST_DOUBLE_WARMUP_DELAY    seconds of 503 once the port is open, before the
                                     warm-up request passes (default 0.5)
  SGLANG_TEST_DOUBLE_FAIL_HEALTH     "1": /health* answers 503 forever (rank 0; the
                                     stand-in server of a rank >= 1 always answers 200,
                                     as SGLang's does)
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
                                     instead of read from its structure
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
  SGLANG_TEST_DOUBLE_MARK_ROOT       the directory the test bed's mark is looked up
                                     under (default /; the unit tests' own root)
  SGLANG_TEST_DOUBLE_RUN_SETTINGS    "name=value,...": the resolved settings it
                                     runs and reports instead of its flags'
                                     (speculative_num_steps,
                                     speculative_eagle_topk,
                                     speculative_num_draft_tokens), as SGLang
                                     rewriting them silently would

Several nodes as SGLang (--nnodes, --node-rank, --dist-init-addr; see "Several nodes" below):
the ranks meet at the leader's address before the model load, a rank with other settings
fails the replica, a rank >= 1 serves only the stand-in health routes once ready, and when
one rank ends the others exit 1.

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
import copy
import functools
import hmac
import glob
import importlib.util
import json
import logging
import logging.config
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
ENV_WARMUP_DELAY = "SGLANG_TEST_DOUBLE_WARMUP_DELAY"
DEFAULT_WARMUP_DELAY = 0.5
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
ENV_MARK_ROOT = "SGLANG_TEST_DOUBLE_MARK_ROOT"
# SGLang's own: the logging configuration it reads instead of --log-level.
ENV_LOGGING_CONFIG = "SGLANG_LOGGING_CONFIG_PATH"
# The logger of srt/entrypoints/engine.py, which logs the server args.
ENGINE_LOGGER = "sglang.srt.entrypoints.engine"
# The test bed's mark rule (plugins/module_utils/_testbed.py): installed beside this file by
# playbooks/testbed-prepare.yml; in a checkout, where the collection keeps it.
MARK_RULE_PLACES = ("_testbed.py", os.path.join("..", "..", "plugins", "module_utils", "_testbed.py"))
# Routes SGLang leaves open when the server has a key (prefixes; decide_request_auth).
OPEN_ROUTES = ("/health", "/metrics")
# The settings SGLANG_TEST_DOUBLE_RUN_SETTINGS may rewrite (what SGLang itself rewrites silently).
RUN_SETTINGS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")

DEFAULT_STARTUP_DELAY = 2.0
DEFAULT_TRAINED_LAYERS = "embed,2,30"
# DeepSeek-V3 depth, used only when the target's config.json cannot be read.
FALLBACK_NUM_HIDDEN_LAYERS = 61
FALLBACK_SITE_PACKAGES_GLOB = "/opt/sglang/venv/lib/python3*/site-packages"

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
    # Multi-node (0.5.9 server_args.py): --nccl-init-addr is the old name of --dist-init-addr.
    p.add_argument("--dist-init-addr", "--nccl-init-addr", type=str)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
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
    # Every other attribute the method set on the DeepseekV2Model, with its value.
    attributes: Tuple[Tuple[str, Any], ...] = ()

    @property
    def flags(self) -> Dict[str, bool]:
        """The boolean attributes, as the forward's conditions read them."""
        return {k: v for k, v in self.attributes if isinstance(v, bool)}


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
    attributes = tuple(sorted((k, v) for k, v in vars(model).items() if k != "layers_to_capture"))
    return Bookkeeping(tuple(int(i) for i in model.layers_to_capture), frozenset(flags), attributes)


# --------------------------------------------------------------------------
# Reading the capture code: its structure, not its text
# --------------------------------------------------------------------------
#
# Without torch the double cannot run the forward, so it reads it: Python's ast
# of DeepseekV2Model.forward and, from 0.5.14, of the decoder layer and of the
# code the layer hands the capture list to (LayerCommunicator, or the layer
# boundary from 0.5.21).  What it establishes is what the executed check
# establishes by running the code: which state of the residual stream each
# append puts in ``aux_hidden_states``, in which order, and whether SGLang
# would die on the way.  State i is the input of decoder layer i (the output of
# layer i-1); state 0 is the embedding output.  The rules:
#
# * before the layer loop ``hidden_states`` is the embedding (on the first
#   pipeline rank); appended there behind a capture flag it is the embedding,
#   as a ``.clone()`` (without it layer 0's in-place fused_add_rmsnorm
#   overwrites it); a ``pop()`` there takes the last append back;
# * in the layer loop (``for i in range(...)`` around the call of
#   ``self.layers[i]``), an append of ``hidden_states + residual`` under
#   ``if i + d in self.layers_to_capture`` captures state i for index i + d
#   before the layer call and state i + 1 after it; at i == 0 before the call
#   ``residual`` is None (TypeError);
# * native capture (0.5.14+): the loop passes the list to the layer as
#   ``captured_last_layer_outputs=(aux_hidden_states if i + d in
#   self.layers_to_capture else None)``; followed through the layer's calls
#   (keywords, ``**kwargs``) to the append or ``capture``, the value appended
#   must come from the residual that the layer's input preparation
#   (``hidden_states, residual = self.prepare_attn(...)``, ``hidden_states,
#   stream = self._prepare(...)``) returns: that is state i;
# * after the layer loop ``hidden_states`` is no state the draft was trained on;
# * a flag the forward reads that ``DeepseekV2Model.__init__`` never sets raises
#   AttributeError in any forward before set_eagle3_layers_to_capture runs;
# * the packer of 0.5.17+ (``AuxHiddenStatePacker(len(self.layers_to_capture))``)
#   asserts that it received exactly that many captures.
# Conditions are evaluated where the model's own state decides them (the capture
# flags, the pipeline rank); where they depend on the batch, both ways are read
# and must capture the same.

# The files that hold the capture, relative to sglang/srt.
MODEL_FILE = os.path.join("models", "deepseek_v2.py")
COMMUNICATOR_FILE = os.path.join("layers", "communicator.py")
STAGE_FILE = os.path.join("layers", "layer_boundary", "stage.py")
CAPTURE_FILES = (MODEL_FILE, COMMUNICATOR_FILE, STAGE_FILE)
# What a native decoder layer hands the capture list to: attribute -> class.
CAPTURE_DELEGATES = {"layer_communicator": "LayerCommunicator", "attn_boundary": "StageBoundary"}
# The keyword DeepseekV2Model.forward hands the list to the decoder layer with.
LAYER_CAPTURE_KEYWORD = "captured_last_layer_outputs"
DECODER_LAYER_FORWARD = "DeepseekV2DecoderLayer.forward"
# Accumulators whose append copies into a preallocated buffer (0.5.17+).
COPYING_ACCUMULATORS = ("AuxHiddenStatePacker",)
# What the pipeline rank is in the judged setup (the capture runs on the last rank;
# with pp_size > 1 the first rank's embedding is relabelled below).
RANK_FACTS = {"pp_group.is_first_rank": True, "pp_group.is_last_rank": True}
UNRECOGNISED = "unrecognised_capture"


@functools.lru_cache(maxsize=8)
def _tree(source: str) -> Optional[ast.Module]:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def functions_of(*sources: Optional[str]) -> Dict[str, ast.FunctionDef]:
    """Every ``Class.method`` of the given files, by qualified name."""
    out: Dict[str, ast.FunctionDef] = {}
    for source in sources:
        tree = _tree(source) if source else None
        for node in tree.body if tree is not None else []:
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        out.setdefault("%s.%s" % (node.name, item.name), item)
    return out


def _self_path(node: ast.AST) -> Optional[str]:
    """``self.a.b`` -> "a.b"; anything else None."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and parts:
        return ".".join(reversed(parts))
    return None


def _truth(test: ast.AST, known: typing.Mapping[str, bool]) -> Optional[bool]:
    """A condition's value where the model's own state decides it, else None."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    path = _self_path(test)
    if path is not None:
        return known.get(path)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        value = _truth(test.operand, known)
        return None if value is None else not value
    if isinstance(test, ast.BoolOp):
        values = [_truth(v, known) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    return None


def _offset(node: ast.AST, var: Optional[str]) -> Optional[int]:
    """d for ``var + d`` (``var``: 0, ``var - 1``: -1), else None."""
    if isinstance(node, ast.Name) and node.id == var:
        return 0
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) \
            and isinstance(node.right, ast.Constant) and isinstance(node.right.value, int):
        inner = _offset(node.left, var)
        if inner is not None:
            return inner + (node.right.value if isinstance(node.op, ast.Add) else -node.right.value)
    return None


def _membership(test: ast.AST, var: Optional[str]) -> Tuple[Optional[int], Optional[ast.AST]]:
    """(d, the rest of the test) for ``var + d in self.layers_to_capture [and rest]``; (None, test) otherwise."""
    def member(node: ast.AST) -> Optional[int]:
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) \
                and _self_path(node.comparators[0]) == "layers_to_capture":
            return _offset(node.left, var)
        return None
    d = member(test)
    if d is not None:
        return d, None
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for k, value in enumerate(test.values):
            d = member(value)
            if d is not None:
                rest = test.values[:k] + test.values[k + 1:]
                return d, (rest[0] if len(rest) == 1 else ast.BoolOp(op=ast.And(), values=rest))
    return None, test


def _unparse(node: ast.AST) -> str:
    return ast.unparse(node) if hasattr(ast, "unparse") else ast.dump(node)


# ---- the decoder layer and what it hands the list to (native capture) --------------

# Provenance of a value inside the capture code: (what, cloned).  "pre": the residual as
# the layer received it; "input": the residual the layer's input preparation returns
# (state i); "normed": the normalised attention input; "other": anything else.
_Prov = FrozenSet[Tuple[str, bool]]
_OTHER: _Prov = frozenset({("other", False)})


def _prov(expr: ast.AST, env: Dict[str, _Prov]) -> _Prov:
    if isinstance(expr, ast.Name):
        return env.get(expr.id, _OTHER)
    if isinstance(expr, ast.Attribute) and expr.attr == "residual" and isinstance(expr.value, ast.Name):
        return env.get(expr.value.id, _OTHER)
    if isinstance(expr, ast.IfExp):
        return _prov(expr.body, env) | _prov(expr.orelse, env)
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "clone":
            return frozenset((what, True) for what, _c in _prov(expr.func.value, env))
        # A communication (gather, move) hands on the rows it is given.
        found: set = set()
        for arg in list(expr.args) + [k.value for k in expr.keywords]:
            found |= {p for p in _prov(arg, env) if p[0] != "other"}
        return frozenset(found) if found else _OTHER
    return _OTHER


def _is_prepare(call: ast.Call, callables: Dict[str, List[str]]) -> bool:
    """A call of the layer's input preparation (prepare_attn, _prepare, _prepare_input)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "")
    return "prepare" in name and (isinstance(func, ast.Attribute) or name in callables)


def follow_capture(funcs: Dict[str, ast.FunctionDef], qualname: str, key: str,
                   depth: int = 0) -> Optional[List[Tuple[_Prov, bool]]]:
    """What ``qualname`` appends to the capture list it is handed as keyword ``key``.

    One (provenance, copies) per append, in order, following the list through the
    calls it is passed on to; None where a function on the way is not in the files.
    ``copies``: the accumulator's ``capture()`` copies what it is not told it owns.
    """
    fn = funcs.get(qualname)
    if fn is None or depth > 6:
        return None
    cls = qualname.rsplit(".", 1)[0]
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    param: Optional[str] = key if key in names else None
    kwdict = fn.args.kwarg.arg if (param is None and fn.args.kwarg is not None) else None
    if param is None and kwdict is None:
        return []
    env: Dict[str, _Prov] = {n: frozenset({("pre", False)}) for n in ("residual", "stream") if n in names}
    callables: Dict[str, List[str]] = {}
    out: List[Tuple[_Prov, bool]] = []
    holds = [True]  # False once the parameter's name is rebound: from there on it is not the list

    def callee(call: ast.Call, passed: str) -> Optional[List[str]]:
        func = call.func
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and func.value.id == "self":
                return ["%s.%s" % (cls, func.attr)]
            owner = _self_path(func.value)
            if owner in CAPTURE_DELEGATES:
                return ["%s.%s" % (CAPTURE_DELEGATES[owner], func.attr)]
            return None
        if isinstance(func, ast.Name) and func.id in callables:
            named = [q for q in callables[func.id] if q in funcs and passed in
                     [a.arg for a in funcs[q].args.args + funcs[q].args.kwonlyargs]]
            return named or [q for q in callables[func.id] if q in funcs and funcs[q].args.kwarg is not None]
        return None

    def forwards(node: ast.AST) -> None:
        """Follow every call in ``node`` that passes the list on."""
        for call in [n for n in ast.walk(node) if isinstance(n, ast.Call)] if holds[0] else []:
            for kw in call.keywords:
                if kw.arg is not None and param is not None and isinstance(kw.value, ast.Name) and kw.value.id == param:
                    passed = kw.arg
                elif kw.arg is None and kwdict is not None and isinstance(kw.value, ast.Name) and kw.value.id == kwdict:
                    passed = key
                else:
                    continue
                for target in callee(call, passed) or [None]:
                    got = follow_capture(funcs, target, passed, depth + 1) if target else None
                    if got is None:
                        raise LookupError("%s passes the capture list to %s, not found" % (qualname, _unparse(call.func)))
                    out.extend(got)

    def walk(stmts: Sequence[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                test = stmt.test
                given = isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                    and test.left.id == param and isinstance(test.comparators[0], ast.Constant) \
                    and test.comparators[0].value is None
                if given and isinstance(test.ops[0], ast.IsNot):
                    walk(stmt.body)
                elif given and isinstance(test.ops[0], ast.Is):
                    walk(stmt.orelse)
                else:
                    before = dict(env)
                    walk(stmt.body)
                    taken = dict(env)
                    env.clear()
                    env.update(before)
                    walk(stmt.orelse)
                    for name, prov in taken.items():
                        env[name] = env.get(name, frozenset()) | prov
                continue
            if isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
                walk(stmt.body)
                walk(getattr(stmt, "finalbody", []))
                continue
            if param is not None and any(isinstance(t, ast.Name) and t.id == param for node in ast.walk(stmt)
                                         if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                                         for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
                holds[0] = False
            if holds[0] and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                    and isinstance(stmt.value.func, ast.Attribute) and isinstance(stmt.value.func.value, ast.Name) \
                    and stmt.value.func.value.id == param and stmt.value.func.attr in ("append", "capture"):
                args = stmt.value.args
                out.append((_prov(args[0], env) if args else _OTHER, stmt.value.func.attr == "capture"))
                continue
            forwards(stmt)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
                if isinstance(value, ast.Call) and _is_prepare(value, callables) and isinstance(target, ast.Tuple) \
                        and len(target.elts) >= 2:
                    for elt, what in zip(target.elts[:2], ("normed", "input")):
                        if isinstance(elt, ast.Name):
                            env[elt.id] = frozenset({(what, False)})
                elif isinstance(target, ast.Name):
                    methods = [n for n in ast.walk(value) if isinstance(n, ast.Attribute)
                               and isinstance(n.value, ast.Name) and n.value.id == "self"
                               and "%s.%s" % (cls, n.attr) in funcs]
                    if isinstance(value, (ast.IfExp, ast.Attribute)) and methods and not isinstance(value, ast.Call):
                        callables[target.id] = ["%s.%s" % (cls, m.attr) for m in methods]
                    else:
                        env[target.id] = _prov(value, env)

    try:
        walk(fn.body)
    except LookupError:
        return None
    return out


# ---- DeepseekV2Model.forward ---------------------------------------------------------

@dataclass
class _Walk:
    """The state of one way through DeepseekV2Model.forward."""

    phase: str = "before"            # "before", "loop", "after" the layer loop
    loop_var: Optional[str] = None
    layer_called: bool = False
    before: List[str] = field(default_factory=list)
    # Per-layer captures: (d, after the layer call, what); d None: every layer.
    layer: List[Tuple[Optional[int], bool, str]] = field(default_factory=list)
    after: List[str] = field(default_factory=list)
    accumulator: Optional[str] = None  # "list", "packer"
    held: Dict[str, str] = field(default_factory=dict)  # local names holding a capture
    problems: List[str] = field(default_factory=list)
    loops: int = 0

    def key(self) -> Tuple[Any, ...]:
        return (self.phase, tuple(self.before), tuple(self.layer), tuple(self.after), self.accumulator)


def _accumulator_name(fn: ast.FunctionDef) -> str:
    """The list the forward returns beside hidden_states (``aux_hidden_states``)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2:
            second = node.value.elts[1]
            if isinstance(second, ast.Call) and isinstance(second.func, ast.Attribute):
                second = second.func.value  # aux_hidden_states.finalize()
            if isinstance(second, ast.Name):
                return second.id
    return "aux_hidden_states"


def _layer_names(fn: ast.FunctionDef) -> Dict[str, ast.AST]:
    """Local names bound to ``self.layers[...]``, with the index they take."""
    out: Dict[str, ast.AST] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Subscript) and _self_path(node.value.value) == "layers":
            out[node.targets[0].id] = node.value.slice
    return out


def _layer_call(node: ast.AST, layers: Dict[str, ast.AST]) -> Optional[Tuple[ast.Call, ast.AST]]:
    """The call of a decoder layer in ``node``, with the index of the layer, or None."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Name) and call.func.id in layers:
            return call, layers[call.func.id]
        if isinstance(call.func, ast.Subscript) and _self_path(call.func.value) == "layers":
            return call, call.func.slice
    return None


def _is_stream_sum(expr: ast.AST) -> bool:
    """``hidden_states + residual``: the residual stream, whole."""
    return isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add) \
        and {getattr(expr.left, "id", None), getattr(expr.right, "id", None)} == {"hidden_states", "residual"}


class ForwardReader:
    """Reads DeepseekV2Model.forward for one set of model flags (see the section comment)."""

    def __init__(self, fn: ast.FunctionDef, known: typing.Mapping[str, bool]) -> None:
        self.fn = fn
        self.known = known
        self.acc = _accumulator_name(fn)
        self.layers = _layer_names(fn)

    def read(self) -> _Walk:
        walk = _Walk()
        return self.walk(self.fn.body, walk, None)

    # -- statements

    def walk(self, stmts: Sequence[ast.stmt], st: _Walk, member: Optional[int]) -> _Walk:
        for stmt in stmts:
            st = self.statement(stmt, st, member)
        return st

    def statement(self, stmt: ast.stmt, st: _Walk, member: Optional[int]) -> _Walk:
        if isinstance(stmt, ast.If):
            d, rest = _membership(stmt.test, st.loop_var) if st.phase == "loop" else (None, stmt.test)
            if d is not None:
                if rest is None or _truth(rest, self.known) is not False:
                    st = self.walk(stmt.body, st, d)
                return self.walk(stmt.orelse, st, member)
            truth = _truth(stmt.test, self.known)
            if truth is True:
                return self.walk(stmt.body, st, member)
            if truth is False:
                return self.walk(stmt.orelse, st, member)
            taken = self.walk(stmt.body, copy.deepcopy(st), member)
            other = self.walk(stmt.orelse, copy.deepcopy(st), member)
            if taken.key() != other.key():
                taken.problems.append("what is captured depends on `%s`, which the double does not model"
                                      % _unparse(stmt.test))
            for name, label in other.held.items():
                taken.held.setdefault(name, label)
            return taken
        if isinstance(stmt, ast.For) and _layer_call(stmt, self.layers) is not None:
            st.loops += 1
            if st.phase != "before":
                st.problems.append("a second loop over the decoder layers")
                return self.walk(stmt.body, st, member)
            st.phase, st.loop_var, st.layer_called = "loop", getattr(stmt.target, "id", None), False
            st = self.walk(stmt.body, st, None)
            st.phase, st.loop_var = "after", None
            return self.walk(stmt.orelse, st, member)
        if isinstance(stmt, (ast.For, ast.While, ast.With, ast.AsyncWith)):
            return self.walk(stmt.body, st, member)
        if isinstance(stmt, ast.Try):
            return self.walk(list(stmt.body) + list(stmt.finalbody), st, member)
        self.simple(stmt, st, member)
        return st

    def simple(self, stmt: ast.stmt, st: _Walk, member: Optional[int]) -> None:
        if st.phase == "loop" and not st.layer_called:
            found = _layer_call(stmt, self.layers)
            if found is not None:
                self.layer_call(found[0], found[1], st)
                st.layer_called = True
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name, value = stmt.targets[0].id, stmt.value
            if name == self.acc:
                self.initialise(value, st)
            elif st.phase == "loop" and any(_is_stream_sum(n) for n in ast.walk(value)):
                st.held[name] = "sum"  # gathered across ranks: the same rows
            elif st.phase == "before":
                label = self.what(value, st)
                if not label.startswith(UNRECOGNISED):
                    st.held[name] = label
            return
        for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call)):
            func = call.func
            if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == self.acc):
                continue
            if func.attr in ("append", "capture") and call.args:
                self.append(call.args[0], st, member)
            elif func.attr == "pop" and st.phase == "before" and st.before:
                st.before.pop()
            elif func.attr not in ("finalize",):
                st.problems.append("%s.%s() in DeepseekV2Model.forward" % (self.acc, func.attr))

    def initialise(self, value: ast.AST, st: _Walk) -> None:
        if st.phase != "before":
            st.problems.append("%s is reset %s the layer loop" % (self.acc, "in" if st.phase == "loop" else "after"))
        func = value.func if isinstance(value, ast.Call) else None
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        owner = getattr(func.value, "id", None) if isinstance(func, ast.Attribute) else None
        if isinstance(value, ast.List) and not value.elts:
            st.accumulator = "list"
        elif name in COPYING_ACCUMULATORS or owner in COPYING_ACCUMULATORS:
            st.accumulator = "packer"
        else:
            st.accumulator = None
            st.problems.append("%s = %s is no capture list the double knows" % (self.acc, _unparse(value)))
        st.before = []

    def what(self, expr: ast.AST, st: _Walk) -> str:
        """What an append in the current phase puts in the list."""
        if isinstance(expr, ast.Name) and expr.id in st.held:
            return st.held[expr.id]
        if st.phase == "loop":
            return "sum" if _is_stream_sum(expr) else "%s(%s)" % (UNRECOGNISED, _unparse(expr))
        base, cloned = expr, False
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "clone" \
                and not expr.args:
            base, cloned = expr.func.value, True
        if isinstance(base, ast.Name) and base.id == "hidden_states":
            if st.phase == "before":
                return EMBED if cloned else "embed_overwritten_in_place"
            return "hidden_states_after_the_layer_loop"
        return "%s(%s)" % (UNRECOGNISED, _unparse(expr))

    def append(self, expr: ast.AST, st: _Walk, member: Optional[int]) -> None:
        if st.accumulator is None and not any("no capture list" in p for p in st.problems):
            st.problems.append("%s appended to before it is initialised" % self.acc)
        label = self.what(expr, st)
        if st.phase == "before":
            st.before.append(label)
        elif st.phase == "after":
            st.after.append(label)
        else:
            st.layer.append((member, st.layer_called, label))

    def layer_call(self, call: ast.Call, index: ast.AST, st: _Walk) -> None:
        if _offset(index, st.loop_var) != 0:
            st.problems.append("the layer loop calls self.layers[%s]" % _unparse(index))
        for kw in call.keywords:
            if kw.arg != LAYER_CAPTURE_KEYWORD:
                continue
            value = kw.value
            if isinstance(value, ast.Constant) and value.value is None:
                return
            if isinstance(value, ast.Name) and value.id == self.acc:
                st.layer.append((None, False, "native"))
                return
            if isinstance(value, ast.IfExp) and isinstance(value.body, ast.Name) and value.body.id == self.acc \
                    and isinstance(value.orelse, ast.Constant) and value.orelse.value is None:
                d, rest = _membership(value.test, st.loop_var)
                if d is not None and rest is None:
                    st.layer.append((d, False, "native"))
                    return
            st.problems.append("%s=%s" % (LAYER_CAPTURE_KEYWORD, _unparse(value)))


@dataclass(frozen=True)
class ForwardCapture:
    """What DeepseekV2Model.forward captures for one set of model flags."""

    style: str  # "loop", "native", "unknown"
    walk: _Walk
    native: Optional[List[Tuple[_Prov, bool]]]  # what the decoder layer appends (native), None if not followed
    uninitialised: Tuple[str, ...]
    notes: Tuple[str, ...]


def init_attributes(funcs: Dict[str, ast.FunctionDef]) -> FrozenSet[str]:
    """The attributes DeepseekV2Model.__init__ sets on self."""
    init = funcs.get("DeepseekV2Model.__init__")
    out = set()
    for node in ast.walk(init) if init is not None else []:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for elt in target.elts if isinstance(target, ast.Tuple) else [target]:
                    path = _self_path(elt)
                    if path is not None and "." not in path:
                        out.add(path)
    return frozenset(out)


def read_capture(sources: typing.Mapping[str, Optional[str]], model_flags: typing.Mapping[str, bool]) -> ForwardCapture:
    """Read the installed capture code for the flags set_eagle3_layers_to_capture left on the model."""
    funcs = functions_of(*(sources.get(rel) for rel in CAPTURE_FILES))
    fn = funcs.get("DeepseekV2Model.forward")
    if fn is None:
        return ForwardCapture("unknown", _Walk(), None, (), ("deepseek_v2.py has no DeepseekV2Model.forward",))
    known = dict(RANK_FACTS)
    known.update(model_flags)
    walk = ForwardReader(fn, known).read()
    notes = list(walk.problems)
    if walk.loops != 1:
        notes.append("DeepseekV2Model.forward has %d layer loops" % walk.loops)
    native: Optional[List[Tuple[_Prov, bool]]] = None
    kinds = {what for _d, _a, what in walk.layer}
    style = "unknown"
    if "native" in kinds:
        native = follow_capture(funcs, DECODER_LAYER_FORWARD, LAYER_CAPTURE_KEYWORD)
        if native is None:
            notes.append("the decoder layer's capture code is not in %s" % ", ".join(CAPTURE_FILES[1:]))
        else:
            style = "native"
    elif "sum" in kinds:
        style = "loop"
    read = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self"}
    uninitialised = tuple(sorted(f for f in model_flags if f in read and f not in init_attributes(funcs)))
    return ForwardCapture(style, walk, native, uninitialised, tuple(notes))


def forward_style(sources: typing.Mapping[str, Optional[str]]) -> str:
    """How the installed DeepseekV2 forward captures hidden states, read from its structure.

    "loop": before layer i it appends ``hidden_states + residual`` (up to
    0.5.13.post1); index 0 would add ``None`` and raise.  "native": the
    decoder layer captures the residual it prepares (0.5.14 and later), index 0
    is the embedding output.  "unknown": neither; the double will not guess.
    """
    return read_capture(sources, {}).style


def _native_label(state: int, prov: _Prov, copies: bool, layer: int) -> str:
    whats = {what for what, _c in prov}
    if whats == {"input"}:
        if copies or any(cloned for _w, cloned in prov):
            return capture_label(state)
        return capture_label(state) + "_overwritten_in_place"
    if "pre" in whats:
        return "residual_before_the_input_norm_of_layer_%d" % layer
    return "%s(in layer %d)" % (UNRECOGNISED, layer)


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
    # False when the capture code was read but does not hand the draft its states in the
    # order it was trained on (concatenated shallowest first), or could not be read whole.
    in_order: bool = True

    @property
    def matches_training(self) -> bool:
        """Decode dominates generation, so decode's inputs decide acceptance."""
        return self.fatal is None and self.in_order and set(self.decode) == set(self.trained)


def _depth(label: str) -> int:
    """Sort key: embedding first, then layers by depth, anything odd last.

    A label with a suffix ("L2_overwritten_in_place") sorts where its state would.
    """
    if label == EMBED or label.startswith((EMBED + "_", "pp_proxy")):
        return -1
    match = re.match(r"L(\d+)(?:_|$)", label)
    return int(match.group(1)) if match else 10**6


def _depth_order(labels: Sequence[str]) -> Tuple[str, ...]:
    """Captured tensors in the order they are concatenated (shallowest first)."""
    return tuple(sorted(set(labels), key=_depth))


def captured_states(
    sources: typing.Mapping[str, Optional[str]],
    layer_ids: Optional[List[Any]],
    num_layers: int,
    pp_size: int,
) -> Tuple[Tuple[str, ...], List[str], Optional[str], bool]:
    """Tensors one forward pass hands the draft for these ids: (labels, notes, fatal, in order).

    ``sources``: the capture files (CAPTURE_FILES) as installed, None where absent.
    The ids go through the installed set_eagle3_layers_to_capture (executed, see
    layer_bookkeeping); what the forward does with the result is read from its
    structure (read_capture).  "In order" is False when the appends do not follow
    the depth order the draft's features were concatenated in, or the capture code
    holds something the double cannot read.
    """
    notes: List[str] = []
    model_source = sources.get(MODEL_FILE) or ""
    method = extract_method(model_source, "DeepseekV2ForCausalLM", "set_eagle3_layers_to_capture")
    if method is None:
        return (), ["deepseek_v2.py has no set_eagle3_layers_to_capture"], "EAGLE3 unsupported for DeepseekV2 here", True
    try:
        book = layer_bookkeeping(method, layer_ids, num_layers)
    except Exception as exc:  # the installed method is foreign code: any failure is a finding
        return (), ["set_eagle3_layers_to_capture(%r) raised %r" % (layer_ids, exc)], "set_eagle3_layers_to_capture raised", True
    notes.append("layers_to_capture=%s flags=%s for ids %s" % (list(book.layers_to_capture), sorted(book.true_flags), layer_ids))
    reading = read_capture(sources, book.flags)
    walk = reading.walk
    notes += list(reading.notes)
    fatal = None
    for name in reading.uninitialised:
        fatal = fatal or ("AttributeError: 'DeepseekV2Model' object has no attribute %r (DeepseekV2Model.forward "
                          "reads it, __init__ never sets it: any forward before set_eagle3_layers_to_capture "
                          "raises)" % name)
    labels: List[str] = []
    for label in walk.before:
        if label == EMBED:
            labels.append(EMBED if pp_size == 1 else "pp_proxy_hidden_states")
            if pp_size > 1:
                notes.append("pp_size > 1: the embedding lives on the first rank, capture on the last")
        else:
            labels.append(label)
            if label == "embed_overwritten_in_place":
                notes.append("embedding appended without .clone(): layer 0 overwrites it in place")
    wanted = set(book.layers_to_capture)
    fired = set()
    for i in range(num_layers):
        for d, after, what in walk.layer:
            if d is not None and i + d not in wanted:
                continue
            if d is not None:
                fired.add(i + d)
            state = i + (1 if after else 0)
            if what == "sum" and state == 0:
                fatal = fatal or "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType' (capture index 0, residual is None)"
            elif what == "sum":
                labels.append(capture_label(state))
            elif what == "native" and state == 0 and pp_size > 1:
                labels.append("pp_proxy_hidden_states")
            elif what == "native":
                for prov, copies in reading.native or []:
                    if i == 0 and ("pre", False) in prov:
                        fatal = fatal or ("TypeError: the capture at layer 0 appends None (the residual before "
                                          "layer 0's input norm, capture index %d)" % (i + (d or 0)))
                        continue
                    labels.append(_native_label(state, prov, copies or walk.accumulator == "packer", i))
            else:
                labels.append(what)
    if any(d is not None for d, _a, _w in walk.layer):
        for index in book.layers_to_capture:
            if index not in fired:
                notes.append("capture index %d outside 0..%d: never captured" % (index, num_layers - 1))
    elif not walk.layer:
        notes.append("DeepseekV2Model.forward captures in no decoder layer")
    if walk.after:
        notes.append("appended after the layer loop: %s" % walk.after)
    labels += walk.after
    if walk.accumulator == "packer" and labels and len(labels) != len(book.layers_to_capture):
        fatal = fatal or "AuxHiddenStatePacker: captured %d of %d aux hidden states" % (
            len(labels), len(book.layers_to_capture))
    in_order = labels == sorted(labels, key=_depth) and not walk.problems and walk.loops == 1
    if labels != sorted(labels, key=_depth):
        notes.append("concatenated out of depth order: %s" % labels)
    # Not deduplicated: a state captured twice is one more input than the draft's fc takes.
    return tuple(sorted(labels, key=_depth)), notes, fatal, in_order


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

    None when this python has no torch or no harness was named: the
    structural reading (read_capture) then judges.  The harness runs the installed
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
    sources = {rel: read_text(os.path.join(srt, rel)) for rel in CAPTURE_FILES}
    style = forward_style(sources)
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
    prefill, more, fatal, in_order = captured_states(sources, layer_ids, num_layers, pp_size)
    notes += more
    decode = prefill
    graph_runner = read_text(os.path.join(srt, "model_executor", "cuda_graph_runner.py"))
    if not disable_cuda_graph and graph_capture_resets_ids(graph_runner):
        decode, more, _, graph_order = captured_states(sources, None, num_layers, pp_size)
        in_order = in_order and graph_order
        notes.append("CUDA graphs captured with default ids (no-argument set_eagle3_layers_to_capture()); decode sees %s" % (list(decode),))
    if fatal is None and len(prefill) != len(trained_t):
        fatal = "RuntimeError: draft fc expects %d hidden states, got %d" % (len(trained_t), len(prefill))
    return Wiring(prefill, decode, trained_t, fatal, tuple(notes), in_order)


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


def make_server(host: str, port: int, state: Optional[DoubleState] = None, handler: type = None,
                **attributes: Any) -> ThreadingHTTPServer:
    """Bind exactly the requested address (IPv6 literal hosts included); ``handler`` (default the API's)
    reads ``state`` and ``attributes`` from the server."""

    class _Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True

    server = _Server((host, port), handler or Handler)
    server.state = state  # type: ignore[attr-defined]
    for name, value in attributes.items():
        setattr(server, name, value)
    return server


# --------------------------------------------------------------------------
# Several nodes (--nnodes N --node-rank R --dist-init-addr HOST:PORT)
# --------------------------------------------------------------------------
#
# As SGLang (0.5.9 engine.py:1040, 0.5.12.post1 and 0.5.14 engine.py:812/823): every node starts
# its schedulers, which meet at the leader's --dist-init-addr (torch.distributed's store, on rank
# 0) and only then load the model; a node of rank >= 1 runs no tokenizer and no API, and once its
# schedulers are ready serves launch_dummy_health_check_server (utils/common.py): /ping, /health
# and /health_generate, always 200, /metrics with --enable-metrics, nothing else. When one rank
# ends, the others' collectives fail and they exit. Here: the leader listens on the address, each
# other rank connects and sends its settings, and the leader answers once every rank has joined
# with the settings it runs (a rank with others fails the whole replica, as a mismatched world or
# model does in NCCL); the connections then stay open, and a node whose peer goes away exits 1.

# A node's own settings: where it listens, its rank, its keys (only the leader serves the API).
NODE_OWN_ARGS = frozenset(("node_rank", "host", "port", "api_key", "admin_api_key", "log_level", "config"))
RENDEZVOUS_POLL = 0.5


def replica_problem(args: argparse.Namespace) -> str:
    """Why SGLang would refuse these multi-node flags at start ("" when it would not)."""
    if args.nnodes < 1:
        return "nnodes must be at least 1, got %d" % args.nnodes
    if not 0 <= args.node_rank < args.nnodes:
        return "node_rank %d is not a rank of %d node(s)" % (args.node_rank, args.nnodes)
    if (args.tp_size * args.pp_size) % args.nnodes:
        # check_server_args (0.5.9 server_args.py:5134).
        return "tp_size must be divisible by number of nodes"
    if args.nnodes > 1 and args.dist_init_addr is not None and not _split_addr(args.dist_init_addr):
        return "please provide --dist-init-addr as host:port of head node"
    return ""


def _split_addr(addr: str) -> Optional[Tuple[str, int]]:
    host, sep, port = addr.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit():
        return None
    return host, int(port)


def node_settings(args: argparse.Namespace, version: str, params: SpecParams) -> Dict[str, Any]:
    """What every node of one replica must run alike: its flags but its own, its release, what it resolved."""
    settings = {k: v for k, v in sorted(vars(args).items()) if k not in NODE_OWN_ARGS}
    settings["sglang_version"] = version
    settings["speculative_params"] = [params.num_steps, params.eagle_topk, params.num_draft_tokens]
    return settings


def settings_differences(mine: Dict[str, Any], theirs: Dict[str, Any]) -> List[str]:
    return ["%s %r (rank 0: %r)" % (k, theirs.get(k), mine.get(k))
            for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]


def _send_line(conn: socket.socket, doc: Dict[str, Any]) -> None:
    try:
        conn.sendall((json.dumps(doc) + "\n").encode())
    except OSError:
        pass


def _read_line(conn: socket.socket, stop: threading.Event) -> Optional[Dict[str, Any]]:
    """One JSON line, None when the peer closed or ``stop`` was set."""
    data = b""
    conn.settimeout(RENDEZVOUS_POLL)
    while b"\n" not in data:
        if stop.is_set():
            return None
        try:
            chunk = conn.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    try:
        doc = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


class Replica:
    """This node's part of the rendezvous, and its peers once met."""

    def __init__(self, args: argparse.Namespace, settings: Dict[str, Any], matches: bool) -> None:
        self.args = args
        self.settings = settings
        self.matches = matches
        self.peers: List[socket.socket] = []
        # Whether every rank's capture matches the draft's training (the leader's answer).
        self.all_match = matches
        self.lost = threading.Event()
        self.why_lost = ""

    def meet(self, stop: threading.Event) -> str:
        """Block until every rank has joined; "" then, else why the replica cannot start."""
        addr = _split_addr(self.args.dist_init_addr) if self.args.dist_init_addr else None
        if addr is None:
            # Without the leader's address each node waits on its own loopback: it never meets the others.
            LOG.warning("no --dist-init-addr: node rank %d waits for ranks that cannot reach it",
                        self.args.node_rank)
            stop.wait()
            return ""
        return self._lead(addr, stop) if self.args.node_rank == 0 else self._join(addr, stop)

    def _lead(self, addr: Tuple[str, int], stop: threading.Event) -> str:
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        try:
            listener = socket.create_server(addr, family=family)
        except OSError as exc:
            return "cannot bind the dist init address %s:%d: %s" % (addr[0], addr[1], exc)
        listener.settimeout(RENDEZVOUS_POLL)
        ranks: List[int] = []
        conns: List[socket.socket] = []
        problem = ""
        LOG.info("rank 0 of %d: waiting for %d rank(s) at %s:%d", self.args.nnodes, self.args.nnodes - 1, *addr)
        try:
            while len(ranks) < self.args.nnodes - 1 and not stop.is_set() and not problem:
                try:
                    conn, _ = listener.accept()
                except socket.timeout:
                    continue
                conns.append(conn)
                hello = _read_line(conn, stop)
                rank = hello.get("rank") if hello else None
                if not isinstance(rank, int) or not 1 <= rank < self.args.nnodes:
                    problem = "a node joined with rank %r, not one of 1..%d" % (rank, self.args.nnodes - 1)
                elif rank in ranks:
                    problem = "rank %d joined twice" % rank
                else:
                    diff = settings_differences(self.settings, hello.get("settings") or {})
                    if diff:
                        problem = "rank %d runs other settings than rank 0: %s" % (rank, "; ".join(diff))
                    else:
                        ranks.append(rank)
                        self.all_match = self.all_match and bool(hello.get("matches"))
                        LOG.info("rank %d joined (%d of %d)", rank, len(ranks) + 1, self.args.nnodes)
        finally:
            listener.close()
        for conn in conns:
            _send_line(conn, {"error": problem} if problem else {"ok": True, "all_match": self.all_match})
        if problem or stop.is_set():
            for conn in conns:
                conn.close()
            return problem
        self.peers = conns
        return ""

    def _join(self, addr: Tuple[str, int], stop: threading.Event) -> str:
        conn = None
        LOG.info("rank %d of %d: joining %s:%d", self.args.node_rank, self.args.nnodes, *addr)
        while conn is None and not stop.is_set():
            try:
                conn = socket.create_connection(addr, timeout=2)
            except OSError:
                stop.wait(RENDEZVOUS_POLL)
        if conn is None:
            return ""
        _send_line(conn, {"rank": self.args.node_rank, "settings": self.settings, "matches": self.matches})
        answer = _read_line(conn, stop)
        if answer is None:
            conn.close()
            return "" if stop.is_set() else "the leader at %s:%d went away before every rank had joined" % addr
        if answer.get("error"):
            conn.close()
            return "the replica cannot start: %s" % answer["error"]
        self.all_match = bool(answer.get("all_match"))
        self.peers = [conn]
        return ""

    def watch(self) -> None:
        """From now on, a peer that goes away ends this node."""
        for conn in self.peers:
            threading.Thread(target=self._watch_one, args=(conn,), name="peer", daemon=True).start()

    def _watch_one(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        if not self.lost.is_set():
            self.why_lost = "a peer rank went away: its collectives failed"
            self.lost.set()

    def close(self) -> None:
        for conn in self.peers:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


class DummyHandler(BaseHTTPRequestHandler):
    """launch_dummy_health_check_server: what a node of rank >= 1 serves once its schedulers are ready."""

    server_version = "sglang-test-double"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        LOG.info("%s - %s", self.address_string(), fmt % args)

    def _send(self, status: int, body: str = "", content_type: str = "application/json") -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        path = self.path.split("?", 1)[0]
        if path in ("/ping", "/health", "/health_generate"):
            self._send(200)
        elif path == "/metrics" and self.server.enable_metrics:  # type: ignore[attr-defined]
            # A rank >= 1's schedulers are not tp rank 0: they report no server metrics.
            self._send(200, "", "text/plain; version=0.0.4")
        else:
            self._send(404, json.dumps({"detail": "Not Found"}))

    def do_POST(self) -> None:  # noqa: N802
        self._send(404, json.dumps({"detail": "Not Found"}))


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


def testbed_mark_problem(environ: typing.Mapping[str, str]) -> str:
    """Why this host is not a marked test-bed container ("" when it is): the collection's one rule,
    loaded from beside this file (or the checkout's plugins/module_utils)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for place in MARK_RULE_PLACES:
        path = os.path.normpath(os.path.join(here, place))
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_sglang_testbed_mark", path)
            rule = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(rule)
            return rule.mark_problem(environ.get(ENV_MARK_ROOT) or "")
    return "the mark's rule (_testbed.py) is neither beside the double nor in a checkout"


def configure_logger(args: argparse.Namespace, environ: typing.Mapping[str, str]) -> str:
    """SGLang's configure_logger (0.5.9, 0.5.12.post1 and 0.5.14 ``srt/utils/common.py``): the dictConfig of the
    JSON file SGLANG_LOGGING_CONFIG_PATH names, instead of --log-level, and an exception when that file does not
    exist; else --log-level's level and SGLang's format. Returns why the server would die ("" when it would not)."""
    path = environ.get(ENV_LOGGING_CONFIG)
    if path:
        if not os.path.exists(path):
            return "Exception: Setting SGLANG_LOGGING_CONFIG_PATH from env with %s but it does not exist!" % path
        try:
            with open(path, encoding="utf-8") as fh:
                logging.config.dictConfig(json.load(fh))
        except (OSError, ValueError, TypeError, AttributeError, ImportError) as exc:
            return "%s: %s" % (type(exc).__name__, exc)
        return ""
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    logging.basicConfig(stream=sys.stdout, level=level, format="[%(asctime)s] %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", force=True)
    return ""


def log_server_args(args: argparse.Namespace, api_key: Optional[str]) -> None:
    """``logger.info(f"{server_args=}")`` as the release does once the logger is configured (0.5.9
    ``srt/entrypoints/engine.py`` line 1031, 0.5.12.post1 line 773, 0.5.14 line 784), on the engine's own
    logger: ServerArgs is a plain dataclass, so its repr holds every field, the keys included."""
    fields = dict(vars(args))
    fields.pop("config", None)
    fields["api_key"] = api_key
    body = ", ".join("%s=%r" % (name, value) for name, value in fields.items())
    logging.getLogger(ENGINE_LOGGER).info("server_args=ServerArgs(%s)", body)


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
    problem = configure_logger(args, environ)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    LOG.warning("THIS IS THE SGLANG TEST DOUBLE, NOT SGLANG: no model is loaded")
    unmarked = testbed_mark_problem(environ)
    if unmarked:
        # A double that reached a real host must never serve there, let alone pass a gate.
        LOG.error("refusing to start: this host is not a test-bed container (%s); the test double runs only "
                  "on the containers the test bed creates", unmarked)
        return 1

    if environ.get(ENV_EXIT_AT_START) == "1":
        LOG.error("%s=1: exiting at once, as a server whose launch fails", ENV_EXIT_AT_START)
        return 1
    delay = env_float(environ, ENV_STARTUP_DELAY, DEFAULT_STARTUP_DELAY)
    warmup = env_float(environ, ENV_WARMUP_DELAY, DEFAULT_WARMUP_DELAY)
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
    problem = replica_problem(args)
    if problem:
        LOG.error("server args rejected: %s", problem)
        return 1
    replica = Replica(args, node_settings(args, version, params), wiring.matches_training) \
        if args.nnodes > 1 else None
    follower = args.node_rank >= 1
    state = DoubleState(args, params, version, wiring, accept, fail_health, degrade_after, degraded)
    state.api_key = environ.get(ENV_API_KEY) or args.api_key or None
    log_server_args(args, state.api_key)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    server: Optional[ThreadingHTTPServer] = None
    # No rank listens before its model is loaded (below): SGLang starts uvicorn only once its
    # schedulers are up, so the port is free for the whole load, and for as long as a server
    # crash-loops (0.5.9 http_server.launch_server; the dummy health server of a rank >= 1 likewise).
    LOG.info("loading the model (startup delay %.1fs): nothing listens on %s:%s until it is loaded",
             delay, args.host, args.port)

    def lost() -> bool:
        return replica is not None and replica.lost.is_set()

    def wait(seconds: Optional[float]) -> bool:
        """Wait ``seconds`` (None: for ever); True when stopped or a peer rank went away first."""
        if replica is None:
            # No peer to watch: sleep until the signal (a server that serves for minutes wakes for nothing).
            return stop.wait(seconds)
        deadline = None if seconds is None else time.monotonic() + max(0.0, seconds)
        while not lost():
            left = RENDEZVOUS_POLL if deadline is None else min(RENDEZVOUS_POLL, deadline - time.monotonic())
            if left <= 0:
                return False
            if stop.wait(left):
                return True
        return True

    code = 0
    if replica is not None:
        problem = replica.meet(stop)
        if problem:
            LOG.error("%s", problem)
            code = 1
        elif not stop.is_set():
            replica.watch()
            LOG.info("all %d ranks joined at %s", args.nnodes, args.dist_init_addr)
            if not follower and accept is not None and not replica.all_match:
                accept = expected_accept_length(False, params)
                state.accept_length = accept
                LOG.info("a rank's capture does not feed the draft what it was trained on: expected accept "
                         "length %.4f", accept)
    # The model load, after the ranks met.
    if code == 0 and not stop.is_set() and not wait(delay):
        if not follower:
            try:
                server = make_server(args.host, args.port, state)
            except OSError as exc:
                # uvicorn's own words when the port is taken; its startup then exits 1 (SystemExit),
                # and launch_server.py's finally ends the children, not itself.
                LOG.error("[Errno %s] error while attempting to bind on address ('%s', %s): %s",
                          exc.errno, args.host, args.port, (exc.strerror or str(exc)).lower())
                return 1
            threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
            LOG.info("Uvicorn running on http://%s:%s (Press CTRL+C to quit)", args.host, args.port)
        # The warm-up: /model_info polled, then one generation; /health* answer 503 meanwhile
        # (a stop or a lost peer meanwhile ends it, as below).
        ended_in_warmup = not follower and wait(warmup)
        if ended_in_warmup:
            LOG.info("stopped during the warm-up")
        elif wiring.fatal:
            # The warm-up request fails in the model's forward: SGLang logs it and kills its own
            # process tree, itself included (0.5.9 http_server._execute_server_warmup:
            # kill_process_tree(os.getpid()) -> psutil's kill, SIGKILL), so systemd sees
            # status=9/KILL, not an exit code.
            LOG.error("Initialization failed. warmup error: model warmup failed, as SGLang would: %s", wiring.fatal)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
        elif follower:
            try:
                server = make_server(args.host, args.port, handler=DummyHandler, enable_metrics=args.enable_metrics)
            except OSError as exc:
                LOG.error("Dummy health check server failed to start: %s", exc)
                code = 1
            else:
                threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
                LOG.info("Dummy health check server started in background thread at %s:%s", args.host, args.port)
                start_log = environ.get(ENV_START_LOG)
                if start_log:
                    append_start_log(start_log, started, time.time())
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
            wait(None)
    if code == 0 and lost() and not stop.is_set():
        LOG.error("Scheduler or DataParallelController terminated: %s", replica.why_lost)
        code = 1
    LOG.info("shutting down")
    if replica is not None:
        replica.close()
    if server is not None:
        server.shutdown()
        server.server_close()
    return code


if __name__ == "__main__":
    sys.exit(main())
