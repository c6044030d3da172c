"""Staged releases (module_utils/_releases.py) on real SGLang release trees.

A release is built beside the one that serves, sealed, switched to in one rename, and
switched back to without pip; a sealed release that no longer matches its seal (a file
or any package of its closure changed) is never deployed; a 2.x in-place venv is adopted
as it is; pruning never removes what serves or what a rollback needs.
"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from conftest import USER_IDS, E, site_file
from ansible_collections.fleetops.sglang.plugins.module_utils import _releases as R
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import DEEPSEEK_FILE, EngineError

LOCK = "sglang==0.5.9\n--no-deps\n"


def build(root: Path, release_tree, patches, version="0.5.9", lock=LOCK, name=None, seal=True, sealed_at=0) -> Path:
    rid = R.release_id(version, lock)
    dest = root / (name or rid)
    shutil.copytree(release_tree(version), dest)
    (dest / "bin").mkdir()
    os.symlink("/usr/bin/python3", dest / "bin" / "python")
    fix = E.run(E.Request(venv=str(dest), layer_ids=USER_IDS, patches=patches, state="present",
                          backup_dir=str(root.parent / "backup")))
    assert not fix["failed"], fix["msg"]
    if seal:
        R.seal(str(dest), rid, version, lock, now=lambda: 1_700_000_000 + sealed_at)
    return dest


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "releases"
    root.mkdir()
    link = tmp_path / "venv"
    return root, link


def test_the_identity_names_the_version_the_lock_and_the_patch_set():
    rid = R.release_id("0.5.9", LOCK)
    version, lock, patch = rid.rsplit("-", 2)
    assert version == "0.5.9" and len(lock) == 12 and patch == R.patch_digest()[:12]
    assert R.release_id("0.5.9", LOCK) == rid
    assert R.release_id("0.5.9", "sglang==0.5.9 --hash=sha256:" + "a" * 64 + "\n") != rid
    assert R.release_id("0.5.9", LOCK, patches={"x": "y"}).rsplit("-", 1)[0] == rid.rsplit("-", 1)[0]
    assert R.release_id("0.5.9", LOCK, patches={"x": "y"}) != rid


def test_a_new_release_is_built_beside_the_one_that_serves_and_switched_to(host, release_tree, patches):
    root, link = host
    old = build(root, release_tree, patches, "0.5.9")
    R.switch(str(link), str(old))
    rid = R.release_id("0.5.12.post1", "sglang==0.5.12.post1\n")
    plan = R.plan(str(root), str(link), rid, "0.5.12.post1")
    assert plan["build"] and plan["switch"] and not plan["clean"] and plan["dir"] == str(root / rid)
    assert plan["current"] == str(old)
    new = build(root, release_tree, patches, "0.5.12.post1", lock="sglang==0.5.12.post1\n")
    # Built and sealed, not yet switched: the plan now reuses it (a controller lost here reruns to it).
    again = R.plan(str(root), str(link), rid, "0.5.12.post1")
    assert not again["build"] and again["switch"] and again["dir"] == str(new)
    assert R.switch(str(link), str(new)) is True and os.path.realpath(link) == str(new)
    assert R.switch(str(link), str(new)) is False
    done = R.plan(str(root), str(link), rid, "0.5.12.post1")
    assert not done["build"] and not done["switch"] and "sealed" in done["reason"]


def test_an_unfinished_build_is_cleaned_and_a_damaged_release_that_serves_is_built_beside(host, release_tree, patches):
    root, link = host
    rid = R.release_id("0.5.9", LOCK)
    (root / rid / "lib").mkdir(parents=True)  # pip died here: no seal
    plan = R.plan(str(root), str(link), rid, "0.5.9")
    assert plan["build"] and plan["clean"] and plan["dir"] == str(root / rid)
    shutil.rmtree(root / rid)
    serving = build(root, release_tree, patches)
    R.switch(str(link), str(serving))
    site_file(serving, DEEPSEEK_FILE).write_text("# edited by hand\n")
    assert R.problems(str(serving))[0].startswith(DEEPSEEK_FILE + " sha256 ")
    plan = R.plan(str(root), str(link), rid, "0.5.9")
    # Never built over the release that serves: beside it.
    assert plan["build"] and plan["dir"] == str(root / (rid + ".2")) and not plan["clean"]


def test_any_package_of_the_closure_that_drifts_is_named(host, release_tree, patches):
    root, _link = host
    release = build(root, release_tree, patches)
    site = Path(site_file(release, DEEPSEEK_FILE)).parents[3]
    extra = site / "torch-2.9.1.dist-info"
    extra.mkdir()
    (extra / "RECORD").write_text("torch/__init__.py,,\n")
    assert R.problems(str(release)) == ["package torch 2.9.1 added after the seal"]
    rid = R.release_id("0.5.9", LOCK)
    R.seal(str(release), rid, "0.5.9", LOCK)
    assert R.problems(str(release)) == []
    (extra / "RECORD").write_text("torch/__init__.py,,\ntorch/x.py,,\n")
    assert R.problems(str(release)) == ["package torch 2.9.1 reinstalled or changed (its RECORD differs)"]
    extra.rename(site / "torch-2.10.0.dist-info")
    assert R.problems(str(release)) == ["package torch 2.9.1 -> 2.10.0"]
    shutil.rmtree(site / "torch-2.10.0.dist-info")
    assert R.problems(str(release)) == ["package torch 2.9.1 removed after the seal"]


def test_an_in_place_venv_is_adopted_as_it_is_and_sealed_only_when_its_audit_passes(host, release_tree, patches):
    root, link = host
    shutil.copytree(release_tree("0.5.9"), link)
    os.makedirs(link / "bin")
    os.symlink("/usr/bin/python3", link / "bin" / "python")
    rid = R.release_id("0.5.9", LOCK)
    # Before the adoption (check mode sees this): the in-place venv is the candidate.
    plan = R.plan(str(root), str(link), rid, "0.5.9", audit=lambda d: [])
    assert plan["adopt"] and plan["seal"] and not plan["build"] and plan["dir"] == str(link)
    inode = os.stat(site_file(link, DEEPSEEK_FILE)).st_ino
    adopted = R.adopt(str(root), str(link))
    assert adopted == str(root / "0.5.9-adopted") and os.path.islink(link)
    # The same files, not copies: the server's paths resolve to what it runs.
    assert os.stat(site_file(link, DEEPSEEK_FILE)).st_ino == inode
    assert R.read_marker(adopted)["adopted"] is True
    # Unpatched: its audit says so, and a new release is built beside it, never a patch in place.
    plan = R.plan(str(root), str(link), rid, "0.5.9", audit=lambda d: ["deepseek_v2.py unpatched"])
    assert plan["build"] and plan["dir"] == str(root / rid) and "never patched while it serves" in plan["reason"]
    E.run(E.Request(venv=adopted, layer_ids=USER_IDS, patches=patches, state="present",
                    backup_dir=str(root.parent / "backup")))
    plan = R.plan(str(root), str(link), rid, "0.5.9", audit=lambda d: [])
    assert plan["seal"] and plan["dir"] == adopted and not plan["switch"]
    marker = R.seal(adopted, rid, "0.5.9", LOCK)
    assert marker["adopted"] is True and marker["id"] == rid
    assert not R.plan(str(root), str(link), rid, "0.5.9")["seal"]
    assert R.adopt(str(root), str(link)) is None


def test_adopting_across_file_systems_names_the_variable(host, release_tree, monkeypatch):
    root, link = host
    shutil.copytree(release_tree("0.5.9"), link)

    def cross(_a, _b):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(R.os, "rename", cross)
    with pytest.raises(EngineError, match="sglang_releases_dir=.* is on another file system"):
        R.adopt(str(root), str(link))
    assert link.is_dir() and not link.is_symlink()


def test_a_switch_never_replaces_a_directory_nor_points_at_nothing(host, release_tree, patches):
    root, link = host
    link.mkdir()
    with pytest.raises(EngineError, match="is a directory, not the switch"):
        R.switch(str(link), str(root))
    link.rmdir()
    with pytest.raises(EngineError, match="no such release directory"):
        R.switch(str(link), str(root / "nothing"))
    assert not os.path.lexists(link)


def test_pruning_keeps_what_serves_and_what_a_rollback_needs(host, release_tree, patches):
    root, link = host
    a = build(root, release_tree, patches, "0.5.9", name="a", sealed_at=1)
    b = build(root, release_tree, patches, "0.5.9", lock="sglang==0.5.9\n", name="b", sealed_at=2)
    c = build(root, release_tree, patches, "0.5.12.post1", lock="c\n", name="c", sealed_at=3)
    d = build(root, release_tree, patches, "0.5.12.post1", lock="d\n", name="d", sealed_at=4)
    unfinished = root / "e"
    (unfinished / "lib").mkdir(parents=True)
    R.switch(str(link), str(b))
    out = R.prune(str(root), str(link), 2, protect=[str(a)], check_mode=True)
    assert out["removed"] == [str(c), str(unfinished)] and all(p.exists() for p in (a, b, c, d, unfinished))
    out = R.prune(str(root), str(link), 2, protect=[str(a)])
    # b serves, d is the newest other, a is a rollback's: c and the unfinished build go.
    assert out["kept"] == [str(b), str(d)] and out["protected"] == [str(a)]
    assert sorted(os.listdir(root)) == ["a", "b", "d"]


H1, H2 = "1" * 64, "2" * 64


def test_a_lock_pins_every_package_with_its_hashes_and_nothing_else():
    lock = ("# pip-compile --generate-hashes\nsglang==0.5.9 \\\n    --hash=sha256:%s \\\n    --hash=sha256:%s\n"
            "Packaging==24.2 --hash=sha256:%s  # via sglang\n" % (H1, H2, H1))
    assert R.lock_pins(lock) == {"sglang": "0.5.9", "packaging": "24.2"}
    assert R.lock_errors(lock, "0.5.9") == []
    assert R.lock_errors(lock, "0.5.12.post1") == ["it pins sglang==0.5.9, not sglang==0.5.12.post1 (sglang_version)"]
    bad = lock + "torch>=2.0 --hash=sha256:%s\nsix==1.17.0\n--index-url https://mirror.example/simple\n-e ./src\n" % H1
    errors = R.lock_errors(bad, "0.5.9")
    assert [e.split(" (")[0] for e in errors] == ["line 6", "line 7", "line 8", "line 9"], errors
    assert "torch>=2.0" in errors[0] and "no --hash" in errors[1] and "--index-url" in errors[2]


def test_a_release_that_does_not_hold_what_its_lock_pins_is_not_sealed(host, release_tree, patches):
    root, _link = host
    release = build(root, release_tree, patches, seal=False)
    lock = "sglang==0.5.9 --hash=sha256:%s\npackaging==24.2 --hash=sha256:%s\n" % (H1, H2)
    with pytest.raises(EngineError, match=r"does not hold what its lock pins: packaging==24.2 \(installed: nothing\)"):
        R.seal(str(release), R.release_id("0.5.9", lock), "0.5.9", lock)
    assert R.read_marker(str(release)) is None


def test_a_release_that_serves_edited_by_hand_is_refused_not_rebuilt_over(host, release_tree, patches):
    """A file of the serving release of this very identity that the engine refuses (neither as pip
    installed it nor as the role patched it: a hot fix?) stops the plan; one reset to pristine does not."""
    root, link = host
    serving = build(root, release_tree, patches)
    R.switch(str(link), str(serving))
    rid = R.release_id("0.5.9", LOCK)

    def refuse(release):
        found = E.run(E.Request(venv=release, layer_ids=USER_IDS, patches=patches, state="audit", check_mode=True))
        return found["msg"] if found["decision"] == "refuse" else None

    target = site_file(serving, DEEPSEEK_FILE)
    target.write_text(target.read_text() + "# local hotfix\n")
    with pytest.raises(R.Refusal, match=r"was changed by hand .*deepseek_v2\.py.*refused.*a person looks"):
        R.plan(str(root), str(link), rid, "0.5.9", refuse=refuse)
    assert sorted(os.listdir(root)) == [rid]
