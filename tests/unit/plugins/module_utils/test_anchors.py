"""The supply chain's anchor: every file the engine patches or verifies is the published wheel's (_anchors.py).

A tampered package ships a RECORD that matches its files, so the engine's own classification (pristine, ours,
drift against RECORD) calls it pristine. These tests tamper real release files that way and expect a refusal
naming the release and the file, before anything is patched; and they check the shipped table against every
wheel in the caches, so that it says what the published wheels hold.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from conftest import DIST, MODULES, PATCHES, REPO, USER_IDS, E, run_module, site_file
import sglang_wheels
from ansible_collections.fleetops.sglang.plugins.module_utils import _anchors as A
from ansible_collections.fleetops.sglang.plugins.module_utils import _forward_code as FC

COMMUNICATOR = "sglang/srt/layers/communicator.py"


def record_says(venv: Path, rel: str, data: bytes) -> None:
    """Rewrite ``rel``'s RECORD line for ``data``, as a tampered package ships it."""
    record = next(venv.glob("lib/python3*/site-packages/sglang-*.dist-info/RECORD"))
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines = [("%s,sha256=%s,%d" % (rel, digest, len(data))) if line.startswith(rel + ",") else line
             for line in record.read_text().splitlines()]
    record.write_text("\n".join(lines) + "\n")


def tamper(venv: Path, rel: str, record: bool = True) -> bytes:
    """Append code to ``rel`` (still valid Python, the shapes the engine reads unchanged); RECORD agrees."""
    path = site_file(venv, rel)
    data = path.read_bytes() + b"\nimport os as _t; _t.system('id >/tmp/owned')\n"
    path.write_bytes(data)
    if record:
        record_says(venv, rel, data)
    return data


def run(venv: Path, state: str = "present", **extra):
    return E.run(E.Request(venv=str(venv), layer_ids=USER_IDS, patches=dict(PATCHES.PATCHES), state=state,
                           backup_dir=str(venv.parent / "backup"), **extra))


def test_the_anchored_files_are_every_file_the_engine_patches_or_executes():
    assert set(A.FILES) == set(DIST.TARGET_FILES) | set(FC.FORWARD_FILES)
    # What the test bed extracts from a wheel for a fake venv holds them all.
    assert set(A.FILES) <= set(sglang_wheels.EXTRACT)


def test_the_table_is_what_every_cached_wheel_holds():
    """Each wheel of an anchored release, in any interpreter's build, holds exactly the table's bytes."""
    wheels = sorted(set(glob.glob(str(sglang_wheels.cache_dir() / "sglang-*.whl"))
                        + glob.glob(str(REPO / ".cache" / "wheelhouse" / "sglang-*.whl"))))
    seen = set()
    for wheel in wheels:
        version = Path(wheel).name.split("-")[1]
        if version not in A.UPSTREAM:
            continue
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            held = {rel: hashlib.sha256(zf.read(rel)).hexdigest() for rel in A.FILES if rel in names}
        assert held == A.UPSTREAM[version], wheel
        seen.add(version)
    # At least the releases the scenarios install (scripts/wheelhouse) were compared.
    assert {"0.5.9", "0.5.12.post1", "0.5.14"} <= seen, seen
    # Every release from the oldest anchored one, none skipped (the index's order, oldest first).
    assert list(A.UPSTREAM)[0] == A.OLDEST


@pytest.mark.parametrize("version", ["0.5.9", "0.5.14"])
def test_a_package_tampered_with_its_record_agreeing_is_refused_before_any_patch(make_venv, version):
    venv = make_venv(version)
    before = site_file(venv, DIST.DEEPSEEK_FILE).read_bytes()
    # Without the anchor the engine's own check finds nothing wrong: the file is "pristine" against RECORD.
    tampered = tamper(venv, DIST.DEEPSEEK_FILE)
    res = run(venv)
    assert res["failed"] and res["decision"] == "refuse" and not res["changed"], res
    assert ("sglang %s" % version) in res["msg"] and DIST.DEEPSEEK_FILE in res["msg"], res["msg"]
    assert "RECORD says sha256 %s, the published wheel's file is %s" % (
        hashlib.sha256(tampered).hexdigest(), hashlib.sha256(before).hexdigest()) in res["msg"], res["msg"]
    assert site_file(venv, DIST.DEEPSEEK_FILE).read_bytes() == tampered
    # The audit reports it, not compliant, without failing its task.
    audit = run(venv, state="audit")
    assert not audit["failed"] and not audit["compliant"] and audit["decision"] == "refuse", audit


