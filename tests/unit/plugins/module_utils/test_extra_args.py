"""plugins/module_utils/_release_flags.py and _extra_args.py on the real server_args.py of each
release.

The table is read with ``ast`` from the downloaded wheels (one release per family
and every boundary of the support matrix of docs/docsite/rst/guide_releases.rst), then each rule is checked on
it: unknown flags, managed dests reached by alias, ``--flag=value`` or prefix,
ambiguous prefixes, the capture-breaking flags, --config and model overrides.
Where the parser venv exists, tests/unit/plugins/module_utils/test_parse_server_args.py compares these
tables with SGLang's own argparse.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Dict

import pytest

import sglang_wheels
from conftest import MODULE_UTILS_DIR

spec = importlib.util.spec_from_file_location("_extra_args", MODULE_UTILS_DIR / "_extra_args.py")
S = importlib.util.module_from_spec(spec)
sys.modules["_extra_args"] = S
spec.loader.exec_module(S)
from ansible_collections.fleetops.sglang.plugins.module_utils import _release_flags as T  # noqa: E402

# One release per family and the matrix boundaries (docs/docsite/rst/guide_releases.rst).
RELEASES = ["0.5.4.post2", "0.5.7", "0.5.8", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12.post1",
            "0.5.13", "0.5.13.post1", "0.5.14", "0.5.23"]
# How each release lays its flags out.
LAYOUT = {v: "add_argument" for v in RELEASES[:9]}
LAYOUT.update({"0.5.14": "dataclass", "0.5.23": "namespaces"})


@pytest.fixture(scope="session")
def tables(tmp_path_factory) -> Dict[str, dict]:
    out = {}
    for version in RELEASES:
        site = sglang_wheels.extract_server_args(version, tmp_path_factory.mktemp("sa-" + version))
        out[version] = T.read_flag_table(str(site))
    return out


def test_module_is_python39_syntax():
    source = (MODULE_UTILS_DIR / "_extra_args.py").read_text()
    ast.parse(source, feature_version=(3, 9))
    imports = {n.names[0].name.split(".")[0] for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import)}
    # The collection's own module_utils ship with it (and are stdlib only themselves).
    imports |= {n.module.split(".")[0] for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.ImportFrom) and n.module
                and not n.module.startswith("ansible_collections.fleetops.sglang.plugins.module_utils.")}
    assert imports <= {"__future__", "ast", "glob", "hashlib", "json", "os", "re", "sys", "tempfile",
                       "typing", "difflib"}


@pytest.mark.parametrize("version", RELEASES)
def test_every_managed_flag_is_known_and_abbreviations_are_on(tables, version):
    table = tables[version]
    assert table["allow_abbrev"] is True  # argparse.ArgumentParser(prog=...) without allow_abbrev
    assert {flag for flag, _ in S.MANAGED_FLAGS} <= set(table["options"])
    assert len(S.managed_dests(table)) == len(S.MANAGED_FLAGS)
    # Where each layout puts its flags: the sources say which files were read.
    joined = " ".join(table["sources"])
    assert ("arg_groups/fields/spec.py:Spec" in joined) == (LAYOUT[version] == "namespaces")
    assert ("server_args.py:ServerArgs " in joined + " ") == (LAYOUT[version] != "add_argument")


@pytest.mark.parametrize("version", RELEASES)
def test_aliases_share_the_managed_dest(tables, version):
    opts = tables[version]["options"]
    assert opts["--tensor-parallel-size"]["dest"] == opts["--tp-size"]["dest"]
    assert opts["--pipeline-parallel-size"]["dest"] == opts["--pp-size"]["dest"]
    assert opts["--model"]["dest"] == opts["--model-path"]["dest"] == "model_path"
    assert opts["--speculative-draft-model"]["dest"] == "speculative_draft_model_path"
    # Not option strings at all: only abbreviations (or ambiguous).
    assert "--tp" not in opts and "--speculative-draft" not in opts


@pytest.mark.parametrize("version", RELEASES)
def test_the_readme_extra_args_pass(tables, version):
    """What users legitimately put there stays accepted on every release (--trust-remote-code only with
    sglang_trust_remote_code: test_remote_code_is_refused_unless_sglang_trust_remote_code_allows_it)."""
    ok = ["--log-level", "info", "--context-length", "32768",
          "--chunked-prefill-size=8192", "--max-running-requests", "64", "--enable-torch-compile",
          "--json-model-override-args", '{"rope_scaling": null}', "--watchdog-timeout", "-1"]
    assert S.extra_args_errors(ok, tables[version], version) == []


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("extra, var", [
    (["--speculative-num-steps", "2"], "sglang_speculative_num_steps"),
    (["--speculative-num-steps=2"], "sglang_speculative_num_steps"),
    (["--speculative-num-st", "2"], "sglang_speculative_num_steps"),   # the incident, via a prefix
    (["--speculative-num-d=4"], "sglang_speculative_num_draft_tokens"),
    (["--speculative-eagle", "4"], "sglang_speculative_eagle_topk"),
    (["--tensor-parallel-size", "4"], "sglang_tp_size"),
    (["--tensor-parallel", "4"], "sglang_tp_size"),
    (["--tp", "4"], "sglang_tp_size"),
    (["--pipeline-parallel-size", "2"], "sglang_pp_size"),
    (["--pp-size=2"], "sglang_pp_size"),
    (["--model", "/other"], "sglang_model_path"),
    (["--speculative-draft-model", "/other"], "sglang_draft_model_path"),
    (["--speculative-algo", "EAGLE"], "sglang_speculative_algorithm"),
    (["--port=30001"], "sglang_port"),
    (["--host", "0.0.0.0"], "sglang_host"),
    (["--mem-fraction", "0.5"], "sglang_mem_fraction_static"),
    (["--disable-cuda-graph"], "sglang_disable_cuda_graph"),
    (["--enable-metrics"], "sglang_enable_metrics"),
])
def test_anything_that_reaches_a_managed_dest_is_refused(tables, version, extra, var):
    errors = S.extra_args_errors(["--log-level", "info"] + extra, tables[version], version)
    assert len(errors) == 1, errors
    assert errors[0].startswith("sglang_extra_args[2] is %r" % extra[0])
    assert "set %s instead" % var in errors[0]


@pytest.mark.parametrize("version", RELEASES)
def test_unknown_flags_are_refused_with_a_suggestion(tables, version):
    # (--trust-remote-code, allowed here, as any plain store_true flag of every release)
    errors = S.extra_args_errors(["--enable-metric-fancy", "--trust-remote-cod"], tables[version], version,
                                 trust_remote_code=True)
    assert len(errors) == 1  # the second is a valid abbreviation of --trust-remote-code
    assert "sglang_extra_args[0] is '--enable-metric-fancy', a flag SGLang %s does not accept" % version in errors[0]
    assert "crash-loop" in errors[0]
    typo = S.extra_args_errors(["--trust-remote-cde"], tables[version], version)
    assert "did you mean --trust-remote-code?" in typo[0]


@pytest.mark.parametrize("version", RELEASES)
def test_ambiguous_prefixes_and_odd_items(tables, version):
    table = tables[version]
    amb = S.extra_args_errors(["--speculative-draft", "/x"], table, version)
    assert "an abbreviation that matches" in amb[0] and "--speculative-draft-model-path" in amb[0]
    assert "is '--', a flag" in S.extra_args_errors(["--"], table, version)[0]
    assert "a value with no flag before it" in S.extra_args_errors(["8"], table, version)[0]
    assert "every item must be a string" in S.extra_args_errors([8], table, version)[0]
    assert "takes no value" in S.extra_args_errors(["--trust-remote-code=yes"], table, version,
                                                   trust_remote_code=True)[0]


@pytest.mark.parametrize("version", RELEASES)
def test_two_batch_overlap_is_refused_in_every_release(tables, version):
    for spelling in ("--enable-two-batch-overlap", "--enable-two-batch"):
        errors = S.extra_args_errors([spelling], tables[version], version)
        assert len(errors) == 1 and "model_forward_maybe_tbo" in errors[0], errors


@pytest.mark.parametrize("version", RELEASES)
def test_model_impl_config_and_overrides_are_refused(tables, version):
    table = tables[version]
    assert "swaps SGLang's DeepseekV2" in S.extra_args_errors(["--model-impl", "transformers"], table)[0]
    assert "config file can set any flag" in S.extra_args_errors(["--config", "x.yaml"], table)[0]
    for extra in (["--json-model-override-args", '{"num_hidden_layers": 3}'],
                  ['--json-model-override-args={"architectures": ["LlamaForCausalLM"]}']):
        assert "changes which model class runs" in S.extra_args_errors(extra, table)[0]
    assert "is not JSON" in S.extra_args_errors(["--json-model-override-args", "{x"], table)[0]


SECRET = "s3cret-key-value-not-to-show"


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("extra, option, var", [
    (["--api-key", SECRET], "--api-key", "sglang_api_key"),
    (["--api-key=" + SECRET], "--api-key", "sglang_api_key"),
    (["--api-k", SECRET], "--api-key", "sglang_api_key"),
    (["--api=" + SECRET], "--api-key", "sglang_api_key"),
    (["--admin-api-key", SECRET], "--admin-api-key", "sglang_admin_api_key"),
    (["--admin-api-key=" + SECRET], "--admin-api-key", "sglang_admin_api_key"),
    (["--admin-api", "-" + SECRET], "--admin-api-key", "sglang_admin_api_key"),
])
def test_key_flags_are_refused_naming_the_variable_without_the_value(tables, version, extra, option, var):
    """Exact, abbreviated and = forms, also where a release lacks the flag (--admin-api-key before 0.5.8)."""
    errors = S.extra_args_errors(["--log-level", "info"] + extra, tables[version], version)
    assert len(errors) == 1, errors
    assert option in errors[0] and var in errors[0] and "value not shown" in errors[0]
    assert SECRET not in " ".join(errors)


@pytest.mark.parametrize("version", RELEASES)
def test_every_release_takes_the_keys_through_config(tables, version):
    """--config and --api-key in every release; --admin-api-key from 0.5.8 (read from the wheels)."""
    table = tables[version]
    assert S.key_route_errors(table, version, ["sglang_api_key"]) == []
    admin = S.key_route_errors(table, version, ["sglang_api_key", "sglang_admin_api_key"])
    if version in ("0.5.4.post2", "0.5.7"):
        assert len(admin) == 1 and "sglang_admin_api_key is set, but SGLang %s has no --admin-api-key" % version in admin[0]
    else:
        assert admin == []
    assert S.key_route_errors(table, version, []) == []


def test_a_release_without_config_is_refused_naming_it(tables):
    table = dict(tables["0.5.9"])
    table["options"] = {k: v for k, v in table["options"].items() if v["dest"] != "config"}
    errors = S.key_route_errors(table, "0.5.99", ["sglang_api_key"])
    assert len(errors) == 1 and "SGLang 0.5.99 has no --config" in errors[0] and "sglang_api_key" in errors[0]


def test_return_aux_hidden_states_flags_exist_only_in_0_5_23(tables):
    for version in RELEASES:
        errors = S.extra_args_errors(["--enable-return-aux-hidden-states"], tables[version], version)
        if version == "0.5.23":
            assert "turns the speculative algorithm off" in errors[0]
        else:
            assert "does not accept" in errors[0]
    ids = S.extra_args_errors(["--return-aux-hidden-state-layer-ids", "1", "2"], tables["0.5.23"])
    assert "overriding the draft config's eagle_aux_hidden_state_layer_ids" in ids[0]


def test_boolean_optional_action_adds_no_flags(tables):
    """BooleanOptionalAction registers --no-X too (0.5.10.post1 on); both are real flags."""
    for version in ("0.5.12.post1", "0.5.14", "0.5.23"):
        opts = tables[version]["options"]
        negated = [o for o in opts if o.startswith("--no-") and "--" + o[5:] in opts]
        assert negated, version
        assert S.extra_args_errors([negated[0]], tables[version], version) == []


def test_flags_that_came_and_went(tables):
    """The table is the release's own: a flag from a later release is unknown on an earlier one."""
    new = [o for o in tables["0.5.23"]["options"] if o not in tables["0.5.9"]["options"]]
    gone = [o for o in tables["0.5.9"]["options"] if o not in tables["0.5.23"]["options"]]
    assert new and gone
    assert "does not accept" in S.extra_args_errors([new[0]], tables["0.5.9"], "0.5.9")[0] or \
        S.resolve(tables["0.5.9"], new[0])[0] == "prefix"


