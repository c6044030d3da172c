# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The forward-capture harness, part 4: the verdict, and its entry point in the venv's python.

``harness_main`` runs in the SGLang venv's python, the one that imports torch, with
parts 1 to 3 loaded before it (_forward ships the four files' source); where
torch is missing it says so and the caller reports "not executed (no torch)". The
test double (files/sglang_test_double) loads this file by path for the same check.
Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._forward_code import (
    CUDA_GRAPH_FILE,
    FORWARD_FILES,
    MODEL_RUNNER_FILE,
    load_function,
    runner_events,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._forward_model import Harness


def not_executed(reason: str) -> Dict[str, Any]:
    """The verdict of a check that did not run, and why (the other checks then stand alone)."""
    return {"executed": False, "ok": None, "reason": reason, "captured": {}, "errors": [], "events": []}


def _scenario(harness: Harness, calls: Sequence[Tuple[str, str]],
              draft_ids: Optional[Sequence[int]], replay: bool = False) -> Dict[str, Any]:
    """A fresh model, the given set_eagle3_layers_to_capture calls, one forward pass.

    ``draft_ids`` None is a draft config without ids: SGLang then passes None too.
    """
    lm, model = harness.model()
    set_layers = load_function(harness.ds, "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture", dict(harness.globals))
    for kind, _where in calls:
        if kind == "defaults" or (kind == "configured" and draft_ids is None):
            set_layers(lm)
        elif kind == "configured":
            set_layers(lm, list(draft_ids))
    if replay:
        out, input_ids = harness.replay_forward(model)
    else:
        input_ids = harness.input_ids()
        out = harness.run_forward(model, input_ids)
    if isinstance(out, tuple):
        return {"names": harness.decode(out[1], input_ids), "aux": True}
    return {"names": [], "aux": False}


def run_capture_check(torch: Any, texts: Dict[str, Optional[str]], route: str, draft_ids: Optional[Sequence[int]],
                      expected: Sequence[str], device: str = "cpu", replay_cuda_graph: bool = False) -> Dict[str, Any]:
    """The verdict: plain serving, CUDA-graph capture state and eager state, each executed.

    ``raised`` maps a state to the exception the release's code raised in it (what SGLang
    would die of at warm-up); ``captured`` the names of what the other states captured.
    With ``replay_cuda_graph`` (a CUDA device), the graph state is captured in a real
    CUDA graph and replayed with other tokens (``captured["graph"]``, ``replayed``).
    """
    harness = Harness(torch, texts, device)
    events = runner_events(texts.get(MODEL_RUNNER_FILE), texts.get(CUDA_GRAPH_FILE))
    result: Dict[str, Any] = {"executed": True, "route": route, "errors": [], "captured": {}, "raised": {},
                              "events": ["%s: %s" % (w, k) for k, w in events]}
    errors: List[str] = result["errors"]
    stages: List[Tuple[str, List[Tuple[str, str]]]] = [("plain", [])]
    if any(kind == "graphs" for kind, _w in events):
        stages.append(("graph", events[:[k for k, _w in events].index("graphs")]))
    elif replay_cuda_graph:
        stages.append(("graph", list(events)))
    stages.append(("eager", [e for e in events if e[0] != "graphs"]))
    result["replayed"] = bool(replay_cuda_graph)
    for stage, calls in stages:
        try:
            got = _scenario(harness, calls, draft_ids, replay=replay_cuda_graph and stage == "graph")
        except Exception as exc:  # the release's code or a stand-in refused: that is the finding
            result["raised"][stage] = "%s: %s" % (type(exc).__name__, exc)
            errors.append("%s: %s" % (stage, result["raised"][stage]))
            continue
        if stage == "plain":
            if got["aux"]:
                errors.append("plain serving (no EAGLE-3) captured %s" % got["names"])
            continue
        result["captured"][stage] = got["names"]
        if got["names"] != list(expected):
            label = "CUDA-graph capture (after %s)" % ", ".join("%s %s" % (w, k) for k, w in calls) \
                if stage == "graph" else "eager"
            errors.append("%s captured %s, the draft was trained on %s" % (label, got["names"] or "nothing",
                                                                           list(expected)))
    result["ok"] = not errors
    return result


def harness_main(request: Dict[str, Any]) -> int:
    """Entry point in the venv's python: print the verdict as one JSON line."""
    try:
        import torch  # pylint: disable=import-outside-toplevel,import-error
    except ImportError as exc:
        res = not_executed("no torch")
        res["detail"] = str(exc)
        _emit(res)
        return 0
    texts: Dict[str, Optional[str]] = {}
    for rel in FORWARD_FILES:
        if rel in request.get("texts", {}):
            texts[rel] = request["texts"][rel]
            continue
        path = os.path.join(request["site_packages"], rel)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                texts[rel] = fh.read()
        else:
            texts[rel] = None
    replay = bool(request.get("replay_cuda_graph"))
    if replay and not torch.cuda.is_available():
        _emit(not_executed("no CUDA device for the CUDA-graph replay"))
        return 0
    with torch.inference_mode():
        try:
            result = run_capture_check(torch, texts, request["route"], request["draft_ids"], request["expected"],
                                       device="cuda" if replay else "cpu", replay_cuda_graph=replay)
        except Exception as exc:  # pylint: disable=broad-except
            result = {"executed": True, "ok": False, "errors": ["%s: %s" % (type(exc).__name__, exc)],
                      "captured": {}, "events": []}
    result["torch"] = torch.__version__
    _emit(result)
    return 0


def _emit(result: Dict[str, Any]) -> None:
    """The one JSON line the caller reads (stdout: this runs as its own process)."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
