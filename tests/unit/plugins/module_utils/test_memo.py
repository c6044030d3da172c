"""The audit memo (module_utils/_memo.py audit_memoized) on real release files.

A memo answer must be the answer the full audit would give: these tests prove the
audit reads nothing but what the key hashes, that a hit returns the full result,
and that any change to an input (a byte of SGLang, RECORD, the patch templates,
the ids, any file of the engine) makes the audit run in full again.
"""

from __future__ import annotations

import ast
import builtins
import glob as glob_module
import importlib
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import DIST, MEMO, MODULE_UTILS, MODULES, PATCHES, USER_IDS, E, run_module, site_file

EAGLE3_MODULE = MODULES / "sglang_eagle3.py"
PROBE = MODULES / "sglang_probe.py"


def audit_request(venv: Path, patches, **over) -> "E.Request":
    args = dict(venv=str(venv), layer_ids=list(USER_IDS), patches=patches, state="audit",
                backup_dir="/var/lib/sglang-remediation/backup", check_mode=True)
    args.update(over)
    return E.Request(**args)


def patched(make_venv, patches, version: str = "0.5.9") -> Path:
    venv = make_venv(version)
    res = E.run(E.Request(venv=str(venv), layer_ids=list(USER_IDS), patches=patches,
                          backup_dir=str(venv.parent / "backup")))
    assert not res["failed"], res["msg"]
    return venv


@pytest.mark.parametrize("version,patch", [("0.5.9", True), ("0.5.9", False), ("0.5.14", False)])
def test_the_audit_reads_only_what_the_key_hashes(make_venv, patches, monkeypatch, version, patch):
    venv = patched(make_venv, patches, version) if patch else make_venv(version)
    inputs = MEMO.audit_inputs(str(venv))
    opened, globbed = [], []
    real_open, real_glob = builtins.open, glob_module.glob

    def spy_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    def spy_glob(pattern, *args, **kwargs):
        globbed.append(pattern)
        return real_glob(pattern, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(glob_module, "glob", spy_glob)
    result = E.run(audit_request(venv, patches))
    monkeypatch.undo()
    assert not result["failed"], result["msg"]
    assert opened, "the spy saw no reads"
    assert set(opened) <= set(inputs), set(opened) - set(inputs)
    # Both globs the audit makes are hashed by their results.
    assert len(globbed) == 2 and sum(1 for p in inputs if p.startswith("glob:")) == 2


def test_a_hit_is_the_full_result(make_venv, patches, tmp_path):
    venv = patched(make_venv, patches)
    memo = tmp_path / "state" / "audit-memo.json"
    full = E.run(audit_request(venv, patches))
    first = MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=True)
    second = MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=True)
    assert (first.pop("memo"), second.pop("memo")) == ("miss", "hit")
    assert first.pop("memo_key") == MEMO.audit_key(audit_request(venv, patches))
    assert first == full == second
    assert full["compliant"] is True
    assert oct(memo.stat().st_mode & 0o777) == "0o644"


def test_without_write_nothing_is_stored(make_venv, patches, tmp_path):
    venv = patched(make_venv, patches)
    memo = tmp_path / "audit-memo.json"
    for _ in range(2):
        assert MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=False)["memo"] == "miss"
    assert not memo.exists()
    assert MEMO.audit_memoized(audit_request(venv, patches), None, write=True)["memo"] == "off"


def change_a_byte(venv: Path, rel: str) -> None:
    path = site_file(venv, rel)
    path.write_bytes(path.read_bytes() + b"\n# edited by hand\n")


@pytest.mark.parametrize("change", [
    "deepseek_v2.py", "companion", "RECORD", "companion removed", "patches", "layer ids", "pp size", "engine",
])
def test_any_changed_input_runs_the_full_audit(make_venv, patches, tmp_path, monkeypatch, change):
    venv = patched(make_venv, patches)
    memo = str(tmp_path / "audit-memo.json")
    assert MEMO.audit_memoized(audit_request(venv, patches), memo, write=True)["compliant"] is True
    over = {}
    if change == "deepseek_v2.py":
        change_a_byte(venv, DIST.DEEPSEEK_FILE)
    elif change == "companion":
        change_a_byte(venv, DIST.CUDA_GRAPH_FILE)
    elif change == "companion removed":
        site_file(venv, DIST.CUDA_GRAPH_FILE).unlink()
    elif change == "RECORD":
        record = next(venv.glob("lib/python3*/site-packages/sglang-*.dist-info/RECORD"))
        record.write_text(record.read_text().replace("deepseek_v2.py,sha256=", "deepseek_v2.py,sha256=x", 1))
    elif change == "patches":
        over["patches"] = {name: text.replace(PATCHES.MARKER, "sglang-remediation eagle3-embed v2")
                           for name, text in PATCHES.PATCHES.items()}
    elif change == "layer ids":
        over["layer_ids"] = [-1, 3, 30]
    elif change == "pp size":
        over["pipeline_parallel_size"] = 2
    elif change == "engine":
        edit_engine_file(monkeypatch, "_eagle3")
    req = audit_request(venv, over.pop("patches", patches), **over)
    again = MEMO.audit_memoized(req, memo, write=False)
    assert again.pop("memo") == "miss"
    again.pop("memo_key", None)
    assert again == E.run(req)
    if change in ("deepseek_v2.py", "companion", "RECORD", "patches", "pp size"):
        assert again["compliant"] is False
    if change == "layer ids":  # the files still capture any ids; the draft must list others
        assert again["draft_layer_ids"] != E.run(audit_request(venv, patches))["draft_layer_ids"]


