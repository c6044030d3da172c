"""Task coverage: the repository's task list (testbed/coverage.py) and the callback's records.

The callback runs inside real ansible-playbook processes here (a local play of
this test's own), so its file:line names and its reading of ``when`` are Ansible's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "testbed"))
import coverage  # noqa: E402

CALLBACKS = REPO / "molecule" / "shared" / "callback_plugins"


def test_every_task_of_the_role_and_playbooks_is_listed_with_its_line():
    static = coverage.static_tasks()
    assert static, "no task found"
    for key, name in static.items():
        path, line = key.rsplit(":", 1)
        text = (REPO / path).read_text().splitlines()[int(line) - 1]
        # The line of the task's first key: "- name: ..." (or "- <module>:" for a nameless one).
        assert text.lstrip().startswith("- "), (key, text)
        if name:
            assert name.split()[0] in text or text.strip().startswith("- name:"), (key, text)
    files = {k.rsplit(":", 1)[0] for k in static}
    assert "roles/sglang/tasks/configure.yml" in files and "playbooks/remediate.yml" in files
    # Imports are resolved at parse time: never a task of their own.
    assert not any(coverage.STATIC_ACTIONS[0] in (REPO / k.rsplit(":", 1)[0]).read_text().splitlines()
                   [int(k.rsplit(":", 1)[1]) - 1] for k in static)


def _play(tmp_path: Path, extra_vars: dict) -> dict:
    play = tmp_path / "playbooks" / "cov.yml"
    play.parent.mkdir(parents=True, exist_ok=True)
    play.write_text(yaml.safe_dump([{
        "name": "Coverage probe", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [
            {"name": "Always runs", "ansible.builtin.debug": {"msg": "x"}},
            {"name": "Runs when both hold", "ansible.builtin.debug": {"msg": "y"},
             "when": ["first | bool", "second | bool"]},
            {"name": "A block", "when": ["first | bool"], "block": [
                {"name": "Inside the block", "ansible.builtin.debug": {"msg": "z"}}]},
            {"name": "Loops", "ansible.builtin.debug": {"msg": "{{ item }}"}, "loop": [1, 2],
             "when": ["item > 1"]},
        ]}], sort_keys=False))
    out = tmp_path / "cov"
    env = dict(os.environ, SGLANG_TEST_COVERAGE_DIR=str(out), ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
               ANSIBLE_NOCOLOR="1")
    bin_dir = Path(sys.executable).parent
    proc = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", "localhost,", str(play),
                           "-e", json.dumps(extra_vars)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return coverage.merge(out.glob("*.json"))


def test_the_callback_records_what_ran_and_which_way_each_condition_went(tmp_path):
    first = _play(tmp_path / "a", {"first": True, "second": False})
    by_name = {rec["name"]: (key, rec) for key, rec in first.items()}
    assert by_name["Always runs"][1]["ran"] == 1
    _, both = by_name["Runs when both hold"]
    assert both["ran"] == 0 and both["skipped"] == 1
    assert both["conditions"] == {"first | bool": {"true": 1, "false": 0}, "second | bool": {"true": 0, "false": 1}}
    _, inside = by_name["Inside the block"]
    assert inside["ran"] == 1 and inside["conditions"]["first | bool"] == {"true": 1, "false": 0}
    _, loops = by_name["Loops"]
    assert loops["ran"] == 1 and loops["skipped"] == 1
    assert loops["conditions"]["item > 1"] == {"true": 1, "false": 1}
    key = by_name["Always runs"][0]
    assert key.startswith("playbooks/cov.yml:")

    second = _play(tmp_path / "b", {"first": False, "second": True})
    merged = coverage.merge(list((tmp_path / "a" / "cov").glob("*.json")) + list((tmp_path / "b" / "cov").glob("*.json")))
    _, inside = {rec["name"]: (k, rec) for k, rec in merged.items()}["Inside the block"]
    assert inside["conditions"]["first | bool"] == {"true": 1, "false": 1}
    assert second  # the second run wrote its own file


def test_a_task_no_run_reached_fails_unless_excused():
    static = {"roles/sglang/tasks/x.yml:3": "Do a", "roles/sglang/tasks/x.yml:9": "Do b",
              "playbooks/p.yml:5": "Do c"}
    merged = {"roles/sglang/tasks/x.yml:3": {"name": "Do a", "ran": 2, "skipped": 0,
                                             "conditions": {"a | bool": {"true": 2, "false": 0}}}}
    verdict = coverage.judge(static, merged, {"playbooks/p.yml: Do c": "needs a GPU"})
    assert verdict["never_ran"] == ["roles/sglang/tasks/x.yml:9 (Do b)"]
    assert verdict["excused"] == ["playbooks/p.yml:5 (Do c) -- needs a GPU"]
    assert verdict["never_false"] == ["roles/sglang/tasks/x.yml:3: when a | bool"]
    assert verdict["never_true"] == []
    stale = coverage.judge(static, merged, {"roles/sglang/tasks/x.yml: Do a": "x", "gone.yml: Old": "y"})
    assert stale["stale_exceptions"] == ["gone.yml: Old", "roles/sglang/tasks/x.yml: Do a (it ran)"]


def test_the_exceptions_file_names_tasks_that_exist_with_a_reason():
    static = coverage.static_tasks()
    labels = {"%s: %s" % (k.rsplit(":", 1)[0], n) for k, n in static.items()}
    for label, reason in coverage.load_exceptions().items():
        assert label in labels, label
        assert len(reason) > 10, label
