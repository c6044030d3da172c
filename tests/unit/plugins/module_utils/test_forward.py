"""The forward-capture check (module_utils/_forward*.py) on real release files.

The check executes each release's own capture code (set_eagle3_layers_to_capture,
DeepseekV2Model.forward and, from 0.5.14, the decoder layer with its
LayerCommunicator or layer boundary and the packer) with torch on the CPU. torch
comes from the parser venv (testbed/parser_venv, built once and cached), run as a
subprocess: exactly how the role runs it on a host, with the SGLang venv's python.
Set SGLANG_PARSER_TESTS=0 to skip the tests that need it: a developer's opt-out only. Those
skips, like the one for a machine without Python 3.11 (scripts/bootstrap installs Debian's
python3.11 where none is found), are listed nowhere in testbed/skips.yml, so a run under the skip
policy (scripts/test, CI) fails on them: intended, every CI run runs these tests.

The broken variants are built by mutating the real release source, one fault each. They,
and the engine's check of every family, run the same harness with the same argv in a child
forked from one interpreter that has imported torch (``torch_forked``, tests/zygote.py): torch's
import, about 1.5 CPU seconds, is paid once instead of once per release. The engine's launch as
a fresh process is proven by the check-mode and restore cases below, and the module's own
launches (what a host runs, through AnsiballZ's run_command) start fresh processes too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import pytest

from conftest import DIST, HUNKS, LIBRARY, MODULE_UTILS_DIR, REPO, E, run_module
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward as F
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_code as FC
import parser_venv
from zygote import Zygote

HARNESS_PATH = MODULE_UTILS_DIR / "_forward_harness.py"
DS = DIST.DEEPSEEK_FILE
TRAINED = ["embedding", "output of layer 2", "output of layer 30"]
EXECUTED = "forward: embedding, L2, L30 (executed)"
# One release per family and both sides of every boundary (the per-release table of guide_releases.rst): body A with
# companion_cg_local (0.5.4.post2 .. 0.5.7, _dummy_run from 0.5.6) and companion_cg_attr
# (0.5.8 .. 0.5.10.post1, three-value layers from 0.5.10), body A without companion
# (0.5.11 .. 0.5.12.post1), body B on the L forward (0.5.13, 0.5.13.post1), C (0.5.14 ..
# 0.5.16), P (0.5.17 .. 0.5.20), R (0.5.21 ..).
RELEASES = ["0.5.4.post2", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12.post1",
            "0.5.13", "0.5.13.post1", "0.5.14", "0.5.16", "0.5.17", "0.5.20", "0.5.21", "0.5.23"]



def release(version):
    """(0, 5, 14) for "0.5.14", (0, 5, 4) for "0.5.4.post2": versions compare as numbers, not text."""
    return tuple(int(x) for x in version.split(".")[:3])


needs_torch = pytest.mark.skipif(os.environ.get("SGLANG_PARSER_TESTS", "1") == "0", reason="SGLANG_PARSER_TESTS=0")


def run_command(argv):
    """AnsibleModule.run_command's contract: (rc, stdout, stderr)."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="session")
def torch_python(python311):
    """The parser venv's python (torch CPU): python311 is conftest.py's."""
    return str(parser_venv.ensure_base(python311) / "bin" / "python")


