"""One change set per run (module_utils/_changeset.py), on real SGLang release trees.

Each test opens a set as the role does before its first write, changes the host the
way a run would (build and switch to another release, rewrite and create configuration
files), then restores or closes it and checks the bytes, modes and owners that come back,
the release the link points at, and what the report is told. Nothing runs pip: a release
is switched back to, never reinstalled.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import USER_IDS, E, sha, site_file
from ansible_collections.fleetops.sglang.plugins.module_utils import _changeset as CS
from ansible_collections.fleetops.sglang.plugins.module_utils import _fingerprint as FP
from ansible_collections.fleetops.sglang.plugins.module_utils import _releases as R
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import DEEPSEEK_FILE


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


def built(tmp_path: Path, release_tree, version: str, patches, name: str = None) -> Path:
    """A release as the role leaves one: its tree, a python, patched, sealed."""
    root = tmp_path / "releases"
    root.mkdir(exist_ok=True)
    rid = R.release_id(version, "sglang==%s\n" % version)
    dest = root / (name or rid)
    shutil.copytree(release_tree(version), dest)
    (dest / "bin").mkdir()
    os.symlink("/usr/bin/python3", dest / "bin" / "python")
    fix = E.run(E.Request(venv=str(dest), layer_ids=USER_IDS, patches=patches, state="present",
                          backup_dir=str(tmp_path / "backup")))
    assert not fix["failed"], fix["msg"]
    R.seal(str(dest), rid, version, "sglang==%s\n" % version)
    return dest


def serving(tmp_path: Path, release: Path) -> Path:
    link = tmp_path / "opt" / "venv"
    link.parent.mkdir(parents=True, exist_ok=True)
    R.switch(str(link), str(release))
    return link


def open_for(tmp_path: Path, venv: Path, files, **over):
    args = dict(state_dir=str(tmp_path / "state"), run_id="run-1", files=[str(f) for f in files], venv=str(venv),
                dirs=[str(tmp_path / "etc" / "sglang")], user="nobody", group="nogroup",
                service={"active": True, "enabled": True})
    args.update(over)
    return CS.open_set(**args)


def sha_of(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()


def test_a_failed_run_on_the_same_release_gets_every_file_back_byte_for_byte(tmp_path, release_tree, patches):
    venv = serving(tmp_path, built(tmp_path, release_tree, "0.5.9", patches))
    draft, unit, env, running = files = layout(tmp_path)
    before = {p: (p.read_bytes(), p.stat().st_mode & 0o777) for p in (draft, unit)}
    opened = open_for(tmp_path, venv, files)
    assert (Path(opened["dir"]).stat().st_mode & 0o777) == 0o700
    assert opened["release"] == "0.5.9"
    draft.write_text('{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}}\n')
    unit.write_text("[Service]\nExecStart=/new --speculative-num-steps 15\n")
    unit.chmod(0o600)
    env.parent.mkdir()
    env.write_text("HF_TOKEN=secret\n")
    running.write_text("{}\n")
    for blob in Path(opened["dir"]).glob("blob-*"):
        assert blob.stat().st_mode & 0o777 == 0o600

    out = CS.restore_set(opened["dir"])
    for path, (data, mode) in before.items():
        assert path.read_bytes() == data and path.stat().st_mode & 0o777 == mode
    assert not env.exists() and not running.exists()
    assert "%s restored to sha256 %s (0644 " % (unit, sha_of(before[unit][0])) in "\n".join(out["restored"])
    assert "%s removed (it did not exist before)" % env in out["restored"]
    assert out["left"] == ["%s (created by this run)" % env.parent]
    # The records callers read say the same as the lines, one per line, in the same order.
    records = {f["path"]: f for f in out["files"]}
    assert len(out["files"]) == len(out["restored"]) and [f["path"] for f in out["files"]] == [
        line.split(" ", 1)[0] for line in out["restored"]]
    assert records[str(unit)] == {"path": str(unit), "sha256": sha_of(before[unit][0]), "mode": "0644",
                                  "owner": records[str(unit)]["owner"]}
    assert records[str(env)] == {"path": str(env), "sha256": None, "mode": None, "owner": None}
    assert CS.load(opened["dir"])["state"] == "restored"
    # Nothing left to put back: a second restore changes nothing.
    assert CS.restore_set(opened["dir"])["restored"] == []


def test_a_fresh_host_keeps_its_first_release_listed(tmp_path, release_tree, patches):
    files = layout(tmp_path)
    link = tmp_path / "opt" / "venv"
    opened = open_for(tmp_path, link, files, dirs=[str(link)])
    switch = CS.load(opened["dir"])["entries"][0]
    assert switch == {"kind": "switch", "venv": str(link), "target": None, "in_place": False, "version": None,
                      "built": []}
    assert opened["release"] is None
    release = built(tmp_path, release_tree, "0.5.9", patches)
    CS.note_release(opened["dir"], built=str(release))
    serving(tmp_path, release)
    out = CS.restore_set(opened["dir"])
    # Nothing served before: the release stays, linked, and is said to be this run's.
    assert os.path.realpath(link) == str(release)
    assert out["left"] == ["%s -> %s (installed by this run: nothing served before it)" % (link, release)]


def test_an_upgrade_that_failed_switches_back_without_pip_and_removes_its_build(tmp_path, release_tree, patches):
    old = built(tmp_path, release_tree, "0.5.9", patches)
    venv = serving(tmp_path, old)
    files = layout(tmp_path)
    old_bytes = site_file(old, DEEPSEEK_FILE).read_bytes()
    opened = open_for(tmp_path, venv, files)
    new = built(tmp_path, release_tree, "0.5.12.post1", patches)
    CS.note_release(opened["dir"], built=str(new))
    R.switch(str(venv), str(new))
    files[1].write_text("[Service]\nExecStart=/new\n")
    assert CS.changes(CS.load(opened["dir"]))[0] == "%s -> %s (was %s)" % (venv, new, old)
    out = CS.restore_set(opened["dir"])
    assert os.path.realpath(venv) == str(old) and not new.exists()
    assert out["restored"][-2:] == ["%s switched back to %s (sglang 0.5.9)" % (venv, old),
                                    "%s removed (built by this run)" % new]
    assert out["release"] == "0.5.9"
    # The release that served was never written.
    assert site_file(old, DEEPSEEK_FILE).read_bytes() == old_bytes and not R.problems(str(old))


def test_a_switch_back_to_a_damaged_release_is_refused_saying_what_is_in_place(tmp_path, release_tree, patches):
    old = built(tmp_path, release_tree, "0.5.9", patches)
    venv = serving(tmp_path, old)
    files = layout(tmp_path)
    opened = open_for(tmp_path, venv, files)
    new = built(tmp_path, release_tree, "0.5.12.post1", patches)
    CS.note_release(opened["dir"], built=str(new))
    R.switch(str(venv), str(new))
    files[1].write_text("[Service]\nExecStart=/new\n")
    site_file(old, DEEPSEEK_FILE).write_text("# damaged\n")
    with pytest.raises(CS.RestoreError, match=r"could not switch .* back to .*0\.5\.9.*deepseek_v2\.py sha256") as err:
        CS.restore_set(opened["dir"])
    # The configuration was put back first; the link still points at the failed run's release, kept.
    assert [line.split(" restored")[0] for line in err.value.restored] == [str(files[1])]
    assert err.value.left == ["%s -> %s (the release switched to by the failed run)" % (venv, new)]
    assert os.path.realpath(venv) == str(new) and new.exists()


def test_an_adopted_in_place_venv_is_the_release_to_switch_back_to(tmp_path, make_venv, release_tree, patches):
    venv = tmp_path / "opt" / "venv"
    venv.parent.mkdir(parents=True)
    shutil.move(str(make_venv("0.5.9")), str(venv))
    opened = open_for(tmp_path, venv, layout(tmp_path))
    assert CS.load(opened["dir"])["entries"][0]["in_place"] is True
    adopted = R.adopt(str(tmp_path / "releases"), str(venv))
    CS.note_release(opened["dir"], adopted=adopted)
    # Adopted, and nothing else: what served is what the link points at, so the set changed nothing.
    assert CS.changes(CS.load(opened["dir"])) == []
    new = built(tmp_path, release_tree, "0.5.12.post1", patches)
    CS.note_release(opened["dir"], built=str(new))
    R.switch(str(venv), str(new))
    CS.restore_set(opened["dir"])
    assert os.path.realpath(venv) == adopted and Path(adopted, "lib").is_dir()


def test_a_set_recorded_by_2x_is_not_put_back_by_pip(tmp_path, release_tree, patches):
    venv = serving(tmp_path, built(tmp_path, release_tree, "0.5.12.post1", patches))
    opened = open_for(tmp_path, venv, layout(tmp_path))
    manifest = CS.load(opened["dir"])
    manifest["entries"][0] = {"kind": "release", "venv": str(venv), "version": "0.5.9", "sources": []}
    CS._save(opened["dir"], manifest)
    with pytest.raises(CS.RestoreError, match="recorded by collection 2.x.*Pin sglang_version=0.5.9"):
        CS.restore_set(opened["dir"])
    # The same release as recorded: nothing to put back from it.
    manifest["entries"][0]["version"] = "0.5.12.post1"
    CS._save(opened["dir"], manifest)
    assert CS.restore_set(opened["dir"])["left"] == []


def test_the_releases_a_rollback_needs_are_named_for_pruning(tmp_path, release_tree, patches):
    old = built(tmp_path, release_tree, "0.5.9", patches)
    venv = serving(tmp_path, old)
    opened = open_for(tmp_path, venv, layout(tmp_path))
    assert CS.rollback_targets(str(tmp_path / "state")) == [str(old)]
    CS.close_set(opened["dir"])  # changed nothing: discarded
    assert CS.rollback_targets(str(tmp_path / "state")) == []


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
    out = CS.restore_set(refused["dir"])
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
    CS.restore_set(dirs[3])
    assert unit.read_text() == "[Service]\nExecStart=/v2\n"
    # The stack goes on down: the newest applied set is now the one before.
    assert CS.newest_applied(state) == dirs[2]
    CS.restore_set(dirs[2])
    assert unit.read_text() == "[Service]\nExecStart=/v1\n"


def test_only_an_open_set_takes_new_entries(tmp_path, make_venv):
    venv = make_venv("0.5.9")
    files = layout(tmp_path)
    opened = open_for(tmp_path, venv, files)
    CS.note_release(opened["dir"], built=str(tmp_path / "releases" / "x"))
    CS.note_release(opened["dir"], built=str(tmp_path / "releases" / "x"))
    assert CS.load(opened["dir"])["entries"][0]["built"] == [str(tmp_path / "releases" / "x")]
    files[1].write_text("changed\n")
    CS.close_set(opened["dir"])
    with pytest.raises(CS.EngineError, match="is closed, not open"):
        CS.note_release(opened["dir"], built=str(tmp_path / "releases" / "y"))
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
    CS.restore_set(failed["dir"])
    assert unit.read_text() == "[Service]\nExecStart=/gated\n"
    assert CS.newest_applied(state) == first["dir"]
    # A kept set that changed nothing is discarded, as a closed one is; no other end exists.
    quiet = open_for(tmp_path, venv, files)
    assert CS.close_set(quiet["dir"], state="kept")["state"] == "discarded"
    other = open_for(tmp_path, venv, files)
    with pytest.raises(CS.EngineError, match="ends closed or kept"):
        CS.close_set(other["dir"], state="restored")


def test_a_file_other_users_may_not_read_is_put_back_and_listed_without_its_sha256(tmp_path, make_venv):
    """The environment file (0600) and the keys' file (0640) hold secrets: a plain sha256 of one in a run's
    output or report would let a reader guess a short key offline."""
    venv = make_venv("0.5.9")
    draft, unit, env, running = files = layout(tmp_path)
    env.parent.mkdir()
    env.write_text("HF_TOKEN=hf_short\n")
    env.chmod(0o600)
    secret = sha(env)
    opened = open_for(tmp_path, venv, files)
    env.write_text("HF_TOKEN=hf_other\n")
    env.chmod(0o600)
    out = CS.restore_set(opened["dir"])
    line = next(x for x in out["restored"] if x.startswith(str(env)))
    assert line == "%s restored to its earlier content (its sha256 is not shown: other users may not read it) " \
                   "(0600 %s)" % (env, line.rsplit(" ", 1)[1][:-1]) and secret not in line
    assert next(f for f in out["files"] if f["path"] == str(env))["sha256"] is None
    busy = open_for(tmp_path, venv, files)
    env.write_text("HF_TOKEN=hf_third\n")
    closed = CS.close_set(busy["dir"])
    assert closed["changes"] == ["%s (not shown) -> (not shown)" % env]
    assert all(secret[:12] not in change and sha(env)[:12] not in change for change in closed["changes"])


def test_keys_go_forward_only_an_undo_never_puts_an_older_key_back(tmp_path, make_venv):
    """A rotation (perhaps of a leaked key) that fails is undone but for the keys' file; a first key stays too.
    A run that removed the keys (none newer) gets the file back: the unit put back names it."""
    venv = make_venv("0.5.9")
    draft, unit, env, running = layout(tmp_path)
    keys = tmp_path / "etc" / "sglang" / "sglang.keys.yaml"
    keys.parent.mkdir()
    keys.write_text('api-key: "leaked-key-1"\n')
    keys.chmod(0o640)
    files = (draft, unit, env, running, keys)
    for forward in ([], [str(keys)]):
        opened = open_for(tmp_path, venv, files, forward=forward)
        keys.write_text('api-key: "rotated-key-2"\n')
        unit.write_text("[Service]\nExecStart=/new\n")
        out = CS.restore_set(opened["dir"])
        assert unit.read_text() == "[Service]\nExecStart=/old --speculative-num-steps 7\n"
        if not forward:  # what every other file gets: the bytes from before the run
            assert keys.read_text() == 'api-key: "leaked-key-1"\n'
            continue
        assert keys.read_text() == 'api-key: "rotated-key-2"\n', out
        assert "%s (this run's keys stay: keys go forward only, an older key is never put back)" % keys in out["left"]
        assert out["forward_kept"] == [str(keys)]
        assert not [line for line in out["restored"] if line.startswith(str(keys))]
        # The server restarted on what was put back runs these keys: the record put back takes them again
        # (sglang_gate's record with merge), and nothing else.
        state = tmp_path / "record.json"
        FP.record(str(state), {"api_keys": "value:leaked", "unit": str(unit)})
        before = FP.load_recorded(str(state))["components"]
        assert FP.record(str(state), {"api_keys": str(keys), "environment": str(env)}, merge=True)
        after = FP.load_recorded(str(state))["components"]
        assert after == dict(before, api_keys=FP.component_hash(str(keys))) and "environment" not in after
        assert not FP.record(str(tmp_path / "none.json"), {"api_keys": str(keys)}, merge=True)
    # The keys removed by the run: back, as nothing newer exists.
    opened = open_for(tmp_path, venv, files, forward=[str(keys)])
    keys.unlink()
    out = CS.restore_set(opened["dir"])
    assert keys.read_text() == 'api-key: "rotated-key-2"\n' and not [x for x in out["left"] if str(keys) in x]
    # A first key (none before the run) stays as well.
    keys.unlink()
    opened = open_for(tmp_path, venv, files, forward=[str(keys)])
    keys.write_text('api-key: "first-key"\n')
    out = CS.restore_set(opened["dir"])
    assert keys.read_text() == 'api-key: "first-key"\n' and str(keys) in " ".join(out["left"])


def test_a_fingerprint_as_shown_hides_the_secret_bearing_files():
    from ansible_collections.fleetops.sglang.plugins.module_utils import _fingerprint as F
    fp = {"unit": "a" * 64, "environment": "b" * 64, "api_keys": "c" * 64, "logging": "d" * 64}
    assert F.shown(fp) == {"unit": "a" * 64, "environment": F.HIDDEN, "api_keys": F.HIDDEN, "logging": "d" * 64}
    assert F.shown({"api_keys": "missing"}) == {"api_keys": "missing"}


def test_the_probe_gets_a_secret_bearing_files_sha256_in_its_no_log_argument_only():
    from ansible_collections.fleetops.sglang.plugins.module_utils import _fingerprint as F
    files = {"unit": {"path": "/u", "sha256": "a" * 64}, "environment": {"path": "/e", "sha256": "b" * 64},
             "api_keys": {"path": "/k", "sha256": "c" * 64}}
    shown, secret = F.split_secret(files)
    assert shown == {"unit": {"path": "/u", "sha256": "a" * 64}, "environment": {"path": "/e"},
                     "api_keys": {"path": "/k"}}
    assert secret == {"environment": "b" * 64, "api_keys": "c" * 64}
    assert files["environment"]["sha256"] == "b" * 64  # the caller's dict is left as it was


def test_the_module_reports_a_change_only_when_the_run_changed_something(tmp_path):
    """Opening a set, and closing one that changed nothing (discarded), are the run's bookkeeping: changed
    false, so that a run with the fast path off that changes nothing reports changed=0. A set that changed a
    file closes as changed."""
    from conftest import MODULES, run_module

    conf = tmp_path / "etc" / "sglang.env"
    conf.parent.mkdir()
    conf.write_text("A=1\n")
    args = {"state": "opened", "state_dir": str(tmp_path / "state"), "run_id": "r1", "venv": str(tmp_path / "venv"),
            "files": [str(conf)], "dirs": [], "user": "nobody", "group": "nogroup", "service": "sglang"}
    module = MODULES / "sglang_changeset.py"
    for edit, changed in ((False, False), (True, True)):
        rc, opened = run_module(module, tmp_path, args)
        assert rc == 0 and opened["changed"] is False and opened["set_state"] == "open", opened
        if edit:
            conf.write_text("A=2\n")
        rc, closed = run_module(module, tmp_path, {"state": "closed", "state_dir": str(tmp_path / "state"),
                                                   "changeset": opened["dir"]})
        assert rc == 0 and closed["changed"] is changed, closed
        assert closed["set_state"] == ("closed" if edit else "discarded"), closed