def edit_engine_file(monkeypatch, name: str) -> None:
    """Make the memo see one more line in one engine file's source."""
    real = MEMO.module_source

    def edited(module):
        source = real(module)
        return source + b"\n# edited\n" if module.__name__.endswith("." + name) else source

    monkeypatch.setattr(MEMO, "module_source", edited)


ENGINE_FILES = sorted(m.__name__.rsplit(".", 1)[-1] for m in MEMO.ENGINE_MODULES)


@pytest.mark.parametrize("name", ENGINE_FILES)
def test_a_change_in_any_engine_file_runs_the_full_audit(make_venv, patches, tmp_path, monkeypatch, name):
    venv = patched(make_venv, patches)
    memo = str(tmp_path / "audit-memo.json")
    assert MEMO.audit_memoized(audit_request(venv, patches), memo, write=True)["memo"] == "miss"
    assert MEMO.audit_memoized(audit_request(venv, patches), memo, write=False)["memo"] == "hit"
    edit_engine_file(monkeypatch, name)
    again = MEMO.audit_memoized(audit_request(venv, patches), memo, write=False)
    assert again["memo"] == "miss" and again["compliant"] is True


def _collection_imports(path: Path) -> set:
    """The module_utils files ``path`` imports by the collection's name."""
    prefix = "ansible_collections.fleetops.sglang.plugins.module_utils"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix):
            if node.module == prefix:
                found.update(a.name for a in node.names)
            else:
                found.add(node.module.rsplit(".", 1)[-1])
    return found


def test_the_key_covers_every_file_the_engine_imports():
    """A new engine file (a further verification check, say) must join ENGINE_MODULES."""
    seen, todo = set(), ["_memo"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += sorted(_collection_imports(MODULE_UTILS.parent / (name + ".py")))
    assert seen == set(ENGINE_FILES)


def test_errors_are_never_stored_and_unreadable_inputs_turn_it_off(make_venv, patches, tmp_path):
    venv = make_venv("0.5.9")
    memo = tmp_path / "audit-memo.json"
    metadata = next(venv.glob("lib/python3*/site-packages/sglang-*.dist-info/METADATA"))
    text = metadata.read_text()
    metadata.write_text(text.replace("Version:", "Not-a-version:"))
    res = MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=True)
    assert res["failed"] and res["memo"] == "miss" and not memo.exists()
    metadata.write_text(text)
    if os.geteuid() != 0:  # root reads a 0000 file anyway
        target = site_file(venv, DIST.DEEPSEEK_FILE)
        target.chmod(0)
        try:
            assert MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=True)["memo"] == "off"
        finally:
            target.chmod(0o644)


def test_a_corrupt_or_foreign_memo_is_recomputed(make_venv, patches, tmp_path):
    venv = patched(make_venv, patches)
    memo = tmp_path / "audit-memo.json"
    for junk in ("{not json", "[]", json.dumps({"key": "0" * 64, "result": {"compliant": False}})):
        memo.write_text(junk)
        res = MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=True)
        assert res["memo"] == "miss" and res["compliant"] is True
    assert MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=True)["memo"] == "hit"


def test_the_key_holds_when_the_engine_runs_from_a_zip(tmp_path):
    """Ansible ships module_utils inside a zip (AnsiballZ): the engine must still read its sources."""
    archive = tmp_path / "payload.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(MODULE_UTILS.parent / "_memo.py", "zipped_memo.py")
    sys.path.insert(0, str(archive))
    try:
        zipped = importlib.import_module("zipped_memo")
        assert zipped.__loader__.__class__.__name__ == "zipimporter"
        assert zipped.module_source(zipped) == (MODULE_UTILS.parent / "_memo.py").read_bytes()
        assert zipped.engine_source_digest() is not None
    finally:
        sys.path.remove(str(archive))
        sys.modules.pop("zipped_memo", None)


