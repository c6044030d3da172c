"""One change set per run (module_utils/_changeset.py), on real SGLang release trees.

Each test opens a set as the role does before its first write, changes the host the
way a run would (install another release, patch through the engine with the set,
rewrite and create configuration files), then restores or closes it and checks the
bytes, modes and owners that come back, and what the report is told.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import USER_IDS, E, sha, site_file
from ansible_collections.fleetops.sglang.plugins.module_utils import _changeset as CS
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import DEEPSEEK_FILE, TARGET_FILES

PIP = {"args": ["--no-deps", "--no-index", "--find-links", "/var/cache/sglang/wheelhouse"]}


def layout(tmp_path: Path):
    """The configuration files a run writes, two of them already there."""
    draft = tmp_path / "models" / "draft" / "config.json"
    draft.parent.mkdir(parents=True)
    draft.write_text('{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}}\n')
    draft.chmod(0o640)
    unit = tmp_path / "etc" / "sglang.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/old --speculative-num-steps 7\n")
    env = tmp_path / "etc" / "sglang" / "sglang.env"      # absent: the run creates it
    running = tmp_path / "state" / "running.json"          # absent: never gated before
    return draft, unit, env, running


def open_for(tmp_path: Path, venv: Path, files, **over):
    args = dict(state_dir=str(tmp_path / "state"), run_id="run-1", files=[str(f) for f in files], venv=str(venv),
                pip=PIP, dirs=[str(tmp_path / "etc" / "sglang")], user="nobody", group="nogroup",
                service={"active": True, "enabled": True})
    args.update(over)
    return CS.open_set(**args)


def no_pip(argv):
    raise AssertionError("pip must not run: %s" % argv)


def test_a_failed_run_on_the_same_release_gets_every_file_back_byte_for_byte(tmp_path, make_venv, patches):
    venv = make_venv("0.5.9")
    draft, unit, env, running = files = layout(tmp_path)
    before = {p: (p.read_bytes(), p.stat().st_mode & 0o777) for p in (draft, unit)}
    deepseek = site_file(venv, DEEPSEEK_FILE)
    pristine = deepseek.read_bytes()
    sources = {site_file(venv, rel): site_file(venv, rel).read_bytes() for rel in TARGET_FILES}
    opened = open_for(tmp_path, venv, files)
    assert (Path(opened["dir"]).stat().st_mode & 0o777) == 0o700
    assert opened["release"] == "0.5.9"  # the pinned release already there: a no-deps install has nothing to do
    # The run: the engine patches through the set, the configuration is rewritten and created.
    fix = E.run(E.Request(venv=str(venv), layer_ids=USER_IDS, patches=patches, state="present",
                          backup_dir=str(tmp_path / "backup"), changeset=opened["dir"]))
    assert not fix["failed"] and fix["changed"], fix["msg"]
    draft.write_text('{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}}\n')
    unit.write_text("[Service]\nExecStart=/new --speculative-num-steps 15\n")
    unit.chmod(0o600)
    env.parent.mkdir()
    env.write_text("HF_TOKEN=secret\n")
    running.write_text("{}\n")
    # 0.5.9 takes the CUDA-graph companion too: every file the engine wrote is in the set.
    assert {e["path"] for e in CS.load(opened["dir"])["entries"] if e.get("by") == "sglang_eagle3"} == {
        str(p) for p in sources}
    for blob in Path(opened["dir"]).glob("blob-*"):
        assert blob.stat().st_mode & 0o777 == 0o600

    out = CS.restore_set(opened["dir"], no_pip)
    assert {p: p.read_bytes() for p in sources} == sources
    for path, (data, mode) in before.items():
        assert path.read_bytes() == data and path.stat().st_mode & 0o777 == mode
    assert not env.exists() and not running.exists()
    assert "%s restored to sha256 %s (0644 " % (unit, sha_of(before[unit][0])) in "\n".join(out["restored"])
    assert "%s removed (it did not exist before)" % env in out["restored"]
    assert "%s restored to sha256 %s" % (deepseek, sha_of(pristine)) in "\n".join(out["restored"])
    assert out["left"] == ["%s (created by this run)" % env.parent]
    # The records callers read say the same as the lines, one per line, in the same order.
    files = {f["path"]: f for f in out["files"]}
    assert len(out["files"]) == len(out["restored"]) and [f["path"] for f in out["files"]] == [
        line.split(" ", 1)[0] for line in out["restored"]]
    assert files[str(unit)] == {"path": str(unit), "sha256": sha_of(before[unit][0]), "mode": "0644",
                                "owner": files[str(unit)]["owner"]}
    assert files[str(env)] == {"path": str(env), "sha256": None, "mode": None, "owner": None}
    assert files[str(deepseek)]["sha256"] == sha_of(pristine)
    assert CS.load(opened["dir"])["state"] == "restored"
    # Nothing left to put back: a second restore changes nothing.
    assert CS.restore_set(opened["dir"], no_pip)["restored"] == []


def sha_of(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()


def test_a_fresh_host_keeps_the_venv_listed_and_gets_the_pristine_file(tmp_path, release_tree, patches):
    draft, unit, env, running = files = layout(tmp_path)
    empty = tmp_path / "no-venv-yet"
    opened = open_for(tmp_path, empty, files)
    release = CS.load(opened["dir"])["entries"][0]
    assert release["kind"] == "release" and release["version"] is None and release["sources"] == []
    assert opened["release"] is None  # what the role's install step reads: nothing installed, so pip runs
    # The install, then the patch (its pristine file recorded just before the write).
    shutil.copytree(release_tree("0.5.9"), empty)
    deepseek = site_file(empty, DEEPSEEK_FILE)
    pristine = deepseek.read_bytes()
    fix = E.run(E.Request(venv=str(empty), layer_ids=USER_IDS, patches=patches, state="present",
                          backup_dir=str(tmp_path / "backup"), changeset=opened["dir"]))
    assert fix["changed"]
    out = CS.restore_set(opened["dir"], no_pip)
    assert deepseek.read_bytes() == pristine
    assert "%s with sglang 0.5.9 (installed by this run)" % empty in out["left"]


def test_an_upgrade_that_failed_puts_the_previous_release_and_its_patch_back(tmp_path, make_venv, release_tree,
                                                                           patches):
    venv = make_venv("0.5.9")
    E.run(E.Request(venv=str(venv), layer_ids=USER_IDS, patches=patches, state="present",
                    backup_dir=str(tmp_path / "backup")))
    patched_059 = site_file(venv, DEEPSEEK_FILE).read_bytes()
    files = layout(tmp_path)
    opened = open_for(tmp_path, venv, files)
    # "pip install sglang==0.5.12.post1": the 0.5.9 tree is replaced by the new release's.
    shutil.rmtree(venv)
    shutil.copytree(release_tree("0.5.12.post1"), venv)
    E.run(E.Request(venv=str(venv), layer_ids=USER_IDS, patches=patches, state="present",
                    backup_dir=str(tmp_path / "backup"), changeset=opened["dir"]))
    calls = []

    def pip(argv):
        calls.append(argv)
        shutil.rmtree(venv)
        shutil.copytree(release_tree("0.5.9"), venv)
        return 0, "", ""

    out = CS.restore_set(opened["dir"], pip)
    assert calls == [[str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                      *PIP["args"], "sglang==0.5.9"]]
    assert "sglang 0.5.9 reinstalled in %s" % venv in out["restored"]
    # The previous release's own (patched) bytes, not its pristine ones.
    assert site_file(venv, DEEPSEEK_FILE).read_bytes() == patched_059


def test_a_reinstall_from_an_index_reads_it_from_pips_config_never_from_argv(tmp_path, make_venv, release_tree):
    """The index URL may hold credentials: the change set records pip's environment (the 0600 config
    file's path), and the reinstall gets it in pip's environment; no URL is in argv or the manifest."""
    venv = make_venv("0.5.9")
    pip_conf = {"PIP_CONFIG_FILE": str(tmp_path / "state" / "pip.conf")}
    opened = open_for(tmp_path, venv, layout(tmp_path), pip={"args": ["--no-deps"], "environment": pip_conf})
    shutil.rmtree(venv)
    shutil.copytree(release_tree("0.5.12.post1"), venv)
    calls = []

    def pip(argv, environ_update=None):
        calls.append((argv, environ_update))
        shutil.rmtree(venv)
        shutil.copytree(release_tree("0.5.9"), venv)
        return 0, "", ""

    CS.restore_set(opened["dir"], pip)
    assert calls == [([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                       "--no-deps", "sglang==0.5.9"], pip_conf)]
    manifest = (Path(opened["dir"]) / "manifest.json").read_text()
    assert "://" not in manifest and "pip.conf" in manifest


def test_a_reinstall_that_fails_says_what_is_in_place(tmp_path, make_venv, release_tree):
    venv = make_venv("0.5.9")
    files = layout(tmp_path)
    opened = open_for(tmp_path, venv, files)
    shutil.rmtree(venv)
    shutil.copytree(release_tree("0.5.12.post1"), venv)
    new_release = site_file(venv, DEEPSEEK_FILE).read_bytes()
    files[1].write_text("[Service]\nExecStart=/new\n")
    with pytest.raises(CS.RestoreError, match=r"could not put sglang 0.5.9 back .* \(pip exited 1: ERROR: no such wheel\)") as err:
        CS.restore_set(opened["dir"], lambda argv: (1, "", "ERROR: no such wheel"))
    # What was put back before the reinstall failed is said too.
    assert [line.split(" restored")[0] for line in err.value.restored] == [str(files[1])]
    # And what is not: the run's release stays in the venv.
    assert err.value.left == ["%s with sglang 0.5.12.post1 (reinstalling sglang 0.5.9 failed)" % venv]
    # Never the previous release's bytes over the new release's files.
    assert site_file(venv, DEEPSEEK_FILE).read_bytes() == new_release


def test_a_hash_checked_install_is_put_back_with_its_own_requirement(tmp_path, make_venv, release_tree):
    venv = make_venv("0.5.9")
    requirement = tmp_path / "state" / "requirements.txt"
    requirement.parent.mkdir(parents=True)
    requirement.write_text("sglang==0.5.9 --hash=sha256:" + "a" * 64 + "\n")
    opened = open_for(tmp_path, venv, [requirement], pip=dict(PIP, requirement=str(requirement)))
    requirement.write_text("sglang==0.5.12.post1 --hash=sha256:" + "b" * 64 + "\n")
    shutil.rmtree(venv)
    shutil.copytree(release_tree("0.5.12.post1"), venv)
    calls = []
    CS.restore_set(opened["dir"], lambda argv: (calls.append((argv, requirement.read_text())) or (0, "", "")))
    argv, text_then = calls[0]
    assert argv[-3:] == ["--require-hashes", "-r", str(requirement)] and "sglang==0.5.9" in text_then


def test_close_lists_the_changes_and_discards_a_set_that_changed_nothing(tmp_path, make_venv):
    venv = make_venv("0.5.9")
    draft, unit, env, running = files = layout(tmp_path)
    quiet = open_for(tmp_path, venv, files)
    assert CS.close_set(quiet["dir"]) == {"id": quiet["id"], "state": "discarded", "changes": []}
    assert not Path(quiet["dir"]).exists()
    busy = open_for(tmp_path, venv, files)
    old = sha(unit)
    unit.write_text("[Service]\nExecStart=/new\n")
    closed = CS.close_set(busy["dir"])
    assert closed["state"] == "closed"
    assert closed["changes"] == ["%s %s -> %s" % (unit, old[:12], sha(unit)[:12])]
    assert CS.newest_applied(str(tmp_path / "state")) == busy["dir"]


def test_undoing_a_run_that_changed_nothing_leaves_no_set_behind(tmp_path, make_venv):
    """A run refused after its set was opened (a locally edited file, say) leaves the host as it was."""
    venv = make_venv("0.5.9")
    files = layout(tmp_path)
    kept = open_for(tmp_path, venv, files)
    files[1].write_text("[Service]\nExecStart=/new\n")
    CS.close_set(kept["dir"])
    refused = open_for(tmp_path, venv, files)
    out = CS.restore_set(refused["dir"], lambda argv: (1, "", "pip must not run"))
    assert out["restored"] == [] and out["left"] == [] and not Path(refused["dir"]).exists()
    # The run before it is still the one to roll back.
    assert CS.newest_applied(str(tmp_path / "state")) == kept["dir"]


def test_sets_are_a_stack_an_open_one_is_interrupted_by_the_next_and_old_ones_pruned(tmp_path, make_venv):
    venv = make_venv("0.5.9")
    draft, unit, env, running = files = layout(tmp_path)
    state = str(tmp_path / "state")
    dirs = []
    for i in range(4):
        opened = open_for(tmp_path, venv, files, keep=3)
        unit.write_text("[Service]\nExecStart=/v%d\n" % i)
        if i < 3:
            CS.close_set(opened["dir"])
        dirs.append(opened["dir"])
    # The fourth run died before closing: the next run finds it open and marks it.
    fifth = open_for(tmp_path, venv, files, keep=3)
    assert CS.load(dirs[3])["state"] == "interrupted"
    assert sorted(os.listdir(os.path.join(state, "changes"))) == [Path(d).name for d in dirs[2:]] + [fifth["id"]]
    CS.close_set(fifth["dir"])  # changed nothing: discarded
    assert CS.newest_applied(state) == dirs[3]
    CS.restore_set(dirs[3], no_pip)
    assert unit.read_text() == "[Service]\nExecStart=/v2\n"
    # The stack goes on down: the newest applied set is now the one before.
    assert CS.newest_applied(state) == dirs[2]
    CS.restore_set(dirs[2], no_pip)
    assert unit.read_text() == "[Service]\nExecStart=/v1\n"


def test_only_an_open_set_takes_new_entries(tmp_path, make_venv):
    venv = make_venv("0.5.9")
    files = layout(tmp_path)
    opened = open_for(tmp_path, venv, files)
    assert CS.remember(opened["dir"], str(files[1]), "writer") is True
    assert CS.remember(opened["dir"], str(files[1]), "writer") is False
    files[1].write_text("changed\n")
    CS.close_set(opened["dir"])
    with pytest.raises(CS.EngineError, match="is closed, not open"):
        CS.remember(opened["dir"], str(files[1]), "writer")
    manifest = json.loads((Path(opened["dir"]) / "manifest.json").read_text())
    assert manifest["run_id"] == "run-1" and manifest["service"] == {"active": True, "enabled": True}


def test_a_failed_run_left_in_place_is_kept_and_is_the_one_to_roll_back(tmp_path, make_venv):
    """sglang_rollback_on_failure=false: the failed run's set is kept, not left open, so that
    playbooks/rollback.yml puts back that run, not the one before it."""
    venv = make_venv("0.5.9")
    draft, unit, env, running = files = layout(tmp_path)
    state = str(tmp_path / "state")
    first = open_for(tmp_path, venv, files)
    unit.write_text("[Service]\nExecStart=/gated\n")
    CS.close_set(first["dir"])
    failed = open_for(tmp_path, venv, files)
    unit.write_text("[Service]\nExecStart=/failed\n")
    kept = CS.close_set(failed["dir"], state="kept")
    assert kept["state"] == "kept" and CS.load(failed["dir"])["state"] == "kept"
    assert CS.newest_applied(state) == failed["dir"]
    CS.restore_set(failed["dir"], no_pip)
    assert unit.read_text() == "[Service]\nExecStart=/gated\n"
    assert CS.newest_applied(state) == first["dir"]
    # A kept set that changed nothing is discarded, as a closed one is; no other end exists.
    quiet = open_for(tmp_path, venv, files)
    assert CS.close_set(quiet["dir"], state="kept")["state"] == "discarded"
    other = open_for(tmp_path, venv, files)
    with pytest.raises(CS.EngineError, match="ends closed or kept"):
        CS.close_set(other["dir"], state="restored")