def test_memo_answers_while_the_bytes_hold(tmp_path):
    site = sglang_wheels.extract_server_args("0.5.9", tmp_path / "site")
    memo = tmp_path / "memo.json"
    table, how, key = T.read_flag_table_memoized(str(site), str(memo))
    assert how == "miss" and key and not memo.exists()
    assert T.store_table_memo(str(memo), key, table) and memo.exists()
    again, how, key = T.read_flag_table_memoized(str(site), str(memo))
    assert how == "hit" and again == table and key is None
    path = site / "sglang" / "srt" / "server_args.py"
    path.write_text(path.read_text().replace('"--enable-metrics"', '"--enable-metrics-x"'))
    changed, how, _ = T.read_flag_table_memoized(str(site), str(memo))
    assert how == "miss" and "--enable-metrics-x" in changed["options"]


def test_an_unknown_layout_is_an_error_not_an_empty_table(tmp_path):
    path = tmp_path / "sglang" / "srt" / "server_args.py"
    path.parent.mkdir(parents=True)
    path.write_text("class ServerArgs:\n    @staticmethod\n    def add_cli_args(parser):\n        pass\n")
    with pytest.raises(ValueError, match="no --model-path"):
        T.read_flag_table(str(tmp_path))
    path.write_text("class Other:\n    pass\n")
    with pytest.raises(ValueError, match="no class ServerArgs"):
        T.read_flag_table(str(tmp_path))


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("arg", ["--trust-remote-code", "--trust-remote"])
def test_remote_code_is_refused_unless_sglang_trust_remote_code_allows_it(tables, version, arg):
    """The model directories' Python files would run, as the server and as root in the flag check."""
    table = tables[version]
    assert table["options"]["--trust-remote-code"]["dest"] == S.REMOTE_CODE_DEST
    (error,) = S.extra_args_errors([arg], table, version)
    assert error.startswith("sglang_extra_args[0] is '%s'" % arg) and "set sglang_trust_remote_code: true" in error
    assert "root's and writable by nobody else" in error
    assert S.extra_args_errors([arg], table, version, trust_remote_code=True) == []
