"""One detector per fact: each of these is read or spelled in one place, which everything else asks.

* which SGLang release a virtualenv holds: _distribution.find_installation (the modules, the
  memo, the change set, and tasks/install.yml through sglang_server_flags);
* a run's mode: _runmode (the rows, the textfiles, the report callback), from the variables
  the playbooks set, never from a playbook's file name;
* the parser's verdicts and exit codes: _parse_server_args (run by sglang_server_flags; the
  role reads the module's verdict);
* what a check-mode run would change: _rows.PENDING_CHANGES (the row, and tasks/service.yml
  through the pending_changes filter).

Each part has a grep-style test that no second copy exists and behaviour tests on real
release trees (tests/conftest.py's make_venv) or the module as a host runs it.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import COLLECTIONS_PATH, DIST, MEMO, MODULES, REPO, ROLE, run_module

from ansible_collections.fleetops.sglang.plugins.action import sglang_probe as probe_action  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.filter import sglang as filters  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _anchors as ANCHORS  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _parse_server_args as PARSER  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rows as ROWS  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _runmode as MODES  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _extra_args as SERVERARGS  # noqa: E402

PLUGINS = REPO / "plugins"
FLAGS_MODULE = MODULES / "sglang_server_flags.py"
TASKS = ROLE / "tasks"


def _strings(path: Path):
    """(line, text) of every string constant of a Python file but its docstrings and module docs."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            docs.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "EXAMPLES",
                                                                                      "RETURN") for t in node.targets):
            docs.add(id(node.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _tasks(node):
    """Every task of a task file, blocks opened."""
    for task in node or []:
        yield task
        for part in ("block", "rescue", "always"):
            yield from _tasks(task.get(part))


def _task(path: Path, name: str) -> dict:
    found = [t for t in _tasks(yaml.safe_load(path.read_text())) if t.get("name") == name]
    assert len(found) == 1, (path, name)
    return found[0]


# ------------------------------------------------------------------ the installed release

LAYOUT = ("dist-info", "site-packages", "python3*", "METADATA")


def test_only_distribution_spells_where_a_release_is_installed():
    """No second detector: the venv layout, the dist-info and its METADATA are spelled in _distribution only."""
    found = [(str(path.relative_to(REPO)), line, text) for path in sorted(PLUGINS.rglob("*.py"))
             if path.name != "_distribution.py" for line, text in _strings(path) if any(m in text for m in LAYOUT)]
    assert found == []
    for path in sorted(ROLE.rglob("*.yml")):
        text = path.read_text()
        assert "dist-info" not in text and "site-packages/" not in text and "python3*" not in text, path


def test_no_inline_python_in_the_role():
    """The role runs no Python of its own on a host: modules do (tasks/install.yml, tasks/configure.yml)."""
    for path in sorted(ROLE.rglob("*.yml")):
        text = path.read_text()
        assert not re.search(r"python\S*\s+-c\b", text), path
        assert not re.search(r"^\s*-\s+-c\s*$", text, re.M), path
        for task in _tasks(yaml.safe_load(text) if path.parent.name in ("tasks", "handlers") else []):
            for action in ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw",
                           "ansible.builtin.script", "command", "shell", "raw", "script"):
                assert "python" not in json.dumps(task.get(action, "")), (path, task.get("name"))


def test_find_installation_reads_a_real_release(make_venv):
    venv = make_venv("0.5.9")
    inst = DIST.find_installation(str(venv))
    assert (inst.name, inst.version) == ("sglang", "0.5.9")
    assert inst.site_packages == str(next(venv.glob("lib/python3*/site-packages")))
    assert os.path.basename(inst.dist_info) == "sglang-0.5.9.dist-info"
    # RECORD's sha256 of the file the engine patches is the file as the wheel shipped it.
    with open(inst.path(DIST.DEEPSEEK_FILE), "rb") as fh:
        assert inst.record[DIST.DEEPSEEK_FILE] == hashlib.sha256(fh.read()).hexdigest()
    light = DIST.find_installation(str(venv), record=False)
    assert light.record == {} and (light.version, light.site_packages, light.dist_info) == (
        inst.version, inst.site_packages, inst.dist_info)


def test_find_installation_tells_no_install_from_a_broken_one(make_venv, tmp_path):
    with pytest.raises(DIST.NotInstalled, match="no sglang package"):
        DIST.find_installation(str(tmp_path / "fresh"))
    venv = make_venv("0.5.9")
    site = next(venv.glob("lib/python3*/site-packages"))
    info = site / "sglang-0.5.9.dist-info"
    shutil.copytree(str(info), str(site / "sglang-0.5.8.dist-info"))
    with pytest.raises(DIST.EngineError, match="expected one sglang-"):
        DIST.find_installation(str(venv))
    shutil.rmtree(str(site / "sglang-0.5.8.dist-info"))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\n\nVersion: 9\n")
    with pytest.raises(DIST.EngineError, match="no Version"):
        DIST.find_installation(str(venv))
    (info / "METADATA").unlink()
    with pytest.raises(DIST.EngineError, match="cannot read .*METADATA") as broken:
        DIST.find_installation(str(venv))
    assert not isinstance(broken.value, DIST.NotInstalled)


def test_the_audit_memo_is_keyed_on_what_the_reader_reads(make_venv):
    venv = str(make_venv("0.5.14"))
    inputs = MEMO.audit_inputs(venv)
    # The files the engine patches, and those it checks against the published wheel (_anchors.FILES).
    assert inputs == DIST.installation_inputs(venv, ANCHORS.FILES)
    assert set(DIST.TARGET_FILES) <= set(ANCHORS.FILES)
    inst = DIST.find_installation(venv)
    assert os.path.join(inst.dist_info, "METADATA") in inputs and os.path.join(inst.dist_info, "RECORD") in inputs
    assert [p for p in inputs if p.startswith("glob:")] == ["glob:" + os.path.join(inst.site_packages, "sglang"),
                                                            "glob:" + inst.dist_info]


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_server_flags_module_reports_the_release_as_find_installation_reads_it(make_venv, tmp_path, check_mode):
    """What tasks/install.yml asks in check mode: the module with nothing to check only reads the release."""
    venv = make_venv("0.5.12.post1")
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(venv=str(venv)), check_mode=check_mode)
    assert rc == 0 and res["release"] == DIST.find_installation(str(venv)).version == "0.5.12.post1", res
    assert res["changed"] is False and res["errors"] == [] and "resolved" not in res
    site = next(venv.glob("lib/python3*/site-packages"))
    shutil.copytree(str(site / "sglang-0.5.12.post1.dist-info"), str(site / "sglang-0.5.9.dist-info"))
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(venv=str(venv)), check_mode=check_mode)
    assert rc == 0 and res["release"] is None and "expected one sglang-*.dist-info" in res["reason"], res
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(venv=str(tmp_path / "none")), check_mode=check_mode)
    assert rc == 0 and res["release"] is None and res["reason"].startswith("no SGLang installed in "), res


