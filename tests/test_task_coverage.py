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


def _play(tmp_path: Path, extra_vars: dict, tasks: list = None) -> dict:
    play = tmp_path / "playbooks" / "cov.yml"
    play.parent.mkdir(parents=True, exist_ok=True)
    play.write_text(yaml.safe_dump([{
        "name": "Coverage probe", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": tasks or [
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


def test_the_callback_records_failures_by_kind_and_marks_no_condition_that_raised(tmp_path):
    merged = _play(tmp_path, {"on": True}, tasks=[
        {"name": "Fails on purpose", "ansible.builtin.fail": {"msg": "the fault: sglang_x is undefined here"},
         "when": ["on | bool"], "ignore_errors": True},
        {"name": "When on an undefined variable", "ansible.builtin.debug": {"msg": "x"},
         "when": ["on | bool", "nope | bool"], "ignore_errors": True},
        {"name": "When not a boolean", "ansible.builtin.debug": {"msg": "x"}, "when": ["'text'"],
         "ignore_errors": True},
        {"name": "Argument on an undefined variable", "ansible.builtin.debug": {"msg": "{{ nope }}"},
         "when": ["on | bool"], "ignore_errors": True},
        {"name": "Broken failed_when", "ansible.builtin.debug": {"msg": "x"}, "failed_when": "nope",
         "ignore_errors": True},
        {"name": "Items, one failing", "ansible.builtin.assert": {"that": ["item < 2"]}, "loop": [1, 2],
         "ignore_errors": True},
    ])
    by_name = {rec["name"]: rec for rec in merged.values()}
    fault = by_name["Fails on purpose"]
    # The fail task's own message says "is undefined": it is still the task's own failure.
    assert (fault["ok"], fault["failed"], fault["failures"]) == (0, 1, {"task": 1}), fault
    assert fault["action"] in coverage.FAIL_ACTIONS
    assert fault["conditions"] == {"on | bool": {"true": 1, "false": 0}}
    assert fault["failure_messages"]["task"] == ["the fault: sglang_x is undefined here"]
    assert fault["ran"] == 1  # the old key, as before: ok + failed
    undefined = by_name["When on an undefined variable"]
    assert undefined["failures"] == {"conditional": 1} and undefined["ok"] == 0
    assert undefined["conditions"] == {}, "a condition that raised is neither true nor false"
    assert "'nope' is undefined" in undefined["failure_messages"]["conditional"][0]
    assert by_name["When not a boolean"]["failures"] == {"conditional": 1}
    assert by_name["When not a boolean"]["conditions"] == {}
    argument = by_name["Argument on an undefined variable"]
    assert argument["failures"] == {"template": 1} and argument["conditions"] == {}
    assert by_name["Broken failed_when"]["failures"] == {"conditional": 1}
    items = by_name["Items, one failing"]
    assert (items["ok"], items["failed"], items["failures"]) == (1, 1, {"task": 1}), items


def _rec(ok=0, task=0, conditional=0, template=0, action="ansible.builtin.command", msg="rc 1", conds=None):
    failures = {k: n for k, n in (("task", task), ("conditional", conditional), ("template", template)) if n}
    return {"name": "", "action": action, "ran": ok + task + conditional + template, "ok": ok,
            "failed": task + conditional + template, "skipped": 0, "failures": failures,
            "failure_messages": {k: [msg] for k in failures}, "conditions": conds or {}}


STATIC = {"roles/sglang/tasks/x.yml:3": "Install", "roles/sglang/tasks/x.yml:9": "Only a fault reaches",
          "roles/sglang/tasks/x.yml:15": "Fail when unhealthy", "roles/sglang/tasks/x.yml:21": "Broken when",
          "roles/sglang/tasks/x.yml:27": "Ran, and broke once"}


def test_a_task_seen_only_failing_is_uncovered_unless_listed_and_a_broken_condition_never_counts():
    merged = {
        # Failed in a fault case, ran cleanly elsewhere: covered, nothing to list.
        "roles/sglang/tasks/x.yml:3": _rec(ok=4, task=1, msg="pip: corrupt wheel"),
        "roles/sglang/tasks/x.yml:9": _rec(task=2, msg="read-only file system"),
        "roles/sglang/tasks/x.yml:15": _rec(task=3, action="ansible.builtin.fail", msg="never healthy"),
        "roles/sglang/tasks/x.yml:21": _rec(conditional=1, msg="Task failed: A 'when' expression failed: "
                                                              "Error while evaluating conditional: 'nope' is undefined"),
        "roles/sglang/tasks/x.yml:27": _rec(ok=1, template=1, msg="Task failed: 'nope' is undefined"),
    }
    verdict = coverage.judge(STATIC, merged, {})
    assert verdict["never_ran"] == [
        "roles/sglang/tasks/x.yml:9 (Only a fault reaches) -- only failed (2x), and expected-failures.yml does not"
        " list it: read-only file system",
        "roles/sglang/tasks/x.yml:21 (Broken when) -- failed 1x on a broken condition or template, which never"
        " counts: Task failed: A 'when' expression failed: Error while evaluating conditional: 'nope' is undefined"]
    # A fail task fails by design; a task that ran cleanly elsewhere counts, its broken failure printed.
    assert [v.split(" --")[0] for v in verdict["failed_as_expected"]] == [
        "roles/sglang/tasks/x.yml:15 (Fail when unhealthy)"]
    assert verdict["broken_failures"] == [
        "roles/sglang/tasks/x.yml:27 (Ran, and broke once) -- Task failed: 'nope' is undefined"]

    expected = {"roles/sglang/tasks/x.yml: Only a fault reaches": "faults: case 12, a read-only mount",
                "roles/sglang/tasks/x.yml: Broken when": "faults: listed, but a broken condition is a bug",
                "roles/sglang/tasks/x.yml: Install": "faults: not needed, it ran"}
    listed = coverage.judge(STATIC, merged, {"roles/sglang/tasks/x.yml: Broken when": "excused, but still a bug"},
                            expected)
    assert [v.split(" --")[0] for v in listed["never_ran"]] == ["roles/sglang/tasks/x.yml:21 (Broken when)"]
    assert listed["excused"] == []
    assert "roles/sglang/tasks/x.yml:9 (Only a fault reaches) -- failed 2x as expected (faults: case 12, a read-only" \
        " mount): read-only file system" in listed["failed_as_expected"]
    assert listed["stale_exceptions"] == [
        "expected-failures: roles/sglang/tasks/x.yml: Broken when (it never failed)",
        "expected-failures: roles/sglang/tasks/x.yml: Install (it ran without failing)"]
    text = coverage.render(listed, len(STATIC))
    assert text.startswith("task coverage: 4 of 5 role and playbook tasks ran (0 excused, 2 only by failing as"
                           " expected, 1 never ran)"), text


def test_records_of_the_older_format_still_merge(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps({"tasks": {"playbooks/p.yml:5": {
        "name": "Do c", "ran": 2, "skipped": 1, "conditions": {"a": {"true": 2, "false": 1}}}}}))
    merged = coverage.merge([tmp_path / "old.json"])
    assert merged["playbooks/p.yml:5"]["ok"] == 2 and merged["playbooks/p.yml:5"]["failed"] == 0
    assert coverage.judge({"playbooks/p.yml:5": "Do c"}, merged, {})["never_ran"] == []


def test_a_switch_seen_only_one_way_is_reported_as_advisory_unless_strict(tmp_path, monkeypatch, capsys):
    names = coverage.switch_names()
    assert {"sglang_audit", "sglang_service_manage", "sglang_install_source"} <= names
    assert "sglang_version" not in names and "sglang_venv" not in names
    written = coverage.written_conditions()
    # An import's when guards the imported file's tasks.
    install = [rec for rec in written.values() if "not (sglang_audit | bool)" in rec["conditions"]
               and any(k.startswith("roles/sglang/tasks/install.yml:") for k in rec["tasks"])]
    assert install, "the import of install.yml and its when"

    written = {"roles/sglang/tasks/x.yml:3": {"name": "Install", "conditions": ["not (sglang_audit | bool)",
                                                                               "other | bool"],
                                              "tasks": ["roles/sglang/tasks/y.yml:1", "roles/sglang/tasks/y.yml:7"]},
               "roles/sglang/tasks/x.yml:9": {"name": "Copy", "conditions": ["sglang_install_source == 'wheelhouse'"],
                                              "tasks": ["roles/sglang/tasks/x.yml:9"]},
               "roles/sglang/tasks/x.yml:15": {"name": "Memo", "conditions": ["sglang_audit_memo | bool"],
                                               "tasks": ["roles/sglang/tasks/x.yml:15"]}}
    merged = {"roles/sglang/tasks/y.yml:1": _rec(ok=3, conds={"not (sglang_audit | bool)": {"true": 3, "false": 0}}),
              "roles/sglang/tasks/y.yml:7": _rec(ok=3, conds={"not (sglang_audit | bool)": {"true": 3, "false": 0}}),
              "roles/sglang/tasks/x.yml:9": _rec(ok=1, conds={
                  "sglang_install_source == 'wheelhouse'": {"true": 1, "false": 2}})}
    assert coverage.switches(written, merged, {"sglang_audit", "sglang_install_source"}) == [
        "roles/sglang/tasks/x.yml:3 (Install): when not (sglang_audit | bool) -- only true (6)"]
    # sglang_audit_memo is not sglang_audit; "other" is no switch.
    assert coverage.switches(written, merged, {"sglang_audit", "sglang_audit_memo"})[1:] == [
        "roles/sglang/tasks/x.yml:15 (Memo): when sglang_audit_memo | bool -- never evaluated"]

    # The report: advisory by default (exit 0 on a full set of tasks run), strict on request.
    static = {"roles/sglang/tasks/y.yml:1": "A"}
    monkeypatch.setattr(coverage, "static_tasks", lambda: static)
    monkeypatch.setattr(coverage, "written_conditions", lambda: written)
    monkeypatch.setattr(coverage, "switch_names", lambda: {"sglang_audit"})
    monkeypatch.setattr(coverage, "load_exceptions", lambda: {})
    monkeypatch.setattr(coverage, "load_expected_failures", lambda: {})
    monkeypatch.delenv("SGLANG_COVERAGE_SWITCHES_STRICT", raising=False)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "r.json").write_text(json.dumps({"tasks": merged}))
    assert coverage.main(["report", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "switches not seen both true and false (advisory" in out
    assert "when not (sglang_audit | bool) -- only true (6)" in out
    assert coverage.main(["report", str(runs), "--switches-strict"]) == 1
    monkeypatch.setenv("SGLANG_COVERAGE_SWITCHES_STRICT", "1")
    assert coverage.main(["report", str(runs)]) == 1
    assert coverage.main(["report", str(runs), "--advisory"]) == 0


def test_the_expected_failures_file_names_tasks_that_exist_with_a_scenario_and_a_reason():
    static = coverage.static_tasks()
    labels = {"%s: %s" % (k.rsplit(":", 1)[0], n) for k, n in static.items()}
    data = yaml.safe_load(coverage.EXPECTED_FAILURES.read_text()) or {}
    for file, tasks in data.items():
        for task, entry in tasks.items():
            assert "%s: %s" % (file, task) in labels, (file, task)
            assert (REPO / "molecule" / entry["scenario"]).is_dir(), entry
            assert len(entry["why"]) > 10, (file, task)


def test_a_switch_written_on_an_import_or_a_block_matches_what_the_callback_records(tmp_path):
    role = tmp_path / "roles" / "sglang"
    for sub, doc in (("defaults/main.yml", {"sglang_audit": False, "sglang_mode": "a"}),
                     ("meta/argument_specs.yml", {"argument_specs": {"main": {"options": {
                         "sglang_audit": {"type": "bool"}, "sglang_mode": {"type": "str", "choices": ["a", "b"]}}}}}),
                     ("tasks/main.yml", [
                         {"name": "Import the writes", "ansible.builtin.import_tasks": "writes.yml",
                          "when": "not (sglang_audit | bool)"},
                         {"name": "Mode a only", "when": ["sglang_mode == 'a'"], "block": [
                             {"name": "Say a", "ansible.builtin.debug": {"msg": "a"}}]}]),
                     ("tasks/writes.yml", [{"name": "Write", "ansible.builtin.debug": {"msg": "w"}}])):
        (role / sub).parent.mkdir(parents=True, exist_ok=True)
        (role / sub).write_text(yaml.safe_dump(doc, sort_keys=False))
    play = tmp_path / "playbooks" / "p.yml"
    play.parent.mkdir()
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "roles": ["sglang"]}]))
    out = tmp_path / "cov"
    env = dict(os.environ, SGLANG_TEST_COVERAGE_DIR=str(out), ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
               ANSIBLE_ROLES_PATH=str(tmp_path / "roles"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = coverage.merge(out.glob("*.json"))
    written = coverage.written_conditions(tmp_path)
    assert coverage.switch_names(tmp_path) == {"sglang_audit", "sglang_mode"}
    assert coverage.switches(written, merged, coverage.switch_names(tmp_path)) == [
        "roles/sglang/tasks/main.yml:1 (Import the writes): when not (sglang_audit | bool) -- only true (1)",
        "roles/sglang/tasks/main.yml:4 (Mode a only): when sglang_mode == 'a' -- only true (1)"]


def test_a_no_log_task_skipped_by_its_condition_counts_it_false_and_leaks_nothing(tmp_path):
    """A no_log task's result reaches callbacks censored, false_condition included: the callback
    reads the condition's text from the uncensored result, and nothing else."""
    merged = _play(tmp_path, {"first": False, "secret": "s3cr3t-value"}, tasks=[
        {"name": "Secret write", "ansible.builtin.debug": {"msg": "{{ secret }}"}, "no_log": True,
         "when": ["first | bool"]},
        {"name": "Secret write that runs", "ansible.builtin.debug": {"msg": "{{ secret }}"}, "no_log": True,
         "when": ["not (first | bool)"]}])
    by_name = {rec["name"]: rec for rec in merged.values()}
    assert by_name["Secret write"]["conditions"] == {"first | bool": {"true": 0, "false": 1}}
    assert by_name["Secret write that runs"]["conditions"] == {"not (first | bool)": {"true": 1, "false": 0}}
    assert "s3cr3t-value" not in "".join(p.read_text() for p in (tmp_path / "cov").glob("*.json"))