def test_the_patching_module_warms_the_probe(host, tmp_path):
    """sglang_eagle3 state=present stores the audit the probe asks for: its next call is a hit."""
    h = host("0.5.9", patch=False)
    memo = tmp_path / "state" / "audit-memo.json"
    rc, res = run_module(EAGLE3_MODULE, h.tmp, dict(
        venv=str(h.venv), layer_ids=USER_IDS, patches=h.patches, backup_dir=str(h.backup), memo_file=str(memo)))
    assert rc == 0 and res["changed"], res
    assert memo.exists()
    # Audit mode of the same module reads it and writes nothing.
    before = memo.read_bytes()
    rc, res = run_module(EAGLE3_MODULE, h.tmp, dict(
        venv=str(h.venv), layer_ids=USER_IDS, patches=h.patches, backup_dir=str(h.backup), state="audit",
        memo_file=str(memo)))
    assert rc == 0 and res["memo"] == "hit" and res["compliant"], res
    assert memo.read_bytes() == before
    probe = h.probe(memo_file=str(memo))
    assert probe["eagle3"]["memo"] == "hit"
    assert probe["eagle3"]["compliant"] is True


def test_the_probe_writes_only_when_told(host, tmp_path):
    h = host("0.5.9")
    memo = tmp_path / "memo" / "audit-memo.json"
    unasked = h.probe(memo_file=str(memo))
    assert unasked["eagle3"]["memo"] == "miss" and unasked["written"] == []
    assert not memo.exists()
    first = h.probe(memo_file=str(memo), memo_write=True)
    assert first["eagle3"]["memo"] == "miss" and memo.exists() and first["compliant"], first["reasons"]
    # What it wrote, it says (and it changed no configuration).
    assert first["written"] == [str(memo)] and first["changed"] is False
    second = h.probe(memo_file=str(memo), memo_write=True)
    assert second["eagle3"]["memo"] == "hit" and second["compliant"]
    for res in (first, second):
        res["eagle3"].pop("memo")
    assert first == second
    # A hand edit after the memo was written: the probe sees drift, not the old verdict,
    # and a host the run goes on to change (or refuse) leaves the memo as it was.
    stored = memo.read_bytes()
    change_a_byte(h.venv, DIST.DEEPSEEK_FILE)
    third = h.probe(memo_file=str(memo), memo_write=True)
    assert third["eagle3"]["memo"] == "miss" and not third["compliant"]
    assert any(r["code"] == "source.refused" and "drift" in r["text"] for r in third["reasons"]), third["reasons"]
    assert "memo_key" not in third["eagle3"]
    assert memo.read_bytes() == stored and third["written"] == []


def test_a_noncompliant_probe_writes_nothing(host, tmp_path):
    """Draft ids wrong: the audit of the files is fine, but the host is not compliant."""
    h = host("0.5.9")
    memo = tmp_path / "audit-memo.json"
    config = json.loads(h.draft.read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 2, 30]
    h.draft.write_text(json.dumps(config))
    res = h.probe(memo_file=str(memo), memo_write=True)
    assert not res["compliant"] and res["eagle3"]["compliant"] and res["eagle3"]["memo"] == "miss"
    assert not memo.exists()


def test_store_needs_an_unchanged_miss(make_venv, patches, tmp_path):
    venv = patched(make_venv, patches)
    memo = tmp_path / "audit-memo.json"
    hit_or_off = MEMO.audit_memoized(audit_request(venv, patches), None, write=False)
    assert hit_or_off["memo"] == "off" and not MEMO.store_audit_memo(str(memo), hit_or_off)
    miss = MEMO.audit_memoized(audit_request(venv, patches), str(memo), write=False)
    assert MEMO.store_audit_memo(str(memo), miss) and memo.exists()
    stored = json.loads(memo.read_text())
    assert stored["key"] == miss["memo_key"] and "memo" not in stored["result"]


def test_a_link_to_a_release_and_the_release_are_one_audit(tmp_path, make_venv):
    """The patch step audits the release directory, the probe the link (sglang_venv) to it: one key."""
    release = make_venv("0.5.9")
    link = tmp_path / "venv"
    link.symlink_to(release)
    assert MEMO.audit_key(E.Request(venv=str(link), state="audit")) == MEMO.audit_key(
        E.Request(venv=str(release), state="audit"))