def test_install_yml_builds_only_into_the_release_the_plan_names():
    """One plan (sglang_release, read-only, also in check mode) says which release is deployed and
    whether it is built; pip installs into that release's directory only then, never into the link."""
    install = TASKS / "install.yml"
    plan = _task(install, "Find the release this run deploys")
    assert plan["fleetops.sglang.sglang_release"]["state"] == "planned" and plan["register"] == "_sglang_release"
    assert plan["check_mode"] is False and "always" in plan["tags"]
    pip = _task(install, "Install the pinned SGLang into the new release's virtualenv")
    assert pip["ansible.builtin.pip"]["virtualenv"] == "{{ _sglang_release.dir }}"
    assert pip["when"] == ["_sglang_release.build"]


# ------------------------------------------------------------------ the run's mode

def test_the_mode_follows_the_two_variables():
    assert MODES.RUN_MODES == (MODES.REMEDIATE, MODES.AUDIT, MODES.ROLLBACK) == ("remediate", "audit", "rollback")
    assert MODES.run_mode(False) == MODES.REMEDIATE and MODES.run_mode(True) == MODES.AUDIT
    assert MODES.run_mode(False, rollback=True) == MODES.run_mode(True, rollback=True) == MODES.ROLLBACK
    # The rows use that function, the callback too.
    assert ROWS.run_mode is MODES.run_mode


@pytest.mark.parametrize("path", ["plugins/plugin_utils/_rows.py", "plugins/callback/sglang_report.py",
                                  "plugins/action/sglang_probe.py", "plugins/modules/sglang_metrics.py"])
def test_no_second_spelling_of_the_mode_words(path):
    words = {MODES.REMEDIATE, MODES.AUDIT}
    assert [(line, text) for line, text in _strings(REPO / path) if text in words] == []


