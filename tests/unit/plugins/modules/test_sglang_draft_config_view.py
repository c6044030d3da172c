"""plugins/modules/sglang_draft_config.py with ``view``: the draft's directory is only read (model
storage may be read-only, or shared by hosts on releases that need other ids); the server reads a view
of the module's own, whose config.json carries the ids, beside a link to each other entry of the draft."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from conftest import MODULES, REPO, run_module
from safetensors_fixture import DEEPSEEK_V3_EAGLE3_TENSORS, write_safetensors

MODULE = MODULES / "sglang_draft_config.py"
FIXTURES = REPO / "files" / "models"
TARGET = str(FIXTURES / "deepseek-v3")
KEY = "eagle_aux_hidden_state_layer_ids"


def tree(path):
    """Every entry under ``path``: name -> (mode, size, mtime_ns, link target)."""
    out = {}
    for name in sorted(os.listdir(path)):
        st = os.lstat(os.path.join(path, name))
        out[name] = (st.st_mode, st.st_size, st.st_mtime_ns,
                     os.readlink(os.path.join(path, name)) if stat.S_ISLNK(st.st_mode) else None)
    return out


@pytest.fixture
def draft(tmp_path):
    """A draft as it arrived from training, made read-only as a read-only export would be."""
    d = tmp_path / "models" / "deepseek-v3-eagle3"
    d.mkdir(parents=True)
    shutil.copy(str(FIXTURES / "deepseek-v3-eagle3" / "config.json"), str(d / "config.json"))
    write_safetensors(str(d / "model.safetensors"), DEEPSEEK_V3_EAGLE3_TENSORS)
    (d / "tokenizer.json").write_text("{}\n")
    for entry in d.iterdir():
        entry.chmod(0o444)
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


def run(tmp_path, draft, view, ids, check_mode=False, diff=False, state="present"):
    return run_module(MODULE, tmp_path, dict(path=str(draft), view=str(view), layer_ids=ids, user_layer_ids=ids,
                                             target_model_path=TARGET, state=state),
                      check_mode=check_mode, diff=diff, timeout=60)


def ids_in(path):
    return json.loads(path.read_text())["eagle_config"][KEY]


def test_the_view_holds_the_ids_and_links_the_rest_and_the_draft_is_only_read(tmp_path, draft):
    before = tree(draft)
    view = tmp_path / "etc" / "sglang.draft"
    rc, res = run(tmp_path, draft, view, [-1, 2, 30])
    assert rc == 0 and res["changed"] is True, res
    assert ids_in(view / "config.json") == [-1, 2, 30]
    # Every other key of the draft's own config, in its order.
    source = json.loads((draft / "config.json").read_text())
    written = json.loads((view / "config.json").read_text())
    assert list(written) == list(source) and written["architectures"] == source["architectures"]
    assert {n: os.readlink(view / n) for n in os.listdir(view) if n != "config.json"} == {
        "model.safetensors": str(draft / "model.safetensors"), "tokenizer.json": str(draft / "tokenizer.json")}
    assert stat.S_IMODE(os.stat(view / "config.json").st_mode) == 0o644
    assert res["view"] == {"path": str(view), "links": 2, "added": ["model.safetensors", "tokenizer.json"],
                           "removed": []}
    assert tree(draft) == before
    # Again: nothing to do.
    rc, again = run(tmp_path, draft, view, [-1, 2, 30])
    assert rc == 0 and again["changed"] is False and again["compliant"] is True, again


def test_one_shared_draft_two_releases_two_views(tmp_path, draft):
    """Hosts on a patched and a native release share one draft: each view has its ids, no flip-flop."""
    patched, native = tmp_path / "a" / "view", tmp_path / "b" / "view"
    assert run(tmp_path, draft, patched, [-1, 2, 30])[0] == 0
    assert run(tmp_path, draft, native, [0, 3, 31])[0] == 0
    for view, ids in ((patched, [-1, 2, 30]), (native, [0, 3, 31])):
        rc, res = run(tmp_path, draft, view, ids)
        assert rc == 0 and res["changed"] is False and ids_in(view / "config.json") == ids, res


def test_a_new_export_is_followed(tmp_path, draft):
    view = tmp_path / "view"
    assert run(tmp_path, draft, view, [-1, 2, 30])[0] == 0
    draft.chmod(0o755)
    config = json.loads((draft / "config.json").read_text())
    config["rope_theta"] = 12345.0
    (draft / "config.json").chmod(0o644)
    (draft / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    os.remove(draft / "tokenizer.json")
    (draft / "special_tokens_map.json").write_text("{}\n")
    rc, res = run(tmp_path, draft, view, [-1, 2, 30], diff=True)
    assert rc == 0 and res["changed"] is True, res
    assert json.loads((view / "config.json").read_text())["rope_theta"] == 12345.0
    assert res["view"]["added"] == ["special_tokens_map.json"] and res["view"]["removed"] == ["tokenizer.json"]
    assert sorted(os.listdir(view)) == ["config.json", "model.safetensors", "special_tokens_map.json"]
    # --check --diff tells the truth: the config's diff, and the links'.
    headers = [d["before_header"] for d in res["diff"]]
    assert headers == [str(view / "config.json"), "%s (links)" % view], res["diff"]


def test_check_mode_writes_nothing_and_says_what_it_would(tmp_path, draft):
    view = tmp_path / "view"
    rc, res = run(tmp_path, draft, view, [-1, 2, 30], check_mode=True, diff=True)
    assert rc == 0 and res["changed"] is True and "would write" in res["msg"], res
    assert not view.exists()
    assert json.loads(res["diff"][0]["after"])["eagle_config"][KEY] == [-1, 2, 30]


def test_an_audit_reports_a_stale_view_without_writing(tmp_path, draft):
    view = tmp_path / "view"
    assert run(tmp_path, draft, view, [-1, 2, 30])[0] == 0
    rc, res = run(tmp_path, draft, view, [0, 3, 31], state="audit")
    assert rc == 0 and res["compliant"] is False and res["changed"] is False, res
    assert res["layer_ids_after"] == [-1, 2, 30] and ids_in(view / "config.json") == [-1, 2, 30]


def test_what_is_not_a_link_in_the_view_is_never_removed_and_refuses_the_write(tmp_path, draft):
    view = tmp_path / "view"
    view.mkdir()
    (view / "notes.txt").write_text("someone's file\n")
    rc, res = run(tmp_path, draft, view, [-1, 2, 30])
    assert rc != 0 and "not a link to the draft's files, which the module never removes: notes.txt" in res["msg"], res
    assert (view / "notes.txt").read_text() == "someone's file\n" and not (view / "config.json").exists()


def test_the_fingerprint_sees_a_new_export_of_the_draft(tmp_path, draft):
    from ansible_collections.fleetops.sglang.plugins.module_utils import _fingerprint
    before = _fingerprint.component_hash("tree:%s" % draft)
    assert before == _fingerprint.component_hash("tree:%s" % draft) and before != "missing"
    draft.chmod(0o755)
    (draft / "model.safetensors").chmod(0o644)
    with open(draft / "model.safetensors", "ab") as fh:
        fh.write(b"\0")
    assert _fingerprint.component_hash("tree:%s" % draft) != before
    assert _fingerprint.component_hash("tree:%s" % (tmp_path / "nowhere")) == "missing"


def test_the_probe_finds_a_view_that_is_not_the_drafts_current_files(tmp_path, draft):
    from ansible_collections.fleetops.sglang.plugins.module_utils import _draftconfig
    view = tmp_path / "view"
    assert run(tmp_path, draft, view, [-1, 2, 30])[0] == 0
    assert _draftconfig.view_differences(str(draft), str(view), [-1, 2, 30]) == []
    assert _draftconfig.view_differences(str(draft), str(view), [0, 3, 31]) == [
        "its config.json is not the draft's with the ids [0, 3, 31]"]
    os.remove(view / "tokenizer.json")
    assert _draftconfig.view_differences(str(draft), str(view), [-1, 2, 30]) == ["links to make: tokenizer.json"]


def test_a_server_started_before_a_new_export_of_the_draft_is_not_adopted(tmp_path, draft):
    from ansible_collections.fleetops.sglang.plugins.module_utils import _adopt
    assert _adopt.expanded(["/a", "tree:%s" % draft, "tree:%s" % (tmp_path / "nowhere")]) == [
        "/a", str(draft), str(draft / "config.json"), str(draft / "model.safetensors"), str(draft / "tokenizer.json")]
