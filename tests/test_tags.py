"""The role's tags: prefixed (sglang_install, ...), the bare names of 1.x kept as deprecated aliases.

One list says which bare names are aliases (_inputs.DEPRECATED_TAGS); the task files must
carry each alias next to its prefixed twin, and a run that selects one is warned.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import COLLECTIONS_PATH, REPO, ROLE  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.fleetops.sglang.plugins.module_utils import _inputs as si  # noqa: E402

SPECIAL = {"always", "never"}


def _tag_lists(node):
    if isinstance(node, dict):
        if isinstance(node.get("tags"), list):
            yield node["tags"]
        for value in node.values():
            yield from _tag_lists(value)
    elif isinstance(node, list):
        for value in node:
            yield from _tag_lists(value)


def _all_tag_lists():
    files = sorted((ROLE / "tasks").glob("*.yml")) + sorted((REPO / "playbooks").glob("*.yml"))
    for path in files:
        for tags in _tag_lists(yaml.safe_load(path.read_text())):
            yield path.name, tags


def test_every_tag_is_prefixed_or_an_alias_next_to_its_prefixed_twin():
    seen = set()
    for name, tags in _all_tag_lists():
        for tag in tags:
            if tag in SPECIAL or tag.startswith("sglang_"):
                continue
            assert tag in si.DEPRECATED_TAGS, "%s: tag %r is neither sglang_-prefixed nor a kept alias" % (name, tag)
            assert "sglang_" + tag in tags, "%s: the alias %r without %r" % (name, tag, "sglang_" + tag)
            seen.add(tag)
        for tag in tags:
            if tag.startswith("sglang_") and tag[len("sglang_"):] in si.DEPRECATED_TAGS:
                assert tag[len("sglang_"):] in tags, "%s: %r lost its 1.x alias before 3.0.0" % (name, tag)
    assert seen == set(si.DEPRECATED_TAGS), "an alias in DEPRECATED_TAGS that no task carries"


def test_only_bare_names_are_reported_once_each_with_their_replacement():
    messages = si.deprecated_tag_messages(["install", "sglang_patch", "install"], ["restart", "all"])
    assert messages == ["the role's tag 'install' is now 'sglang_install'; the bare name goes in fleetops.sglang 3.0.0",
                        "the role's tag 'restart' is now 'sglang_restart'; the bare name goes in fleetops.sglang 3.0.0"]
    assert si.deprecated_tag_messages(["sglang_install", "all"], []) == []
    assert si.deprecated_tag_messages(None, None) == []


PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: The probe's controller side only (no fast path, no live reading)
      fleetops.sglang.sglang_probe:
        role_checks: true
        fast_path: false
        expected_version: "0.5.9"
      tags: [always]
"""


def _run(tmp_path, *args):
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH), ANSIBLE_NOCOLOR="1",
               ANSIBLE_DEPRECATION_WARNINGS="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "one,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, "play.yml", *args],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_a_run_with_a_bare_tag_gets_a_deprecation_warning_naming_the_new_one(tmp_path):
    out = _run(tmp_path, "--tags", "install")
    assert "DEPRECATION WARNING" in out and "'install' is now 'sglang_install'" in out, out
    assert "DEPRECATION WARNING" not in _run(tmp_path, "--tags", "sglang_install")
