"""plugins/module_utils/_parse_server_args.py run by SGLang itself, on CPU, one release per family.

The venv (testbed/parser_venv) holds torch CPU and the release installed --no-deps
with only the packages prepare_server_args needs. What is proven here:

* the role's defaults pass, and SGLang's own warnings come back;
* with the 15/1/16 rule taken out of the role, the parse alone refuses 1/1/16 and
  names the variable, the rendered 16 and the 2 SGLang would run;
* an alias in sglang_extra_args that the static check would refuse is also
  caught by the comparison (the static check is bypassed to show it);
* the flag table _release_flags reads with ast equals SGLang's argparse;
* sglang_server_flags (its ``resolve``) runs the same script with a release's Python and
  maps its verdict: as rendered passes, a rewrite fails the module.

The role's defaults are parsed by a fresh interpreter per release, as on a host: through
sglang_server_flags (which starts the release's python itself) for 0.5.9 and 0.5.23, directly
for the other two. The other cases, and the direct parse of the role's defaults for the releases
the module case starts fresh already, run the same script in a child forked from one per release
that has imported ``sglang.srt.server_args`` already (tests/zygote.py), which saves that import's
5 to 7 CPU seconds a case.

Set SGLANG_PARSER_TESTS=0 to skip (the first build takes a few minutes): a developer's opt-out
only. Those skips, like the one for a machine without Python 3.11 (scripts/bootstrap installs
Debian's python3.11 where none is found), are listed nowhere in testbed/skips.yml, so a run under
the skip policy (scripts/test, CI) fails on them: intended, every CI run runs these tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess

import jinja2
import pytest
from ansible.plugins.filter.core import FilterModule as CoreFilters

import parser_venv
from conftest import MODULE_UTILS_DIR, MODULES, REPO, ROLE, run_module

SCRIPT = MODULE_UTILS_DIR / "_parse_server_args.py"
FLAGS_MODULE = MODULES / "sglang_server_flags.py"
RELEASES = ["0.5.9", "0.5.12.post1", "0.5.14", "0.5.23"]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, MODULE_UTILS_DIR / (name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RULES = _load("_speculative")
FLAGS = _load("_extra_args")
FLAG_TABLE = _load("_release_flags")
PARSER = _load("_parse_server_args")
OK, REFUSED = (PARSER.EXIT_STATUS[PARSER.OK], PARSER.OK), (PARSER.EXIT_STATUS[PARSER.REFUSED], PARSER.REFUSED)
VARIABLES = dict(FLAGS.MANAGED_FLAGS)

pytestmark = pytest.mark.skipif(os.environ.get("SGLANG_PARSER_TESTS", "1") == "0",
                                reason="SGLANG_PARSER_TESTS=0")


def render(models, **overrides):
    target, draft = models
    kwargs = dict(model_path=str(target), draft_model_path=str(draft), speculative_algorithm="EAGLE3",
                  num_steps=15, eagle_topk=1, num_draft_tokens=16, tp_size=8, pp_size=1,
                  host="127.0.0.1", port=30000)
    kwargs.update(overrides)
    return RULES.render_server_args(**kwargs)


def parse(run, argv, extra=0):
    """parse_server_args.py's exit status and verdict; ``run`` is a release's fresh process or its zygote."""
    request = {"argv": argv, "extra": extra, "variables": VARIABLES}
    rc, out, err = run(SCRIPT.read_text(), [json.dumps(request)])
    assert out.strip(), err[-3000:]
    return rc, json.loads(out.strip().splitlines()[-1])


def fresh(release, version):
    """``python -c code args`` in a new interpreter of that release, as the role runs it on a host."""
    python, env = release(version)

    def run(code, args):
        proc = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr

    return run


# The releases whose role defaults sglang_server_flags parses in a fresh interpreter
# (test_the_module_resolves_the_line_with_the_releases_own_server_args).
MODULE_RELEASES = ["0.5.9", "0.5.23"]


@pytest.mark.parametrize("version", RELEASES)
def test_role_defaults_pass_with_sglangs_warnings(release, forked, models, version):
    run = forked(version).run if version in MODULE_RELEASES else fresh(release, version)
    rc, out = parse(run, render(models))
    assert (rc, out["status"]) == OK, out
    assert out["differences"] == [] and out["device"] == ["cpu"]
    # Every managed flag the role rendered was compared with what SGLang resolved.
    assert out["compared"] == 9 and out["not_compared"] == []
    assert any("Max running requests is reset to 48" in w for w in out["warnings"]), out["warnings"]


@pytest.mark.parametrize("version", RELEASES)
def test_the_parse_alone_refuses_the_incident(forked, models, monkeypatch, version):
    """The 15/1/16 rule taken out: nothing static stops 1/1/16, SGLang's resolution does."""
    monkeypatch.setattr(RULES, "validate_speculative", lambda *a, **k: [])
    argv = render(models, num_steps=1, eagle_topk=1, num_draft_tokens=16)
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "16"
    rc, out = parse(forked(version).run, argv)
    assert (rc, out["status"]) == REFUSED, out
    assert out["differences"] == [{"variable": "sglang_speculative_num_draft_tokens",
                                   "flag": "--speculative-num-draft-tokens",
                                   "dest": "speculative_num_draft_tokens", "rendered": 16, "resolved": 2}]
    assert "sglang_speculative_num_draft_tokens (--speculative-num-draft-tokens): rendered 16, " \
           "SGLang would run 2" in out["msg"]
    assert any("speculative_num_draft_tokens is adjusted" in w for w in out["warnings"]), out["warnings"]


