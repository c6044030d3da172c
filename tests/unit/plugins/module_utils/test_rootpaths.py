"""What root runs or trusts must be root's all the way down (plugins/module_utils/_rootpaths.py): the
venv, the interpreter that makes it, the wheelhouse and the state directory, refused by the probe
before any change when someone else than root can change one of them or a directory above it.

On a host: molecule/bad-input (the venv's parent given to the service user, the wheelhouse's
parent made writable by every user).
"""

from __future__ import annotations

import os

import pytest

from conftest import run_module
from unit.plugins.modules.test_sglang_probe import MODULE

from ansible_collections.fleetops.sglang.plugins.module_utils import _rootpaths as RP

# Giving a directory to another user takes root, as the suite runs (scripts/test, CI): no skip.
NOBODY = 65534


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """tmp_path/a/b/venv, root's and 0755 all the way. The directories above tmp_path (/tmp, world-writable
    and sticky) are left out of what the rule sees, so that each case below is about one component."""
    root = tmp_path / "a" / "b" / "venv"
    root.mkdir(parents=True)
    for path in (tmp_path, tmp_path / "a", tmp_path / "a" / "b", root):
        os.chmod(path, 0o755)
    everything = RP.writers
    monkeypatch.setattr(RP, "writers", lambda path: [w for w in everything(path) if w[0].startswith(str(tmp_path))])
    return root


def errors_below(tree, label="sglang_venv"):
    return RP.root_path_errors({label: str(tree)})


def test_root_owned_and_root_writable_only_passes():
    # /tmp itself is world-writable (sticky): refused as an ancestor, named first.
    assert RP.writers("/tmp/x/venv")[0] == ("/tmp", "writable by every user (mode 1777)")
    assert RP.root_path_errors({"sglang_venv": "/usr/lib", "sglang_python": "/usr/bin/python3",
                                "sglang_state_dir": "/var/lib/no-such-dir/yet"}) == []
    # Nothing given, nothing checked.
    assert RP.root_path_errors({"sglang_wheelhouse_remote": ""}) == []


def test_another_owner_or_write_for_others_anywhere_above_is_refused(tree):
    top = tree.parent.parent
    os.chown(top, NOBODY, -1)
    found = errors_below(tree)
    assert found and "sglang_venv=%s lies under %s, owned by" % (tree, top) in found[0], found
    assert "uid %d" % NOBODY in found[0] and "chown root:root, chmod go-w" in found[0]
    os.chown(top, 0, -1)
    os.chmod(tree.parent, 0o757)
    assert "writable by every user (mode 0757)" in errors_below(tree)[0]
    os.chmod(tree.parent, 0o775)
    os.chown(tree.parent, 0, NOBODY)
    assert "writable by the group" in errors_below(tree)[0] and "gid %d" % NOBODY in errors_below(tree)[0]
    # Group root's write bit: only root's group (gid 0) may hold it.
    os.chown(tree.parent, 0, 0)
    assert errors_below(tree) == []
    # The path itself, when it exists: "is", not "lies under".
    os.chown(tree, NOBODY, -1)
    assert "sglang_venv=%s is %s, owned by" % (tree, tree) in errors_below(tree)[0]


def test_a_symlink_is_followed_and_its_target_checked(tree, tmp_path):
    link = tmp_path / "a" / "current"
    link.symlink_to(tree)
    assert errors_below(link) == []
    os.chmod(tree, 0o777)
    assert "writable by every user" in errors_below(link)[0]


def test_a_sticky_world_writable_directory_is_refused(tree, tmp_path):
    sticky = tmp_path / "shared"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    # Anyone may create the missing component below it before root does.
    assert "writable by every user (mode 1777)" in errors_below(sticky / "venv")[0]


def test_the_probe_refuses_before_reading_anything_else(host):
    h = host("0.5.9")
    rc, res = run_module(MODULE, h.tmp, h.args())
    assert rc == 0 and res["compliant"] is True, res
    # The test venv lies under /tmp (world-writable, sticky): anyone could have made the directory below it.
    rc, res = run_module(MODULE, h.tmp, h.args(root_paths={"sglang_venv": str(h.venv), "sglang_python": "/usr/bin/python3"}))
    assert rc != 0 and res["failed"], res
    assert res["msg"].startswith("refused: sglang_venv=%s lies under /tmp, writable by every user (mode 1777)" % h.venv)
    assert "sglang_python" not in res["msg"] and "compliant" not in res, res


def test_a_model_tree_is_checked_entry_by_entry_and_through_its_links(tree, tmp_path):
    """sglang_trust_remote_code: the model directories' Python files run, so each entry must be root's too;
    a Hugging Face snapshot's links are followed into the blobs."""
    model = tree / "model"
    model.mkdir(mode=0o755)
    code = model / "modeling_deepseek.py"
    code.write_text("print('remote code')\n")
    os.chmod(code, 0o644)
    assert RP.root_path_errors({"sglang_model_path": "tree:%s" % model}) == []
    os.chown(code, NOBODY, -1)
    (found,) = RP.root_path_errors({"sglang_model_path": "tree:%s" % model})
    assert found.startswith("sglang_model_path=%s holds %s, owned by" % (model, code)), found
    # Without tree: only the directory and those above it are judged.
    assert RP.root_path_errors({"sglang_model_path": str(model)}) == []
    os.chown(code, 0, -1)
    blob = tree / "blob"
    blob.mkdir(mode=0o755)
    target = blob / "configuration_deepseek.py"
    target.write_text("")
    os.chmod(target, 0o646)
    (model / "configuration_deepseek.py").symlink_to(target)
    (found,) = RP.root_path_errors({"sglang_model_path": "tree:%s" % model})
    assert "writable by every user (mode 0646)" in found and str(target) in found, found
