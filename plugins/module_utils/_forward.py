# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Forward-capture check: run the installed release's own capture code on CPU tensors.

The other checks prove a patch by reading it (grep evidence, compile) and by running
``set_eagle3_layers_to_capture`` alone. What the draft is fed is built elsewhere: in
``DeepseekV2Model.forward`` and, from 0.5.14, in the decoder layer, its
``LayerCommunicator`` (or the layer boundary, 0.5.21+) and the aux-hidden-state
packer. This check executes that code, taken from the release's files, with torch
tensors and small strict stand-ins, in the state ModelRunner leaves the model in
before CUDA-graph capture and after it, and names what was captured.

The caller's half is this file (standard library only, any host python): it builds
the request, runs the harness under the SGLang venv's python through the module's
``run_command`` (never ``subprocess``; the harness files' source and the request in
a private temp file) and reads one JSON line back. The harness is four files, each
importing only the ones before it, because Ansible ships module_utils alone and the
venv's python has no ``ansible_collections`` package:

* ``_forward_code``: reading and compiling the release's own code, and the
  order in which ModelRunner touches the capture ids;
* ``_forward_standins``: the strict stand-ins and the globals the release reads;
* ``_forward_model``: the model built from them around the release's methods;
* ``_forward_harness``: the verdict, and ``harness_main``, which runs in the
  venv's python, the one that imports torch. Where torch is missing it says so and
  the caller reports "not executed (no torch)".
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_code as _code
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_harness as _harness
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_model as _model
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_standins as _standins
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import module_source
from ansible_collections.fleetops.sglang.plugins.module_utils._forward_harness import not_executed
from ansible_collections.fleetops.sglang.plugins.module_utils._forward_model import stream_name

# What the venv's python runs, in import order: each file imports only the ones before it.
HARNESS_MODULES = (_code, _standins, _model, _harness)

# The venv's python registers each harness file's source, read with the request from
# the JSON file named in argv, under its own module name (so that the next file's
# imports find it), runs harness_main of the last one and prints one JSON line.
BOOT = ("import json, sys, types\n"
        "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
        "for name, source in d['modules']:\n"
        "    module = sys.modules[name] = types.ModuleType(name)\n"
        "    exec(compile(source, '<%s>' % name.rsplit('.', 1)[-1], 'exec'), vars(module))\n"
        "sys.exit(module.harness_main(d['request']))\n")

# Runs argv, returns (rc, stdout, stderr): AnsibleModule.run_command on a host (the
# engine's RunCommand contract: argv only).
RunCommand = Callable[..., Tuple[int, str, str]]


def expected_names(layer_ids: Sequence[int]) -> List[str]:
    """What the draft was trained on, from the user's ids (-1 = embedding, N = output of layer N)."""
    return [stream_name(0 if val == -1 else val + 1) for val in layer_ids]


def short_name(name: str) -> str:
    """"output of layer 2" -> "L2", for the report's one line."""
    prefix = "output of layer "
    return "L" + name[len(prefix):] if name.startswith(prefix) else name


def harness_sources() -> Optional[List[List[str]]]:
    """[module name, source] of every harness file, in import order; None if one cannot be read.

    The source comes from the module's loader, also when it runs from Ansible's
    zipped payload (AnsiballZ), else from its file.
    """
    sources = []
    for module in HARNESS_MODULES:
        source = module_source(module)
        path = getattr(module, "__file__", None)
        if source is None and path and os.path.isfile(path):
            with open(path, "rb") as fh:
                source = fh.read()
        if source is None:
            return None
        sources.append([module.__name__, source.decode("utf-8")])
    return sources


def forward_check(python: Optional[str], site_packages: str, route: str, layer_ids: Sequence[int],
                  draft_ids: Sequence[int], run_command: Optional[RunCommand],
                  texts: Optional[Dict[str, str]] = None, replay_cuda_graph: bool = False) -> Dict[str, Any]:
    """Run the harness under ``python`` (the SGLang venv's) and return its verdict.

    ``route`` is ``patch`` or ``native``; ``layer_ids`` the user's ids (what the draft
    was trained on), ``draft_ids`` what the draft config lists for this release.
    ``texts`` overrides files of site-packages (check mode verifies patched texts that
    are not on disk yet). The result's ``executed`` is False when the venv's python
    has no torch (image builds without deps, the test bed): then ``ok`` is None and
    the other checks stand alone. ``replay_cuda_graph`` (GPU hosts, never CI) also
    replays the graph state in a real ``torch.cuda.CUDAGraph``.
    """
    if not python or not os.path.exists(python):
        return not_executed("no python in the venv (%s)" % python)
    if run_command is None:
        return not_executed("no command runner")
    sources = harness_sources()
    if sources is None:
        return not_executed("the harness source cannot be read")
    request = {"site_packages": site_packages, "route": route, "layer_ids": list(layer_ids),
               "draft_ids": list(draft_ids), "expected": expected_names(layer_ids), "texts": texts or {},
               "replay_cuda_graph": replay_cuda_graph}
    # A private file, not stdin: the engine's runners take argv only. A sandboxed runner
    # (_sandbox.Runner) names where its command can read it, and makes it readable there.
    fd, payload = tempfile.mkstemp(prefix="sglang-forward-", suffix=".json",
                                   dir=getattr(run_command, "shared_dir", None))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"modules": sources, "request": request}, fh)
        share = getattr(run_command, "share", None)
        if share is not None:
            share(payload)
        rc, out, err = run_command([python, "-c", BOOT, payload])
    finally:
        os.unlink(payload)
    lines = [line for line in (out or "").splitlines() if line.startswith("{")]
    if not lines:
        res = not_executed("harness gave no result (rc %s): %s" % (rc, (err or out or "").strip()[-500:]))
        res.update(executed=True, ok=False, errors=[res["reason"]])
        return res
    try:
        res = json.loads(lines[-1])
    except ValueError:
        res = not_executed("harness printed no JSON: %s" % lines[-1][:200])
        res.update(executed=True, ok=False, errors=[res["reason"]])
    return res


def forward_summary(res: Optional[Dict[str, Any]]) -> str:
    """The report's line: "forward: embedding, L2, L30 (executed)" or why not."""
    if not res:
        return "forward: not executed"
    if not res.get("executed"):
        return "forward: not executed (%s)" % res.get("reason", "?")
    captured = res.get("captured", {})
    names = captured.get("graph") if captured.get("graph") is not None else captured.get("eager")
    what = ", ".join(short_name(n) for n in names or []) or "nothing captured"
    if res.get("ok"):
        return "forward: %s (executed%s)" % (what, ", CUDA graph replayed" if res.get("replayed") else "")
    return "forward: FAILED (%s)" % "; ".join(res.get("errors") or ["?"])