def test_the_callback_derives_nothing_from_the_playbook_name():
    source = (PLUGINS / "callback" / "sglang_report.py").read_text()
    tree = ast.parse(source)
    start = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "v2_playbook_on_start")
    assert not any(isinstance(n, ast.Attribute) and n.attr == "mode" for n in ast.walk(start))
    assert "splitext(self.playbook)" not in source


def test_the_playbooks_say_the_mode_in_the_variables_the_rows_read():
    plays = {name: yaml.safe_load((REPO / "playbooks" / name).read_text()) for name in ("audit.yml", "rollback.yml")}
    fleet = [p for p in plays["audit.yml"] if "sglang_needs_work" in str(p.get("hosts")) or
             (p.get("vars") or {}).get("sglang_fleet_report") == "pass"]
    assert fleet and all(p["vars"]["sglang_audit"] is True for p in fleet)
    assert plays["rollback.yml"][0]["vars"]["_sglang_rollback_run"] is True
    # The run record (report.yml) takes the mode from those same variables.
    record = yaml.safe_load((TASKS / "report.yml").read_text())[0]["vars"]["_sglang_run_now"]
    assert record["audit"] == "{{ sglang_audit | bool }}"
    assert "_sglang_rollback_run" in record["rollback_run"]


def test_the_probes_textfile_gets_the_rows_mode():
    assert "'mode'" not in (TASKS / "probe.yml").read_text()
    spec = {"path": "/x.prom", "state_file": "/s.json"}
    assert probe_action.textfile_args(spec, audit=True) == dict(spec, mode=MODES.AUDIT)
    assert probe_action.textfile_args(spec, audit=False)["mode"] == MODES.REMEDIATE
    assert probe_action.textfile_args(dict(spec, mode=MODES.ROLLBACK), audit=True)["mode"] == MODES.ROLLBACK
    assert ROWS.probe_row("h", "0.5.9", {"release": "0.5.9"}, {}, audit=True)["mode"] == MODES.AUDIT


@pytest.mark.parametrize("module", ["sglang_metrics.py", "sglang_probe.py"])
def test_the_modules_accept_the_vocabulary_and_nothing_else(module):
    doc = yaml.safe_load(ast.literal_eval(next(
        n.value for n in ast.walk(ast.parse((MODULES / module).read_text()))
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in n.targets))))
    option = doc["options"]["mode"] if "mode" in doc["options"] else doc["options"]["textfile"]["suboptions"]["mode"]
    assert option["choices"] == list(MODES.RUN_MODES) and option["default"] == MODES.REMEDIATE


def test_the_metrics_module_refuses_a_word_outside_the_vocabulary(tmp_path):
    rc, res = run_module(MODULES / "sglang_metrics.py", tmp_path, dict(
        path=str(tmp_path / "x.prom"), state_file=str(tmp_path / "s.json"), compliant=True, mode="check"))
    assert rc != 0 and "mode" in res["msg"] and "remediate, audit, rollback" in res["msg"], res


# ------------------------------------------------------------------ the parser's verdicts

def test_the_verdicts_and_exit_codes_are_spelled_in_the_parser_only():
    assert set(PARSER.EXIT_STATUS) == {PARSER.OK, PARSER.REFUSED, PARSER.UNAVAILABLE}
    assert len(set(PARSER.EXIT_STATUS.values())) == 3 and PARSER.EXIT_STATUS[PARSER.OK] == 0
    configure = (TASKS / "configure.yml").read_text()
    assert ".rc" not in configure and not re.search(r"\[\s*0\s*,\s*3\s*,\s*4\s*\]", configure)
    assert "'unavailable'" not in configure and "'refused'" not in configure
    # ("ok" is also the row's health: the words that are the parser's alone, and its exit status.)
    for path in ("plugins/plugin_utils/_rows.py", "plugins/modules/sglang_server_flags.py"):
        assert [(n, t) for n, t in _strings(REPO / path) if t in (PARSER.REFUSED, PARSER.UNAVAILABLE, "rc")] == [], path
    tree = ast.parse(FLAGS_MODULE.read_text())
    assert any(isinstance(n, ast.ImportFrom) and n.module.endswith("module_utils") and
               any(a.name == "_parse_server_args" for a in n.names) for n in ast.walk(tree)
               if isinstance(n, ast.ImportFrom) and n.module)