@pytest.mark.parametrize("version", RELEASES)
def test_a_nodes_multi_node_flags_are_what_sglang_parses(forked, models, version):
    """--nnodes, --node-rank and --dist-init-addr of a follower of two nodes (tp 16 across 2x 8 GPUs), as the
    role renders them from the inventory's replica, resolve to what was rendered on each release."""
    argv = render(models, tp_size=16, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:5000")
    assert argv[argv.index("--nnodes"):argv.index("--nnodes") + 6] == [
        "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000"]
    rc, out = parse(forked(version).run, argv)
    assert (rc, out["status"]) == OK, out
    assert out["compared"] == 12 and out["differences"] == [], out


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_an_override_in_extra_args_is_caught_by_the_comparison(forked, models, version):
    extra = ["--tensor-parallel-size", "4", "--speculative-num-st", "2"]
    rc, out = parse(forked(version).run, render(models) + extra, extra=len(extra))
    assert (rc, out["status"]) == REFUSED, out
    by_var = {d["variable"]: (d["rendered"], d["resolved"]) for d in out["differences"]}
    assert by_var == {"sglang_tp_size": (8, 4), "sglang_speculative_num_steps": (15, 2),
                      "sglang_speculative_num_draft_tokens": (16, 3)}


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_sglangs_parser_refusing_an_unknown_flag(forked, models, version):
    rc, out = parse(forked(version).run, render(models) + ["--no-such-flag"], extra=1)
    assert (rc, out["status"]) == REFUSED and "unrecognized arguments: --no-such-flag" in out["msg"]


TABLE = """
import argparse, json
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(p)
print(json.dumps({o: a.dest for o, a in p._option_string_actions.items()}))
"""


@pytest.mark.parametrize("version", RELEASES)
def test_the_static_table_is_sglangs_own(release, forked, version):
    rc, out, err = forked(version).run(TABLE)
    assert rc == 0, err[-3000:]
    real = json.loads(out.strip().splitlines()[-1])
    static = FLAG_TABLE.read_flag_table(release(version)[1]["PYTHONPATH"])["options"]
    assert {o: e["dest"] for o, e in static.items()} == real


# What the server would hold: SGLang's own prepare_server_args on argv, as launch_server runs it.
KEYS_SCRIPT = r"""
import json, sys
from sglang.srt.server_args import prepare_server_args
argv = json.loads(sys.argv[1])
args = prepare_server_args(argv)
if hasattr(args, "resolve_once"):  # 0.5.23: the values that run appear after it
    args.resolve_once()
print(json.dumps({name: getattr(args, name, "absent") for name in
                  ("api_key", "admin_api_key", "speculative_num_steps", "port")}))
"""


def _keys_file(tmp_path, api_key, admin_api_key, extra=""):
    """templates/sglang.keys.yaml.j2 rendered as Ansible renders it (to_json, comment)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters.update(CoreFilters().filters())
    text = env.from_string((ROLE / "templates" / "sglang.keys.yaml.j2").read_text()).render(
        ansible_managed="Ansible managed", sglang_service_name="sglang", sglang_group="sglang",
        sglang_api_key=api_key, sglang_admin_api_key=admin_api_key)
    path = tmp_path / "sglang.keys.yaml"
    path.write_text(text + extra)
    return path


@pytest.mark.parametrize("version", RELEASES)
def test_the_keys_reach_sglang_through_the_roles_config_file(forked, models, tmp_path, version):
    """One release per family: --config FILE (the role's file, rendered by its template) gives SGLang both keys,
    quotes and backslashes intact; a flag on the command line wins over the same option in the file."""
    api, admin = 'k-"quoted"\\back\\slash-0123', "admin-key-0123456789"
    config = _keys_file(tmp_path, api, admin, extra="speculative-num-steps: 2\nport: 1234\n")
    argv = render(models) + ["--device", "cpu", "--config", str(config)]
    rc, out, err = forked(version).run(KEYS_SCRIPT, [json.dumps(argv)])
    assert rc == 0, err[-3000:]
    held = json.loads(out.strip().splitlines()[-1])
    assert held == {"api_key": api, "admin_api_key": admin, "speculative_num_steps": 15, "port": 30000}, held
    # Only the API key: the admin key stays unset.
    config = _keys_file(tmp_path, api, "")
    rc, out, err = forked(version).run(KEYS_SCRIPT, [json.dumps(render(models) + ["--device", "cpu", "--config",
                                                                                    str(config)])])
    assert rc == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["admin_api_key"] is None


def _venv_of(release, version, tmp_path):
    """A virtualenv layout over a release's target dir, and a python that imports it (the module's O(python))."""
    python, env = release(version)
    target = env["PYTHONPATH"]
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages").symlink_to(target)
    wrapper = tmp_path / "python"
    wrapper.write_text("#!/bin/sh\nPYTHONPATH=%s exec %s \"$@\"\n" % (shlex.quote(target), shlex.quote(python)))
    wrapper.chmod(0o755)
    return venv, wrapper


@pytest.mark.parametrize("version", MODULE_RELEASES)
def test_the_module_resolves_the_line_with_the_releases_own_server_args(release, models, tmp_path, version):
    """sglang_server_flags with resolve: the role's defaults pass, with SGLang's warnings; the incident fails
    the module, naming the variable, the rendered 16 and the 2 SGLang would run."""
    venv, python = _venv_of(release, version, tmp_path)
    args = dict(venv=str(venv), python=str(python), required=True)
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(args, resolve=render(models)))
    assert rc == 0 and res["release"] == version and res["resolved"] is True, res
    assert res["resolution"]["status"] == PARSER.OK and res["resolution"]["differences"] == []
    assert any("Max running requests is reset to 48" in w for w in res["resolution"]["warnings"]), res
    argv = render(models)
    argv[argv.index("--speculative-num-steps") + 1] = "1"
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(args, resolve=argv))
    assert rc != 0 and res["failed"] and res["resolution"]["status"] == PARSER.REFUSED, res
    assert "sglang_speculative_num_draft_tokens (--speculative-num-draft-tokens): rendered 16, " \
           "SGLang would run 2" in res["msg"], res["msg"]
