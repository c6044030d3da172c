"""plugins/modules/sglang_draft_config.py, run as Ansible runs it: a separate
process reading its args, on a copy of a real-shaped draft model directory."""

from __future__ import annotations

import ast
import grp
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import COLLECTIONS_PATH, FILEIO, REPO, run_module
from safetensors_fixture import DEEPSEEK_V3_EAGLE3_TENSORS, write_safetensors

ROOT = str(REPO)
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_draft_config.py")
FIXTURES = os.path.join(ROOT, "files", "models")
TARGET = os.path.join(FIXTURES, "deepseek-v3")

KEY = "eagle_aux_hidden_state_layer_ids"


@pytest.fixture
def draft(tmp_path):
    d = tmp_path / "deepseek-v3-eagle3"
    d.mkdir()
    shutil.copy(os.path.join(FIXTURES, "deepseek-v3-eagle3", "config.json"), str(d / "config.json"))
    os.chmod(str(d / "config.json"), 0o640)
    if os.getuid() == 0:
        # As model storage is shared: its group (not root's) reads it, which root may then read too.
        os.chown(str(d / "config.json"), 0, grp.getgrnam("nogroup").gr_gid)
    write_safetensors(str(d / "model.safetensors"), DEEPSEEK_V3_EAGLE3_TENSORS)
    return d


def run(tmp_path, check_mode=False, diff=False, **args):
    """Run the module; return (rc, result dict)."""
    return run_module(MODULE, tmp_path, args, check_mode=check_mode, diff=diff, timeout=60)


def config_of(draft):
    return json.loads((draft / "config.json").read_text())


def sha(path):
    return hashlib.sha256(open(str(path), "rb").read()).hexdigest()


def test_module_is_python39_syntax():
    ast.parse(open(MODULE).read(), feature_version=(3, 9))


def test_writes_ids_and_keeps_everything_else(tmp_path, draft):
    original_text = (draft / "config.json").read_text()
    original = json.loads(original_text)
    rc, res = run(
        tmp_path,
        path=str(draft),
        layer_ids=[-1, 2, 30],
        user_layer_ids=[-1, 2, 30],
        target_model_path=TARGET,
    )
    assert rc == 0, res
    assert res["changed"] is True
    assert res["layer_ids_before"] is None  # the fixture's typo'd key is not read
    assert res["layer_ids_after"] == [-1, 2, 30]
    assert res["expected_count"] == 3 and res["num_hidden_layers"] == 61
    assert "eagle_config.eagle_aux_hidden_state_layers_ids is ignored" in json.dumps(res.get("warnings"))

    new = config_of(draft)
    assert new["eagle_config"][KEY] == [-1, 2, 30]
    # Every other key, its value and the key order are unchanged.
    assert list(new) == list(original)
    for key in original:
        if key != "eagle_config":
            assert new[key] == original[key]
    assert new["eagle_config"]["use_aux_hidden_state"] is True
    assert new["eagle_config"]["eagle_aux_hidden_state_layers_ids"] == [-1, 2, 30]
    text = (draft / "config.json").read_text()
    assert text.startswith('{\n  "architectures"') and text.endswith("}\n")
    assert stat.S_IMODE(os.stat(str(draft / "config.json")).st_mode) == 0o640
    assert res["sha256_before"] == hashlib.sha256(original_text.encode()).hexdigest()
    assert res["sha256_after"] == sha(draft / "config.json")

    # No temp file and no backup next to config.json (the run's change set keeps the previous one).
    assert sorted(os.listdir(str(draft))) == ["config.json", "model.safetensors"]
    assert "backup" not in res


def test_rerun_is_idempotent(tmp_path, draft):
    rc, first = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30])
    assert rc == 0 and first["changed"]
    mtime = os.stat(str(draft / "config.json")).st_mtime_ns
    rc, second = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30])
    assert rc == 0 and second["changed"] is False and second["compliant"] is True
    assert os.stat(str(draft / "config.json")).st_mtime_ns == mtime


@pytest.mark.parametrize("where", ["the target itself", "the target through a symlink", "inside the target",
                                   "around the target"])