def test_the_parser_runs_alone_with_nothing_of_the_collection():
    tree = ast.parse((PLUGINS / "module_utils" / "_parse_server_args.py").read_text(), feature_version=(3, 9))
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "ansible_collections" not in modules and "ansible" not in modules
    assert modules <= {"argparse", "contextlib", "io", "json", "logging", "sys", "warnings", "sglang", "torch"}


STUB = """#!{python}
import json, os, sys
with open(os.environ["STUB_ARGV"], "w") as fh:
    json.dump(sys.argv[1:], fh)
print(os.environ["STUB_OUT"])
sys.exit(int(os.environ["STUB_RC"]))
"""


@pytest.fixture
def stub_python(tmp_path, monkeypatch):
    """A python for O(python) that records its argv and answers what the test sets."""
    path = tmp_path / "stub-python"
    path.write_text(STUB.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv("STUB_ARGV", str(tmp_path / "argv.json"))

    def answer(rc, out):
        monkeypatch.setenv("STUB_RC", str(rc))
        monkeypatch.setenv("STUB_OUT", out if isinstance(out, str) else json.dumps(out))
        return str(path)

    return answer


def test_the_module_hands_the_parser_its_own_source_and_maps_each_verdict(make_venv, tmp_path, stub_python):
    venv = str(make_venv("0.5.9"))
    args = dict(venv=venv, required=True, extra_args=["--log-level", "info"], resolve=["--model-path", "/m",
                                                                                        "--log-level", "info"])
    ok = {"status": PARSER.OK, "msg": "as rendered", "differences": [], "warnings": ["w1"], "device": "cpu"}
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(args, python=stub_python(PARSER.EXIT_STATUS[PARSER.OK], ok)))
    assert rc == 0 and res["resolved"] is True and res["resolution"] == ok, res
    sent = json.loads((tmp_path / "argv.json").read_text())
    assert sent[0] == "-c" and sent[1] == (PLUGINS / "module_utils" / "_parse_server_args.py").read_text()
    assert json.loads(sent[2]) == {"argv": args["resolve"], "extra": 2, "variables": dict(SERVERARGS.MANAGED_FLAGS)}

    gone = {"status": PARSER.UNAVAILABLE, "msg": "ModuleNotFoundError: No module named 'torch'"}
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(
        args, python=stub_python(PARSER.EXIT_STATUS[PARSER.UNAVAILABLE], gone)))
    assert rc == 0 and res["resolved"] is False and res["resolution"]["msg"] == gone["msg"], res

    refused = {"status": PARSER.REFUSED, "msg": "SGLang would silently run other values than the role rendered: x",
               "warnings": ["adjusted"]}
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(
        args, python=stub_python(PARSER.EXIT_STATUS[PARSER.REFUSED], refused)))
    assert rc != 0 and res["failed"] and res["msg"] == refused["msg"] and res["resolution"]["warnings"] == ["adjusted"]

    for code, out in ((1, "Traceback (most recent call last): boom"), (PARSER.EXIT_STATUS[PARSER.OK], refused)):
        rc, res = run_module(FLAGS_MODULE, tmp_path, dict(args, python=stub_python(code, out)))
        assert rc != 0 and "SGLang's ServerArgs gave no verdict on the launch flags" in res["msg"], res


def test_the_real_parser_says_unavailable_where_sglang_cannot_be_imported(make_venv, tmp_path):
    """This machine's Python has no SGLang (as hosts without torch cannot import its ServerArgs)."""
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(venv=str(make_venv("0.5.9")), python=sys.executable,
                                                      resolve=["--model-path", "/m"], required=True))
    assert rc == 0 and res["resolved"] is False and res["resolution"]["status"] == PARSER.UNAVAILABLE, res
    assert "No module named 'sglang" in res["resolution"]["msg"]


def test_a_missing_python_fails_naming_it(make_venv, tmp_path):
    rc, res = run_module(FLAGS_MODULE, tmp_path, dict(venv=str(make_venv("0.5.9")), resolve=["--model-path", "/m"]))
    assert rc != 0 and "no Python at %s" % os.path.join(str(tmp_path / "venv-0.5.9"), "bin", "python") in res["msg"]


def test_configure_yml_resolves_through_the_module():
    configure = TASKS / "configure.yml"
    check = _task(configure, "Refuse launch flags, and keys, the installed release would not run as rendered")
    assert check["register"] == "_sglang_parse" and "resolve" in check["fleetops.sglang.sglang_server_flags"]
    say = _task(configure, "Say that SGLang's parser could not be imported here")
    assert say["when"] == ["not (_sglang_parse.resolved | default(true))"]


