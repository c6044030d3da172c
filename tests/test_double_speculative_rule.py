"""The test double's silent speculative rewrite, checked against each release's own ServerArgs.

The double (files/sglang_test_double, ``resolve_speculative_params``) mimics what SGLang does
to (--speculative-num-steps, --speculative-eagle-topk, --speculative-num-draft-tokens): the
(3, 1, 4) auto-choice when none is set, the assert and the TypeError on partial triples, and
the incident's rewrite (topk 1: draft tokens := steps + 1, a warning only). Here the same
triples go through the real ``prepare_server_args`` (and ``resolve_once`` from 0.5.23) of every
release tests/unit/plugins/module_utils/test_parse_server_args.py covers, in its parser venv
(testbed/parser_venv, CPU torch, ``--device cpu``), and the double must resolve each to the same
values, warn where SGLang warns and refuse where SGLang raises.

One child per release runs the whole grid (23 triples), forked from the release's zygote that
test_parse_server_args.py uses too (the session fixtures in conftest.py): SGLang's import (3 to 15
CPU seconds) is paid once per release and run, not per triple nor per module.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import MODULE_UTILS_DIR
from double_harness import load_double

PARSER_SCRIPT = MODULE_UTILS_DIR / "_parse_server_args.py"
from unit.plugins.module_utils.test_parse_server_args import RELEASES

pytestmark = pytest.mark.skipif(os.environ.get("SGLANG_PARSER_TESTS", "1") == "0",
                                reason="SGLANG_PARSER_TESTS=0")


td = load_double("sglang_test_double_rule")
FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
Triple = Tuple[Optional[int], Optional[int], Optional[int]]
# Every combination of a few steps, topk and draft-token counts (the incident's 1/1/16 and the fix's 15/1/16
# among them), and the partial triples: none set, draft unset (topk 1 and > 1), topk unset, steps unset.
GRID: List[Triple] = [(s, k, d) for s in (1, 3, 15) for k in (1, 4) for d in (2, 4, 16)] + [
    (None, None, None), (3, 1, None), (3, 4, None), (3, None, None), (None, 1, 16)]
ADJUSTED = "speculative_num_draft_tokens is adjusted"

# Runs in the release's python: prepare_server_args on each triple, what it resolved (or raised) and
# whether SGLang logged the draft-token rewrite.
SCRIPT = r"""
import contextlib, io, json, logging, sys
request = json.loads(sys.argv[1])
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    from sglang.srt.server_args import prepare_server_args


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


# What will run is read as the role reads it: the shipped parser's resolved_view (one copy).
_spec = __import__("importlib.util").util.spec_from_file_location("_parse_server_args", request["parser"])
_parser = __import__("importlib.util").util.module_from_spec(_spec)
_spec.loader.exec_module(_parser)
resolved = _parser.resolved_view

out = []
for triple in request["triples"]:
    argv = list(request["base"])
    for flag, value in zip(request["flags"], triple):
        if value is not None:
            argv += [flag, str(value)]
    collect = Collect()
    logging.getLogger("sglang").addHandler(collect)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            view = resolved(prepare_server_args(argv))
        got = {"resolved": [view.speculative_num_steps, view.speculative_eagle_topk,
                            view.speculative_num_draft_tokens]}
    except BaseException as exc:
        got = {"raised": "%s: %s" % (type(exc).__name__, exc)}
    logging.getLogger("sglang").removeHandler(collect)
    got["warned"] = any(request["adjusted"] in line for line in collect.lines)
    out.append(got)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def real(forked: Any, models: Any) -> Any:
    """version -> {triple: what that release's ServerArgs made of it}, one child of its zygote per release."""
    target, draft = models
    cache: Dict[str, Dict[Triple, Dict[str, Any]]] = {}

    def get(version: str) -> Dict[Triple, Dict[str, Any]]:
        if version not in cache:
            request = {"parser": str(PARSER_SCRIPT),
                       "base": ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
                                "--speculative-draft-model-path", str(draft), "--device", "cpu"],
                       "flags": FLAGS, "triples": GRID, "adjusted": ADJUSTED}
            rc, out, err = forked(version).run(SCRIPT, [json.dumps(request)])
            assert rc == 0 and out.strip(), err[-3000:]
            cache[version] = dict(zip(GRID, json.loads(out.strip().splitlines()[-1])))
        return cache[version]

    return get


def double(triple: Triple) -> Dict[str, Any]:
    try:
        params = td.resolve_speculative_params("EAGLE3", *triple, "DeepseekV3ForCausalLM")
    except td.FatalStartup as exc:
        return {"refused": str(exc)}
    return {"resolved": [params.num_steps, params.eagle_topk, params.num_draft_tokens], "warned": params.adjusted}


@pytest.mark.parametrize("version", RELEASES)
def test_the_doubles_rewrite_is_the_releases(real: Any, version: str) -> None:
    results = real(version)
    for triple in GRID:
        sglang, mine = results[triple], double(triple)
        if "raised" in sglang:
            assert "refused" in mine, (triple, sglang, mine)
        elif None in sglang["resolved"]:
            # The one place ServerArgs does not decide: topk > 1 with no draft-token count stays None,
            # and the server dies later (ModelRunner sizes its CUDA-graph warm-up batch by it: by
            # reading 0.5.9). The double refuses it at start, which is where SGLang's process ends.
            assert triple[1] != 1 and triple[2] is None and sglang["resolved"][:2] == list(triple[:2]), sglang
            assert "refused" in mine and "--speculative-num-draft-tokens unset" in mine["refused"], mine
        else:
            assert mine.get("resolved") == sglang["resolved"], (triple, sglang, mine)
            assert mine["warned"] is sglang["warned"], (triple, sglang, mine)
    # The incident, by name: 1/1/16 runs with 2 draft tokens, 15/1/16 as given.
    assert results[(1, 1, 16)]["resolved"] == [1, 1, 2] and results[(15, 1, 16)]["resolved"] == [15, 1, 16]