def site(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def request(venv, patches, python, **kw):
    return E.Request(venv=str(venv), patches=patches, backup_dir=str(venv / "backup"), python=python,
                     run_command=run_command, **kw)


def patched_texts(version, venv, patches, companion=True):
    """The files as the engine would patch them (from the real release files)."""
    res = E.run(request(venv, patches, None, check_mode=True))
    texts = {}
    plan = [res["family"]] + ([res["companion"]["template"]] if companion and res["companion"]["needed"] else [])
    for name in plan:
        for rel in {h.file for h in HUNKS.parse_patch(patches[name])}:
            path = site(venv) / rel
            if path.exists():
                base = texts.get(rel, path.read_text())
                texts[rel] = HUNKS.apply_hunks(base, [h for h in HUNKS.parse_patch(patches[name]) if h.file == rel]).text
    return texts


@pytest.fixture(scope="session")
def torch_forked(torch_python):
    """(python, run_command) for the direct checks of broken variants: the same harness and argv, run
    in a child forked from one interpreter that has imported torch (tests/zygote.py). The engine's
    and the module's own launches stay fresh processes."""
    zygote = Zygote(torch_python, ["torch"])

    def run(argv):
        if argv[:2] == [torch_python, "-c"]:
            return zygote.run(argv[2], argv[3:])
        return run_command(argv)

    yield torch_python, run
    zygote.close()


def check(venv, forked, texts, route="patch", draft_ids=(-1, 2, 30)):
    python, run = forked
    return F.forward_check(python, str(site(venv)), route, [-1, 2, 30], list(draft_ids), run, texts=texts)


# ------------------------------------------------------------ without torch


def test_runner_events_follow_model_runner_order(make_venv):
    """Read from ModelRunner.initialize: what runs before CUDA-graph capture, in order."""
    def events(version):
        s = site(make_venv(version))
        return FC.runner_events((s / FC.MODEL_RUNNER_FILE).read_text(), (s / FC.CUDA_GRAPH_FILE).read_text())
    assert events("0.5.4.post2") == [("defaults", "CudaGraphRunner.__init__"), ("graphs", "CUDA-graph capture"),
                                     ("configured", "ModelRunner.initialize")]
    assert events("0.5.9") == [("defaults", "ModelRunner._dummy_run (kernel warmup)"),
                               ("defaults", "CudaGraphRunner.__init__"), ("graphs", "CUDA-graph capture"),
                               ("configured", "ModelRunner.initialize")]
    # 0.5.11 (PR #22836): the ids are applied before the graphs, no defaults call left.
    assert events("0.5.11") == [("configured", "ModelRunner.init_aux_hidden_state_capture"),
                                ("graphs", "CUDA-graph capture")]


def test_without_torch_it_says_not_executed(make_venv):
    """This interpreter (.venv) has no torch, like the test bed's SGLang venv."""
    res = check(make_venv("0.5.9"), (sys.executable, run_command), {})
    assert res["executed"] is False and res["ok"] is None
    assert F.forward_summary(res) == "forward: not executed (no torch)"


def test_engine_without_python_keeps_todays_checks(make_venv, patches):
    res = E.run(E.Request(venv=str(make_venv("0.5.9")), patches=patches, check_mode=True))
    assert not res["failed"] and res["checks"] == {"compiled": True, "semantic": True}
    assert res["forward"]["executed"] is False


def test_names_and_summary():
    assert F.expected_names([-1, 2, 30]) == TRAINED
    assert F.forward_summary({"executed": True, "ok": True, "captured": {"eager": TRAINED}}) == EXECUTED


# --------------------------------------------------------------- with torch


@needs_torch
@pytest.mark.parametrize("version", RELEASES)
def test_engine_executes_the_capture_on_every_family(version, make_venv, patches, torch_forked):
    """present through the engine: patch (or native) and the executed capture (the harness's
    launches forked from the torch zygote: the same python, code and argv)."""
    venv = make_venv(version)
    start = time.monotonic()
    python, run = torch_forked
    res = E.run(E.Request(venv=str(venv), patches=patches, backup_dir=str(venv / "backup"), python=python,
                          run_command=run))
    assert not res["failed"], res["msg"]
    fwd = res["forward"]
    assert fwd["executed"] and fwd["ok"], fwd
    assert fwd["summary"] == EXECUTED
    assert fwd["captured"]["eager"] == TRAINED
    if res["decision"] == "patch" and release(version) < (0, 5, 14):
        # Every patched release captures graphs: the graph state must hold the embedding too.
        assert fwd["captured"]["graph"] == TRAINED
    assert fwd["torch"].startswith("2.")
    assert time.monotonic() - start < 120


@needs_torch
def test_check_mode_executes_the_would_be_texts(make_venv, patches, torch_python):
    venv = make_venv("0.5.9")
    before = (site(venv) / DS).read_bytes()
    res = E.run(request(venv, patches, torch_python, check_mode=True))
    assert not res["failed"] and res["forward"]["summary"] == EXECUTED
    assert (site(venv) / DS).read_bytes() == before


def _mutate(texts, rel, old, new, count=1):
    assert texts[rel].count(old) >= 1, "the mutation's anchor is gone from the release: %r" % old
    out = dict(texts)
    out[rel] = texts[rel].replace(old, new, count)
    return out


CLONE = "aux_hidden_states.append(hidden_states.clone())"
CLONE_LINE = "            %s\n" % CLONE
# The clone appended, taken back and replaced by the uncloned embedding (which layer 0's in-place norm
# overwrites): grep evidence, compile and semantic checks all pass it.
POPPED = CLONE_LINE + "            aux_hidden_states.pop()\n            aux_hidden_states.append(hidden_states)\n"
APPEND_BLOCK = ("        if self.capture_embedding_for_eagle3 and self.pp_group.is_first_rank:\n"
                "            aux_hidden_states.append(hidden_states.clone())\n")
AFTER_LOOP = "        if normal_end_layer != self.end_layer:\n"
NATIVE_IDS = (0, 3, 31)
COMM, STAGE = FC.COMMUNICATOR_FILE, FC.STAGE_FILE


@dataclass(frozen=True)
class Variant:
    """One wiring of a release's capture code: the release's files (pristine, or as the engine patches them,
    with or without the CUDA-graph companion), edits on top of them (file, old, new; each old text must be
    in the release) and the draft's layer ids. tests/test_double_capture_variants.py gives the same list to
    the test double's static judgement."""

    name: str
    version: str
    files: str = "patched"  # "pristine", "patched", "patched without companion"
    draft_ids: Tuple[int, ...] = (-1, 2, 30)
    edits: Tuple[Tuple[str, str, str], ...] = ()

    @property
    def id(self):
        return "%s-%s" % (self.version, self.name.replace(" ", "-"))

    @property
    def route(self):
        """The harness's route: the body-A/B patch up to 0.5.13.post1, the native capture from 0.5.14."""
        return "native" if release(self.version) >= (0, 5, 14) else "patch"

    def texts(self, venv, patches):
        """The capture files as this variant has them (the ones that differ from what is installed)."""
        if self.files == "pristine":
            texts = {}
        else:
            texts = patched_texts(self.version, venv, patches, companion=self.files == "patched")
        for rel, old, new in self.edits:
            texts.setdefault(rel, (site(venv) / rel).read_text())
            texts = _mutate(texts, rel, old, new)
        return texts


def _loop_patch_breaks(version):
    """The embedding patch broken three ways, as only the executed capture tells (grep, compile, semantic pass)."""
    return [
        Variant("embedding not cloned", version, edits=((DS, CLONE, "aux_hidden_states.append(hidden_states)"),)),
        Variant("embedding appended after the layer loop", version,
                edits=((DS, APPEND_BLOCK, ""), (DS, AFTER_LOOP, APPEND_BLOCK + AFTER_LOOP))),
        Variant("flag not initialised", version,
                edits=((DS, "        self.capture_embedding_for_eagle3 = False\n", ""),)),
    ]


def _native_breaks(version):
    """The native capture (0.5.14+) broken: ids one off, an index shifted, the capture dropped or taken from
    the residual before the layer's input norm."""
    dropped = (DS, "capture_gathered=captured_last_layer_outputs,", "capture_gathered=None,") \
        if release(version) >= (0, 5, 21) else \
        (DS, "captured_last_layer_outputs=captured_last_layer_outputs,", "captured_last_layer_outputs=None,")
    if release(version) >= (0, 5, 21):
        before_norm = ((STAGE, "        capture_before_read = capture is not None and (\n",
                        "        residual_before_norm = stream.residual\n"
                        "        capture_before_read = capture is not None and (\n"),
                       (STAGE, "            residual_value = stream.residual\n",
                        "            residual_value = residual_before_norm\n"))
    else:
        before_norm = ((COMM, "        hidden_states, residual = self.prepare_attn(\n",
                        "        residual_before_norm = residual\n        hidden_states, residual = self.prepare_attn(\n"),
                       (COMM, "            captured_last_layer_outputs.append(gathered_last_layer_output)\n",
                        "            captured_last_layer_outputs.append(residual_before_norm)\n"))
    return [
        Variant("ids one low", version, "pristine", (0, 2, 30)),
        Variant("ids one high", version, "pristine", (1, 4, 32)),
        Variant("body-A ids", version, "pristine", (-1, 2, 30)),
        Variant("loop index shifted", version, "pristine", NATIVE_IDS,
                ((DS, "i in self.layers_to_capture", "i + 1 in self.layers_to_capture"),)),
        Variant("ids shifted in set_eagle3_layers_to_capture", version, "pristine", NATIVE_IDS,
                ((DS, "self.model.layers_to_capture = list(layer_ids)",
                  "self.model.layers_to_capture = [val + 1 for val in layer_ids]"),)),
        Variant("capture dropped in the decoder layer", version, "pristine", NATIVE_IDS, (dropped,)),
        Variant("captured before the input norm", version, "pristine", NATIVE_IDS, before_norm),
    ]


# Every broken wiring the executed check must fail: one source, for this file and for the test double.
BROKEN = [
    # The incident's files with the fix's ids: capture index 0 meets residual None.
    Variant("unpatched", "0.5.9", "pristine"),
    *[v for version in ("0.5.4.post2", "0.5.9", "0.5.13") for v in _loop_patch_breaks(version)],
    Variant("clone popped for the uncloned embedding", "0.5.11", edits=((DS, CLONE_LINE, POPPED),)),
    Variant("loop capture shifted", "0.5.9",
            edits=((DS, "if i in self.layers_to_capture:", "if i + 1 in self.layers_to_capture:"),)),
    # CUDA graphs captured after the no-argument calls: decode uses the default ids.
    *[Variant("without the CUDA-graph companion", version, "patched without companion")
      for version in ("0.5.4.post2", "0.5.9")],
    *[v for version in ("0.5.14", "0.5.17", "0.5.23") for v in _native_breaks(version)],
    # 0.5.14-0.5.16 collect into a plain list: without the clone the residual is overwritten in place.
    Variant("residual not cloned", "0.5.14", "pristine", NATIVE_IDS,
            ((COMM, "gathered_last_layer_output = residual.clone()", "gathered_last_layer_output = residual"),)),
]
# ... and every correct one: the role's patch (with its companion where needed) on each release family up to
# 0.5.13.post1, and the pristine native capture with the ids one up from 0.5.14.
CORRECT = [Variant("patched", v) for v in RELEASES if release(v) < (0, 5, 14)] + \
          [Variant("native", v, "pristine", NATIVE_IDS) for v in RELEASES if release(v) >= (0, 5, 14)]

TRAINED_LOW = ["embedding", "output of layer 1", "output of layer 29"]
DEFAULTS = ["output of layer 1", "output of layer 29", "output of layer 57"]


def _executed_detail(variant, res):
    """What the executed check shows beyond "not ok", for the variants where it is specific."""
    eager, graph = res["captured"].get("eager", []), res["captured"].get("graph")
    if variant.name == "unpatched":
        assert any("TypeError" in e for e in res["errors"]), res["errors"]
    elif variant.name in ("embedding not cloned", "clone popped for the uncloned embedding"):
        assert "embedding" not in eager, eager
    elif variant.name == "embedding appended after the layer loop":
        assert eager[:2] == TRAINED[1:], eager
    elif variant.name == "flag not initialised":
        assert any(e.startswith("plain:") and "capture_embedding_for_eagle3" in e for e in res["errors"])
    elif variant.name == "without the CUDA-graph companion":
        assert graph == DEFAULTS and eager == TRAINED, res["captured"]
        assert any("CUDA-graph capture" in e and "defaults" in e for e in res["errors"])
    elif variant.name == "ids one low":
        assert eager == TRAINED_LOW, eager
    elif variant.name == "ids one high":
        assert "embedding" not in eager, eager


@needs_torch
@pytest.mark.parametrize("variant", BROKEN, ids=lambda v: v.id)
def test_broken_variant_fails_when_executed(variant, make_venv, patches, torch_forked):
    venv = make_venv(variant.version)
    res = check(venv, torch_forked, variant.texts(venv, patches), variant.route, variant.draft_ids)
    assert res["executed"] and not res["ok"], res
    _executed_detail(variant, res)


@needs_torch
@pytest.mark.parametrize("version", ["0.5.4.post2", "0.5.9", "0.5.13"])
def test_the_patch_the_broken_variants_start_from_passes(version, make_venv, patches, torch_forked):
    """The good side of the loop-patch mutations: the patched files alone pass, executed."""
    venv = make_venv(version)
    assert check(venv, torch_forked, patched_texts(version, venv, patches))["ok"]


@needs_torch
def test_failed_forward_check_restores_the_pristine_files(make_venv, patches, torch_python, monkeypatch):
    """A failure after writing is a verification failure: the usual restore."""
    venv = make_venv("0.5.9")
    before = (site(venv) / DS).read_bytes()
    broken = {k: v.replace(CLONE, "aux_hidden_states.append(hidden_states)") for k, v in patches.items()}
    res = E.run(request(venv, broken, torch_python))
    assert res["failed"] and "verification failed after writing" in res["msg"] and "forward:" in res["msg"]
    assert (site(venv) / DS).read_bytes() == before


# ------------------------------------------------------ the GPU-less test double

DOUBLE = REPO / "files" / "sglang_test_double" / "sglang_test_double.py"
JUDGE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("sglang_test_double", sys.argv[1])
td = importlib.util.module_from_spec(spec); sys.modules["sglang_test_double"] = td; spec.loader.exec_module(td)
w = td.judge_wiring(sys.argv[2], sys.argv[3], "EAGLE3", sys.argv[4], 61, sys.argv[5] == "1", 1,
                    td.parse_trained_layers("embed,2,30"), harness_path=sys.argv[6] or None)
print(json.dumps({"prefill": w.prefill, "decode": w.decode, "fatal": w.fatal, "match": w.matches_training,
                  "notes": w.notes}))
"""


def judge(python, venv, version, ids, harness=True, disable_cuda_graph=False):
    import json
    draft = venv / "draft"
    draft.mkdir(exist_ok=True)
    (draft / "config.json").write_text(json.dumps({"eagle_config": {"use_aux_hidden_state": True,
                                                                    "eagle_aux_hidden_state_layer_ids": ids}}))
    proc = subprocess.run([python, "-c", JUDGE, str(DOUBLE), str(site(venv)), version, str(draft),
                           "1" if disable_cuda_graph else "0", str(HARNESS_PATH) if harness else ""],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@needs_torch
def test_test_double_judges_with_the_executed_capture(make_venv, patches, torch_python):
    venv = make_venv("0.5.9")
    # Pristine 0.5.9 with the body-A ids: capture index 0 meets residual None, executed.
    dead = judge(torch_python, venv, "0.5.9", [-1, 2, 30])
    assert dead["fatal"].startswith("TypeError") and "(executed" in dead["fatal"]
    assert any(n.startswith("forward EXECUTED") for n in dead["notes"])
    assert not E.run(request(venv, patches, None))["failed"]  # patch + companion
    good = judge(torch_python, venv, "0.5.9", [-1, 2, 30])
    assert good["match"] and good["decode"] == ["embed", "L2", "L30"], good


@needs_torch
def test_test_double_sees_graphs_without_the_companion(make_venv, patches, torch_python):
    venv = make_venv("0.5.9")
    path = site(venv) / DS
    path.write_text(patched_texts("0.5.9", venv, patches, companion=False)[DS])
    res = judge(torch_python, venv, "0.5.9", [-1, 2, 30])
    assert res["prefill"] == ["embed", "L2", "L30"] and res["decode"] == ["L1", "L29", "L57"]
    assert not res["match"]
    assert judge(torch_python, venv, "0.5.9", [-1, 2, 30], disable_cuda_graph=True)["match"]


@needs_torch
def test_test_double_native_and_without_torch(make_venv, torch_python):
    venv = make_venv("0.5.18")
    assert judge(torch_python, venv, "0.5.18", [0, 3, 31])["match"]
    packer = judge(torch_python, venv, "0.5.18", [-1, 2, 30])
    assert not packer["match"] and "captured 2 of 3" in packer["fatal"]
    # Without torch (this interpreter) it judges from the text, as before.
    plain = judge(sys.executable, venv, "0.5.18", [0, 3, 31])
    assert plain["match"] and not any(n.startswith("forward EXECUTED") for n in plain["notes"])


# ------------------------------------------------------------------ the module


@needs_torch
@pytest.mark.parametrize("version", ["0.5.9", "0.5.18"])
def test_module_reports_the_executed_capture_on_a_host_with_torch(version, make_venv, patches, tmp_path, torch_python):
    """What the role does on a GPU host: the venv's python imports torch, the module runs
    the check through its run_command and returns the line the report shows.
    (Molecule's test bed has no torch; see docs/docsite/rst/guide_tests.rst for why this is proven here.)"""
    venv = make_venv(version)
    args = {"venv": str(venv), "patches": patches, "backup_dir": str(tmp_path / "bk"), "python": torch_python}
    _, out = run_module(LIBRARY, tmp_path, args)
    assert not out.get("failed"), out.get("msg")
    assert out["forward"]["summary"] == EXECUTED and out["forward"]["executed"] is True
    _, out = run_module(LIBRARY, tmp_path, dict(args, python=sys.executable))  # a venv without torch
    assert not out.get("failed") and out["forward"]["summary"] == "forward: not executed (no torch)"


@needs_torch
def test_module_fails_and_restores_when_the_forward_check_fails(make_venv, patches, tmp_path, torch_python):
    """A patch that every other check passes (grep evidence, compile, semantic) but that feeds
    the draft the wrong tensor: the clone is appended, popped and replaced by the uncloned
    embedding, which layer 0's in-place norm overwrites. Only the executed check sees it."""
    venv = make_venv("0.5.11")
    before = (site(venv) / DS).read_bytes()
    bad = dict(patches)
    bad["body_a_loop"] = patches["body_a_loop"].replace(CLONE_LINE, POPPED)  # BROKEN's variant, as a patch
    assert bad["body_a_loop"] != patches["body_a_loop"]
    _, out = run_module(LIBRARY, tmp_path, {"venv": str(venv), "patches": bad, "backup_dir": str(tmp_path / "bk"),
                                            "python": torch_python})
    assert out.get("failed") and "verification failed after writing" in out["msg"], out.get("msg")
    assert "forward:" in out["msg"] and out["forward"]["ok"] is False
    assert "append_embedding" not in out["msg"] and "compile" not in out["msg"]
    assert out["forward"]["captured"]["eager"][0] != "embedding"
    assert (site(venv) / DS).read_bytes() == before


@needs_torch
def test_cuda_graph_replay_needs_a_device(make_venv, torch_python):
    """The replay path (scripts/check-cuda-graph-replay, GPU hosts) says so on a CPU-only torch."""
    res = F.forward_check(torch_python, str(site(make_venv("0.5.18"))), "native", [-1, 2, 30], [0, 3, 31],
                          run_command, replay_cuda_graph=True)
    assert res["executed"] is False and "no CUDA device" in res["reason"]