def test_a_draft_directory_that_is_the_targets_is_refused_and_nothing_is_written(tmp_path, where):
    """The draft's ids would land in the target's config.json, and the target would serve as its own draft."""
    target = tmp_path / "DeepSeek-V3"
    shutil.copytree(TARGET, str(target))
    before = (target / "config.json").read_bytes()
    if where == "the target itself":
        path = target
    elif where == "the target through a symlink":
        path = tmp_path / "draft-link"
        os.symlink(str(target), str(path))
    elif where == "inside the target":
        path = target / "eagle3"
        path.mkdir()
        shutil.copy(os.path.join(FIXTURES, "deepseek-v3-eagle3", "config.json"), str(path / "config.json"))
    else:
        path = tmp_path / "outer"
        path.mkdir()
        shutil.copy(os.path.join(FIXTURES, "deepseek-v3-eagle3", "config.json"), str(path / "config.json"))
        inner = path / "target"
        shutil.copytree(str(target), str(inner))
        target, before = inner, (inner / "config.json").read_bytes()
    for state in ("audit", "present"):
        rc, res = run(tmp_path, path=str(path), layer_ids=[-1, 2, 30], user_layer_ids=[-1, 2, 30],
                      target_model_path=str(target), state=state)
        assert rc != 0, res
        assert "sglang_draft_model_path=%s" % path in res["msg"] and "sglang_model_path=%s" % target in res["msg"]
        assert ("the target's own directory" in res["msg"]) == where.startswith("the target"), res["msg"]
    assert (target / "config.json").read_bytes() == before


def test_a_draft_config_that_is_not_an_eagle3_drafts_is_refused(tmp_path):
    """A copy of the target (architectures DeepseekV3ForCausalLM, no eagle_config) is not a draft."""
    copy = tmp_path / "not-a-draft"
    shutil.copytree(TARGET, str(copy))
    before = (copy / "config.json").read_bytes()
    rc, res = run(tmp_path, path=str(copy), layer_ids=[-1, 2, 30], target_model_path=TARGET)
    assert rc != 0 and "is not an EAGLE-3 draft (it looks like a target: deepseek_v3)" in res["msg"], res
    assert (copy / "config.json").read_bytes() == before
    # An EAGLE-3 architecture, or an eagle_config, is what makes one.
    for config in ({"architectures": ["Eagle3DeepseekV2ForCausalLM"]}, {"eagle_config": {}}):
        (copy / "config.json").write_text(json.dumps(config))
        rc, res = run(tmp_path, path=str(copy), layer_ids=[-1, 2, 30])
        assert rc == 0, res


def test_check_mode_writes_nothing_and_shows_diff(tmp_path, draft):
    before = sha(draft / "config.json")
    rc, res = run(tmp_path, check_mode=True, diff=True, path=str(draft), layer_ids=[-1, 2, 30])
    assert rc == 0 and res["changed"] is True
    assert sha(draft / "config.json") == before
    assert json.loads(res["diff"]["after"])["eagle_config"][KEY] == [-1, 2, 30]
    assert res["diff"]["before"] == (draft / "config.json").read_text()


def test_audit_reports_without_writing(tmp_path, draft):
    before = sha(draft / "config.json")
    rc, res = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30], state="audit")
    assert rc == 0 and res["changed"] is False and res["compliant"] is False
    assert sha(draft / "config.json") == before
    run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30])
    rc, res = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30], state="audit")
    assert res["compliant"] is True


def test_creates_eagle_config_when_absent(tmp_path, draft):
    config = config_of(draft)
    del config["eagle_config"]
    (draft / "config.json").write_text(json.dumps(config, indent=4))
    rc, res = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30])
    assert rc == 0 and res["changed"]
    text = (draft / "config.json").read_text()
    assert text.startswith('{\n    "architectures"')  # 4-space indent kept
    new = json.loads(text)
    assert list(new)[-1] == "eagle_config" and new["eagle_config"] == {KEY: [-1, 2, 30]}
    assert list(new)[:-1] == list(config)


def test_not_json_is_refused_untouched(tmp_path, draft):
    (draft / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"],')
    before = sha(draft / "config.json")
    rc, res = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30])
    assert rc != 0 and res["failed"]
    assert str(draft / "config.json") in res["msg"] and "not valid JSON" in res["msg"]
    assert sha(draft / "config.json") == before


def test_json_array_is_refused(tmp_path, draft):
    (draft / "config.json").write_text("[1, 2]")
    rc, res = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30])
    assert rc != 0 and "must hold a JSON object" in res["msg"]


def test_missing_config_names_the_file(tmp_path):
    empty = tmp_path / "nodraft"
    empty.mkdir()
    rc, res = run(tmp_path, path=str(empty), layer_ids=[-1, 2, 30])
    assert rc != 0 and str(empty / "config.json") in res["msg"]


