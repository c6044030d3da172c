"""The patch engine against real SGLang release files (downloaded at test time).

The expected decision per release is the specification (docs/docsite/rst/guide_releases.rst, "What the role decides, per
release", read in each wheel's sglang/srt/models/deepseek_v2.py); every
other assertion is about what the engine does to the real files.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import (COLLECTIONS_PATH, DIST, FILEIO, HUNKS, LIBRARY, PATCHES, SHAPES, VERIFY, E,
                      run_module)
import sglang_wheels

DS = DIST.DEEPSEEK_FILE
# release -> (decision, family, companion template)
SPEC = {
    "0.5.4.post1": ("refuse", "absent", None),
    "0.5.4.post2": ("patch", "body_a_loop", "companion_cg_local"),
    "0.5.9": ("patch", "body_a_loop", "companion_cg_attr"),
    "0.5.10.post1": ("patch", "body_a_loop", "companion_cg_attr"),
    "0.5.11": ("patch", "body_a_loop", None),
    "0.5.12.post1": ("patch", "body_a_loop", None),
    "0.5.13": ("patch", "body_b_loop", None),
    "0.5.14": ("native", "native_C", None),
    "0.5.17": ("native", "native_P", None),
    "0.5.23": ("native", "native_R", None),
}
PATCHED = [v for v, s in SPEC.items() if s[0] == "patch"]
NATIVE = [v for v, s in SPEC.items() if s[0] == "native"]


def request(venv: Path, patches, **kw):
    return E.Request(venv=str(venv), patches=patches, backup_dir=str(venv / "backup"), **kw)


def site(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def snapshot(venv: Path):
    """Bytes and mtimes of every file the engine may touch."""
    out = {}
    for rel in (DS,) + DIST.COMPANION_FILES:
        path = site(venv) / rel
        if path.exists():
            out[rel] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


def wheel_bytes(version: str, rel: str) -> bytes:
    with zipfile.ZipFile(sglang_wheels.fetch_wheel(version)) as zf:
        return zf.read(rel)


# ----------------------------------------------------------------- per release


@pytest.mark.parametrize("version", list(SPEC))
def test_decision_follows_the_code_shape(version, make_venv, patches):
    venv = make_venv(version)
    before = snapshot(venv)
    res = E.run(request(venv, patches, check_mode=True))
    decision, family, companion = SPEC[version]
    assert res["release"] == version
    assert res["decision"] == decision
    assert res["family"] == family
    assert res["companion"].get("template") == companion
    assert res["file_state_before"] == "pristine"
    assert res["sha256_before"] == res["record_sha256"]
    assert snapshot(venv) == before, "check mode must not write"
    if decision == "refuse":
        assert res["failed"] and version in res["msg"] and DS in res["msg"]
        assert "set_eagle3_layers_to_capture" in res["msg"]


@pytest.mark.parametrize("version", PATCHED)
def test_patch_applies_verifies_and_is_idempotent(version, make_venv, patches):
    venv = make_venv(version)
    res = E.run(request(venv, patches))
    assert not res["failed"], res["msg"]
    assert res["changed"] and res["compliant"]
    assert res["checks"] == {"compiled": True, "semantic": True}
    assert res["draft_layer_ids"] == [-1, 2, 30]
    assert res["sha256_after"] != res["record_sha256"]
    whats = sorted(e["what"] for e in res["evidence"] if e["path"] == DS)
    assert whats == sorted(["init_flag", "reset_flag", "set_flag", "filter_negative", "append_embedding"])
    for ev in res["evidence"]:
        line = (site(venv) / ev["path"]).read_text().splitlines()[ev["line"] - 1]
        assert line.strip() == ev["text"]
    # The file on disk proves the semantics itself, against the wheel's original.
    patched = (site(venv) / DS).read_text()
    pristine = wheel_bytes(version, DS).decode()
    assert VERIFY.semantic_check_patch(pristine, patched, [-1, 2, 30]) == []
    got = VERIFY.run_set_layers(VERIFY.load_method(patched, SHAPES.SET_EAGLE3), [[-1, 2, 30]])
    assert got["layers_to_capture"] == [3, 31] and got["capture_embedding_for_eagle3"]
    # Companion files: no no-argument call left where CUDA graphs are captured.
    if SPEC[version][2]:
        assert set(res["companion"]["files"]) == set(DIST.COMPANION_FILES)
        for rel in DIST.COMPANION_FILES:
            assert SHAPES.default_id_calls((site(venv) / rel).read_text(), rel) == []
    # Twice: nothing changes, and the file is recognised as ours.
    after = snapshot(venv)
    again = E.run(request(venv, patches))
    assert not again["failed"] and not again["changed"] and again["compliant"]
    assert again["file_state_before"] == "ours"
    assert snapshot(venv) == after
    audit = E.run(request(venv, patches, state="audit"))
    assert audit["compliant"] and not audit["changed"]


@pytest.mark.parametrize("version", PATCHED)
def test_check_mode_reports_diff_but_writes_nothing(version, make_venv, patches):
    venv = make_venv(version)
    before = snapshot(venv)
    res = E.run(request(venv, patches, check_mode=True))
    assert res["changed"] and not res["failed"]
    assert res["checks"] == {"compiled": True, "semantic": True}
    assert {d["before_header"] for d in res["diff"]} >= {str(site(venv) / DS)}
    assert snapshot(venv) == before
    assert not (venv / "backup").exists()
    # The predicted hash is the one a real run produces.
    real = E.run(request(venv, patches))
    assert real["sha256_after"] == res["sha256_after"]


@pytest.mark.parametrize("version", PATCHED)
def test_local_edit_is_refused_and_untouched(version, make_venv, patches):
    venv = make_venv(version)
    path = site(venv) / DS
    path.write_text(path.read_text().replace("aux_hidden_states = []", "aux_hidden_states = []  # local", 1))
    before = snapshot(venv)
    for state in ("present", "absent"):
        res = E.run(request(venv, patches, state=state))
        assert res["failed"] and not res["changed"]
        assert res["decision"] == "refuse" and res["file_state_before"] == "drift"
        assert version in res["msg"] and str(path) in res["msg"]
    audit = E.run(request(venv, patches, state="audit"))
    assert not audit["failed"] and not audit["compliant"]
    assert snapshot(venv) == before


@pytest.mark.parametrize("version", PATCHED)
def test_local_edit_after_patching_is_drift(version, make_venv, patches):
    venv = make_venv(version)
    assert not E.run(request(venv, patches))["failed"]
    path = site(venv) / DS
    path.write_text(path.read_text() + "\n# local edit\n")
    before = snapshot(venv)
    res = E.run(request(venv, patches))
    assert res["failed"] and res["file_state_before"] == "drift"
    assert snapshot(venv) == before


@pytest.mark.parametrize("version", PATCHED)
def test_absent_restores_wheel_bytes(version, make_venv, patches):
    venv = make_venv(version)
    assert not E.run(request(venv, patches))["failed"]
    res = E.run(request(venv, patches, state="absent"))
    assert res["changed"] and not res["failed"]
    for rel in (DS,) + DIST.COMPANION_FILES:
        assert (site(venv) / rel).read_bytes() == wheel_bytes(version, rel)
    assert not E.run(request(venv, patches, state="absent"))["changed"]


def test_absent_without_backup_rebuilds_from_record(make_venv, patches):
    """The backup is the first source; reversing our hunks is proven by the same hash."""
    venv = make_venv("0.5.9")
    assert not E.run(request(venv, patches))["failed"]
    shutil.rmtree(venv / "backup")
    res = E.run(request(venv, patches, state="absent"))
    assert res["changed"] and not res["failed"]
    assert (site(venv) / DS).read_bytes() == wheel_bytes("0.5.9", DS)


def test_tampered_backup_is_not_restored(make_venv, patches):
    venv = make_venv("0.5.11")
    assert not E.run(request(venv, patches))["failed"]
    backup = venv / "backup" / "sglang-0.5.11" / DS
    backup.write_text("tampered\n")
    res = E.run(request(venv, patches, state="absent"))
    # Falls back to reversing the hunks, which reproduces the RECORD bytes.
    assert not res["failed"]
    assert (site(venv) / DS).read_bytes() == wheel_bytes("0.5.11", DS)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.13"])
def test_failed_verification_rolls_back_byte_identical(version, make_venv, patches, monkeypatch):
    venv = make_venv(version)
    before = snapshot(venv)
    monkeypatch.setattr(VERIFY, "compile_check", lambda path, python, run_command=None: "simulated failure")
    res = E.run(request(venv, patches))
    assert res["failed"] and "restored" in res["msg"]
    assert {k: v[0] for k, v in snapshot(venv).items()} == {k: v[0] for k, v in before.items()}


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_pipeline_parallel_is_refused(version, make_venv, patches):
    venv = make_venv(version)
    before = snapshot(venv)
    res = E.run(request(venv, patches, pipeline_parallel_size=2))
    assert res["failed"] and res["decision"] == "refuse" and "pipeline_parallel_size" in res["msg"]
    assert snapshot(venv) == before


@pytest.mark.parametrize("version", NATIVE)
def test_native_release_needs_no_change(version, make_venv, patches):
    venv = make_venv(version)
    before = snapshot(venv)
    res = E.run(request(venv, patches))
    assert not res["failed"] and not res["changed"] and res["compliant"]
    assert res["draft_layer_ids"] == [0, 3, 31]
    assert res["checks"]["semantic"]
    assert snapshot(venv) == before
    text = (site(venv) / DS).read_text()
    got = VERIFY.run_set_layers(VERIFY.load_method(text, SHAPES.SET_EAGLE3), [[0, 3, 31]])
    # Capture index 0 = residual entering layer 0 = embedding output; 3 and 31 = outputs of L2, L30.
    assert set(got["layers_to_capture"]) == {0, 3, 31}


def test_native_refuses_ids_body_b_would_shift(make_venv, patches):
    """[0, 5] -> [1, 6]: body B adds 1 again when the first id is 1, so not expressible."""
    venv = make_venv("0.5.14")
    res = E.run(request(venv, patches, layer_ids=[0, 5]))
    assert res["failed"] and res["decision"] == "refuse"


@pytest.mark.parametrize("version", ["0.5.11", "0.5.13"])
def test_anchor_line_is_ambiguous_file_wide_but_not_in_its_function(version, release_tree):
    text = (site(release_tree(version)) / DS).read_text()
    line = "self.model.layers_to_capture = [val + 1 for val in layer_ids]"
    assert text.count(line) == 2  # set_eagle3 and set_dflash
    spans = HUNKS.function_spans(text)
    start, end = spans[SHAPES.SET_EAGLE3]
    assert text[start:end].count(line) == 1


@pytest.mark.parametrize("version", ["0.5.9", "0.5.13"])
def test_semantic_check_catches_a_wrong_patch(version, release_tree, patches):
    """Drop the negative-id filter: the check must fail, proving it executes the code."""
    family = SPEC[version][1]
    hunks = HUNKS.parse_patch(patches[family].replace(" if val >= 0]", "]"))
    pristine = (site(release_tree(version)) / DS).read_text()
    res = HUNKS.apply_hunks(pristine, [h for h in hunks if h.file == DS])
    assert res.state == "clean"
    assert VERIFY.semantic_check_patch(pristine, res.text, [-1, 2, 30])


def test_body_a_template_does_not_apply_to_body_b(release_tree, patches):
    pristine = (site(release_tree("0.5.13")) / DS).read_text()
    res = HUNKS.apply_hunks(pristine, HUNKS.parse_patch(patches["body_a_loop"]))
    assert res.state == "drift"


# ----------------------------------------------------------------- unit pieces


@pytest.mark.parametrize("ids", [[-1, 2, 30], [2, 30, 58], [0], [-1]])
def test_valid_layer_ids(ids):
    assert SHAPES.validate_layer_ids(ids) == ids


@pytest.mark.parametrize("ids", [[], "2,30", [2, "30"], [True, 2], [2, 2], [30, 2], [2, -1], [-2, 3], [1.0], None])
def test_invalid_layer_ids(ids):
    with pytest.raises(ValueError):
        SHAPES.validate_layer_ids(ids)


def test_native_translation():
    assert SHAPES.native_layer_ids([-1, 2, 30]) == [0, 3, 31]


def test_record_hash_conversion(release_tree):
    venv = release_tree("0.5.9")
    inst = DIST.find_installation(str(venv))
    assert inst.version == "0.5.9"
    assert inst.record[DS] == FILEIO.sha256_hex(wheel_bytes("0.5.9", DS))


def test_every_shipped_patch_parses_and_marks_what_it_adds():
    # One patch per name the decision table can pick (the families and the companions), no other.
    picked = set(SHAPES.FAMILY_TEMPLATES.values()) | set(re.findall(r'"(companion_\w+)"', inspect.getsource(SHAPES)))
    assert picked == set(PATCHES.PATCHES), sorted(picked ^ set(PATCHES.PATCHES))
    for name, text in PATCHES.PATCHES.items():
        hunks = HUNKS.parse_patch(text)
        assert hunks and all(PATCHES.MARKER in h.new for h in hunks), name
        assert "@MARKER@" not in text, name


# ----------------------------------------------------------------- the module


def test_module_check_mode_diff_then_apply(make_venv, patches, tmp_path):
    venv = make_venv("0.5.9")
    before = snapshot(venv)
    args = {"venv": str(venv), "patches": patches, "backup_dir": str(tmp_path / "bk"),
            "python": sys.executable, "_ansible_check_mode": True, "_ansible_diff": True}
    _, out = run_module(LIBRARY, tmp_path, args)
    assert out["changed"] and not out.get("failed") and out["diff"]
    assert snapshot(venv) == before
    args.update(_ansible_check_mode=False, _ansible_diff=False)
    _, out = run_module(LIBRARY, tmp_path, args)
    assert out["changed"] and out["compliant"] and "diff" not in out
    assert out["checks"] == {"compiled": True, "semantic": True}
    assert out["companion"]["template"] == "companion_cg_attr"


def test_module_refuses_with_fail_json(make_venv, patches, tmp_path):
    venv = make_venv("0.5.4.post1")
    _, out = run_module(LIBRARY, tmp_path, {"venv": str(venv), "patches": patches, "backup_dir": str(tmp_path / "bk")})
    assert out["failed"] and "0.5.4.post1" in out["msg"] and DS in out["msg"]


def test_module_rejects_string_ids(make_venv, patches, tmp_path):
    venv = make_venv("0.5.9")
    _, out = run_module(LIBRARY, tmp_path, {"venv": str(venv), "patches": patches, "layer_ids": ["-1", "2"],
                                            "backup_dir": str(tmp_path / "bk")})
    assert out["failed"] and "layer_ids[0] is '-1' (str); every id must be an int" in out["msg"], out["msg"]


def _old_python():
    """A working Python 3.9 (or 3.10) interpreter, if this machine has one."""
    cands = [str(p) for p in sorted(Path(os.path.expanduser("~/.pyenv/versions")).glob("3.9*/bin/python3"))]
    cands += [c for c in (shutil.which("python3.9"), shutil.which("python3.10")) if c]
    for cand in cands:
        if subprocess.run([cand, "-c", "pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return cand
    return None


def test_engine_runs_on_python_39(make_venv, patches, tmp_path):
    """Hosts run Debian's python3; the engine must work on 3.9 (compiling with the venv's python)."""
    py = _old_python()
    if not py:
        # Listed in testbed/skips.yml: Debian 12 packages no Python 3.9 or 3.10.
        pytest.skip("no Python 3.9/3.10 interpreter here")
    venv = make_venv("0.5.9")
    (tmp_path / "patches.json").write_text(json.dumps(patches))
    # The engine's files import each other by the collection's name, as on a host.
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "import ansible_collections.fleetops.sglang.plugins.module_utils._eagle3 as e; "
            "import subprocess; "
            "run = lambda argv: (lambda p: (p.returncode, p.stdout, p.stderr))(subprocess.run("
            "argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)); "
            "r = e.run(e.Request(venv=sys.argv[2], patches=json.load(open(sys.argv[3])), "
            "backup_dir=sys.argv[4], python=sys.argv[5], run_command=run)); r.pop('diff'); print(json.dumps(r))")
    proc = subprocess.run([py, "-c", code, str(COLLECTIONS_PATH), str(venv), str(tmp_path / "patches.json"),
                           str(tmp_path / "bk"), sys.executable], stdout=subprocess.PIPE, universal_newlines=True)
    out = json.loads(proc.stdout)
    assert not out["failed"], out["msg"]
    assert out["changed"] and out["checks"] == {"compiled": True, "semantic": True}


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Apply the embedding-capture patch, with the hunks the module ships
      fleetops.sglang.sglang_eagle3:
        venv: "%(venv)s"
        backup_dir: "%(backup)s"
      register: applied
    - name: Save what the module returned
      ansible.builtin.copy:
        dest: "%(out)s"
        content: "{{ {'applied': applied} | to_json }}"
"""


def test_through_ansible_playbook(make_venv, patches, tmp_path):
    """AnsiballZ ships the patch data with the engine: no patches argument, the shipped hunks applied."""
    playbook = Path(sys.executable).parent / "ansible-playbook"
    # Next to .venv's python (scripts/bootstrap); elsewhere a failure, not a skip (testbed/skips.yml).
    assert playbook.exists(), "no ansible-playbook next to %s: run the tests with .venv/bin/python" % sys.executable
    venv = make_venv("0.5.9")
    out = tmp_path / "out.json"
    (tmp_path / "pb.yml").write_text(PLAYBOOK % {
        "venv": venv,
        "backup": tmp_path / "bk", "out": out})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(playbook), "-i", "localhost,", "-c", "local", "-e",
                           "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "pb.yml")],
                          env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    data = json.loads(out.read_text())
    assert data["applied"]["changed"] and data["applied"]["compliant"]
    assert data["applied"]["checks"] == {"compiled": True, "semantic": True}