# ------------------------------------------------------------------ what check mode would change

RESULTS = {"fix": {"changed": True}, "draft": None, "unit": {"changed": True}, "environment": {"skipped": True},
           "api_keys": {"changed": True}}


def test_pending_changes_name_each_result_that_would_change_in_order():
    assert ROWS.pending_changes(RESULTS, check_mode=True) == [
        "SGLang source would change", "unit would change", "API key file would change"]
    assert ROWS.pending_changes(RESULTS, check_mode=False) == []
    assert ROWS.pending_changes(RESULTS, check_mode=True, audit=True) == []
    assert ROWS.pending_changes({}, check_mode=True) == [] and ROWS.pending_changes(None, check_mode=True) == []
    assert [t for _, t in ROWS.PENDING_CHANGES] == ["SGLang source would change", "draft config would change",
                                                    "unit would change", "environment would change",
                                                    "API key file would change"]


def test_the_filter_and_the_row_give_the_same_list():
    via_filter = filters.FilterModule().filters()["pending_changes"](RESULTS, check_mode=True, audit=False)
    row = ROWS.remediation_row("h", "0.5.9", fix=RESULTS["fix"], draft=RESULTS["draft"], unit=RESULTS["unit"],
                               environment=RESULTS["environment"], api_keys=RESULTS["api_keys"], check_mode=True)
    assert via_filter == row["restart_reasons"] == ROWS.pending_changes(RESULTS, True)


def test_the_would_change_words_live_in_rows_only():
    texts = [t for _, t in ROWS.PENDING_CHANGES]
    allowed = {PLUGINS / "plugin_utils" / "_rows.py", PLUGINS / "filter" / "pending_changes.yml"}
    for path in sorted(list(PLUGINS.rglob("*.py")) + list(PLUGINS.rglob("*.yml")) + list(ROLE.rglob("*"))):
        if path.is_file() and path not in allowed:
            text = path.read_text()
            assert not any(t in text for t in texts), path
    service = (TASKS / "service.yml").read_text()
    assert "fleetops.sglang.pending_changes(check_mode=ansible_check_mode" in service


def test_service_yml_gets_the_list_through_ansible(tmp_path):
    """The service.yml expression, rendered by Ansible itself with the collection on its path."""
    decide = _task(TASKS / "service.yml", "Decide whether to restart {{ sglang_service_name }}")
    expr = decide["vars"]["_sglang_pending"]
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "ansible.builtin.debug": {"msg": "PENDING={{ _sglang_pending | to_json }}"},
        "vars": {"_sglang_pending": expr, "_sglang_fix": {"changed": True}, "_sglang_draft": {"changed": False},
                 "_sglang_unit": {"changed": True}, "_sglang_env": None, "_sglang_keys": {"changed": True},
                 "_sglang_key_vars": ["sglang_api_key"], "sglang_audit": False}}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_HOME=str(tmp_path / "home"))
    ansible_playbook = str(Path(sys.executable).parent / "ansible-playbook")
    out = {}
    for check in (True, False):
        proc = subprocess.run([ansible_playbook, "-i", "localhost,", "-c", "local", str(play)]
                              + (["--check"] if check else []), capture_output=True, text=True, env=env,
                              cwd=str(tmp_path), timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out[check] = json.loads(re.search(r"PENDING=(\[.*?\])", proc.stdout).group(1).replace('\\"', '"'))
    assert out[True] == ["SGLang source would change", "unit would change", "API key file would change"]
    assert out[False] == []


@pytest.mark.parametrize("kind, name, text", [
    ("filter", "pending_changes", "POSITIONAL: _input, check_mode, audit"),
    ("module", "sglang_server_flags", "resolution"),
    ("module", "sglang_metrics", "rollback"),
    ("module", "sglang_probe", "rollback"),
    ("callback", "sglang_report", "_sglang_rollback_run"),
])
def test_the_plugins_documentation_reads(tmp_path, kind, name, text):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH), ANSIBLE_NOCOLOR="1",
               ANSIBLE_HOME=str(tmp_path / "home"))
    ansible_doc = str(Path(sys.executable).parent / "ansible-doc")
    proc = subprocess.run([ansible_doc, "-t", kind, "fleetops.sglang." + name], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0 and text in proc.stdout, proc.stdout + proc.stderr