def test_a_file_the_engine_executes_but_never_patches_must_be_the_wheels_bytes(make_venv):
    venv = make_venv("0.5.9")
    tamper(venv, COMMUNICATOR, record=False)
    res = run(venv)
    assert res["failed"] and COMMUNICATOR in res["msg"] and "the published wheel's file is" in res["msg"], res["msg"]
    tamper(venv, COMMUNICATOR, record=True)
    assert COMMUNICATOR in run(venv)["msg"]


def test_a_file_the_release_does_not_ship_or_one_removed_is_refused(make_venv):
    venv = make_venv("0.5.14")  # ships no cuda_graph_runner.py
    assert DIST.CUDA_GRAPH_FILE not in A.UPSTREAM["0.5.14"]
    extra = site_file(venv, DIST.CUDA_GRAPH_FILE)
    extra.write_text("def f():\n    pass\n")
    res = run(venv, state="audit")
    assert "%s: the published wheel has no such file, this install has one" % DIST.CUDA_GRAPH_FILE in res["msg"]
    extra.unlink()
    assert run(venv, state="audit")["compliant"]
    site_file(venv, COMMUNICATOR).unlink()
    assert "%s: missing (the published wheel ships it)" % COMMUNICATOR in run(venv, state="audit")["msg"]


def relabel(venv: Path, version: str) -> None:
    """The same files under another version, as a release the collection does not know looks."""
    info = next(venv.glob("lib/python3*/site-packages/sglang-*.dist-info"))
    meta = info / "METADATA"
    meta.write_text(re.sub(r"(?m)^Version: .*$", "Version: %s" % version, meta.read_text()))
    shutil.move(str(info), str(info.parent / ("sglang-%s.dist-info" % version)))


def test_a_release_with_no_anchor_is_refused_until_its_published_hashes_are_given(make_venv):
    venv = make_venv("0.5.9")
    relabel(venv, "0.5.99")
    res = run(venv)
    assert res["failed"] and res["release"] == "0.5.99" and not res["changed"], res
    assert "no published sha256 of its files is known" in res["msg"] and "sglang_release_anchors" in res["msg"]
    assert "scripts/anchors 0.5.99" in res["msg"], res["msg"]
    # The entry scripts/anchors prints for it: every file, null where the release ships none.
    entry = {rel: A.UPSTREAM["0.5.9"].get(rel) for rel in A.FILES}
    res = run(venv, anchors={"0.5.99": entry})
    assert not res["failed"] and res["changed"] and res["decision"] == "patch", res["msg"]
    # An entry that differs from the files is as good as none.
    wrong = dict(entry, **{DIST.DEEPSEEK_FILE: "0" * 64})
    res = run(venv, anchors={"0.5.99": wrong})
    assert res["failed"] and "RECORD says sha256" in res["msg"] and DIST.DEEPSEEK_FILE in res["msg"], res["msg"]


@pytest.mark.parametrize("extra, expected", [
    ([], "sglang_release_anchors must be a mapping of release -> {file: sha256 or null}, got list"),
    ({"0.5.99": "x"}, "sglang_release_anchors['0.5.99'] must map each of"),
    ({"0.5.99": {"x.py": None}}, "x.py not a file the role patches or verifies"),
    ({"0.5.99": {}}, "missing %s" % ", ".join(A.FILES)),
    ({"0.5.99": dict({rel: None for rel in A.FILES}, **{DIST.DEEPSEEK_FILE: "ABC"})}, "must be a lowercase hex"),
    ({"0.5.9": {rel: "0" * 64 for rel in A.FILES}}, "sglang 0.5.9 is anchored by the collection"),
])
def test_a_malformed_entry_or_one_that_would_change_a_shipped_anchor_is_refused(extra, expected):
    errors = A.extra_errors(extra)
    assert any(expected in e for e in errors), errors


def test_an_entry_equal_to_a_shipped_anchor_is_accepted():
    assert A.extra_errors({"0.5.9": {rel: A.UPSTREAM["0.5.9"].get(rel) for rel in A.FILES}}) == []


def test_the_release_plan_audits_with_the_same_anchors(make_venv, tmp_path):
    """sglang_release's plan audits an in-place venv before sealing it: a release anchored by
    sglang_release_anchors is as the role leaves it there too, not rebuilt for want of an anchor."""
    venv = make_venv("0.5.14")  # native: pristine is as the role leaves it
    relabel(venv, "0.5.99")
    args = dict(state="planned", venv=str(venv), root=str(tmp_path / "releases"), id="0.5.99-x", version="0.5.99")
    rc, res = run_module(MODULES / "sglang_release.py", tmp_path, args)
    assert rc == 0 and res["build"] and "no published sha256" in res["reason"], res
    entry = {rel: A.UPSTREAM["0.5.14"].get(rel) for rel in A.FILES}
    rc, res = run_module(MODULES / "sglang_release.py", tmp_path, dict(args, anchors={"0.5.99": entry}))
    assert rc == 0 and res["seal"] and not res["build"], res