@pytest.mark.parametrize(
    "user_ids, needle",
    [
        (["2"], "sglang_eagle3_layer_ids[0] is '2' (str)"),
        ([True], "sglang_eagle3_layer_ids[0] is True (bool)"),
        ([2, -1, 30], "sglang_eagle3_layer_ids must be ascending"),
        ([-1, -1, 2], "sglang_eagle3_layer_ids has duplicate ids [-1]"),
        ([-1, 2, 61], "the target model has 61 hidden layers"),
        ([-1, 30], "the draft model's fc layer takes 3 hidden states"),
    ],
)
def test_user_id_mistakes_are_refused_and_file_untouched(tmp_path, draft, user_ids, needle):
    before = sha(draft / "config.json")
    rc, res = run(
        tmp_path,
        path=str(draft),
        layer_ids=[-1, 2, 30],
        user_layer_ids=user_ids,
        target_model_path=TARGET,
    )
    assert rc != 0 and res["failed"]
    assert any(needle in e for e in res["errors"]), res["errors"]
    assert sha(draft / "config.json") == before
    assert not (tmp_path / "backup").exists()


def test_layer_ids_are_not_coerced(tmp_path, draft):
    rc, res = run(tmp_path, path=str(draft), layer_ids=["-1", "2", "30"])
    assert rc != 0 and "layer_ids[0] is '-1' (str)" in res["errors"][0]


def test_symlinked_config_is_replaced_not_the_blob(tmp_path, draft):
    """Hugging Face cache snapshots link config.json to a shared blob of their repository."""
    repo = tmp_path / "hub" / "models--org--draft"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.parent.mkdir()
    os.rename(str(draft), str(snapshot))
    blob = repo / "blobs" / "cfg"
    shutil.move(str(snapshot / "config.json"), str(blob))
    os.symlink("../../blobs/cfg", str(snapshot / "config.json"))
    blob_sha = sha(blob)
    rc, res = run(tmp_path, path=str(snapshot), layer_ids=[-1, 2, 30])
    assert rc == 0 and res["changed"], res
    assert sha(blob) == blob_sha
    assert not os.path.islink(str(snapshot / "config.json"))
    assert config_of(snapshot)["eagle_config"][KEY] == [-1, 2, 30]


def test_a_config_linked_out_of_the_drafts_tree_is_refused_untouched(tmp_path, draft):
    """Whoever writes model storage may point config.json at a file root can read: refused, on the file opened."""
    outside = tmp_path / "elsewhere.json"
    shutil.move(str(draft / "config.json"), str(outside))
    os.symlink(str(outside), str(draft / "config.json"))
    before = sha(outside)
    rc, res = run(tmp_path, path=str(draft), layer_ids=[-1, 2, 30])
    assert rc != 0 and "outside the model's tree" in res["msg"] and "left untouched" in res["msg"], res
    assert sha(outside) == before and os.path.islink(str(draft / "config.json"))


ANSIBLE = os.path.join(ROOT, ".venv", "bin", "ansible")


@pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="no ansible in .venv")
def test_through_ansible_adhoc(tmp_path, draft):
    """End to end: AnsiballZ must ship the role's module_utils with the module."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",  # "localhost | CHANGED => {json}"
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
    )
    args = json.dumps(
        {
            "path": str(draft),
            "layer_ids": [-1, 2, 30],
            "target_model_path": TARGET,
        }
    )
    proc = subprocess.run(
        [ANSIBLE, "localhost", "-c", "local", "-i", "localhost,", "-m", "fleetops.sglang.sglang_draft_config", "-a", args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),  # no project ansible.cfg: its callbacks would print around the JSON
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    head, _, body = proc.stdout.partition(" => ")
    assert head.strip() == "localhost | CHANGED", proc.stdout
    host_result = json.loads(body)
    assert host_result["changed"] is True
    assert host_result["layer_ids_after"] == [-1, 2, 30]
    assert config_of(draft)["eagle_config"][KEY] == [-1, 2, 30]


def test_atomic_write_keeps_mode_and_cleans_up_on_failure(tmp_path, monkeypatch):
    dest = tmp_path / "config.json"
    dest.write_text("old")
    os.chmod(str(dest), 0o600)
    like = os.stat(str(dest))
    FILEIO.atomic_write(str(dest), b"new", like=like, owner="strict", durable=True)
    assert dest.read_text() == "new" and stat.S_IMODE(os.stat(str(dest)).st_mode) == 0o600

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(FILEIO.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        FILEIO.atomic_write(str(dest), b"newer", like=like, owner="strict", durable=True)
    assert dest.read_text() == "new"
    assert os.listdir(str(tmp_path)) == ["config.json"]
