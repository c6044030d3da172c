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


def _play(tmp_path: Path, extra_vars: dict, tasks: list = None, args: tuple = (), play_vars: dict = None) -> dict:
    play = tmp_path / "playbooks" / "cov.yml"
    play.parent.mkdir(parents=True, exist_ok=True)
    play.write_text(yaml.safe_dump([{
        "name": "Coverage probe", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": play_vars or {},
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
                           "-e", json.dumps(dict({"ansible_python_interpreter": sys.executable}, **extra_vars)),
                           *args], capture_output=True, text=True, env=env, timeout=300)
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
    # Written before run and checked were told apart: every ok result counts as run.
    assert coverage.run_and_checked(merged["playbooks/p.yml:5"]) == (2, 0)
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


# ----------------------------------------------------------------- executed means executed

# The configure templates' own check_mode (roles/sglang/tasks/configure.yml).
AUDIT_CHECK_MODE = "{{ ansible_check_mode or (sglang_audit | bool) }}"
CHECK_TASKS = [
    {"name": "Write a file", "ansible.builtin.copy": {"content": "x", "dest": "{{ out_file }}", "mode": "0600"}},
    {"name": "Probe, read-only", "ansible.builtin.command": "true", "check_mode": False, "changed_when": False},
    {"name": "Write the unit", "ansible.builtin.copy": {"content": "u", "dest": "{{ out_file }}.unit", "mode": "0600"},
     "check_mode": AUDIT_CHECK_MODE},
    {"name": "Write each", "ansible.builtin.copy": {"content": "{{ item }}", "dest": "{{ out_file }}.{{ item }}",
                                                   "mode": "0600"}, "loop": [1, 2]},
]


def _counts(merged: dict) -> dict:
    """Task name -> (run, checked, checked_by)."""
    return {rec["name"]: coverage.run_and_checked(rec) + (rec.get("checked_by", {}),) for rec in merged.values()}


def test_a_task_run_only_under_check_counts_as_checked_and_check_mode_false_as_run(tmp_path):
    out_file = tmp_path / "written"
    merged = _play(tmp_path, {"out_file": str(out_file), "sglang_audit": False}, tasks=CHECK_TASKS, args=("--check",))
    assert not list(tmp_path.glob("written*")), "check mode wrote nothing"
    counts = _counts(merged)
    assert counts["Write a file"] == (0, 1, {"check_mode": 1})
    # check_mode: false forces a real run under --check.
    assert counts["Probe, read-only"] == (1, 0, {})
    assert counts["Write the unit"] == (0, 1, {"check_mode": 1})
    assert counts["Write each"] == (0, 2, {"check_mode": 2})  # each item, checked


def test_a_converging_run_counts_as_run_and_a_templated_check_mode_as_checked(tmp_path):
    out_file = tmp_path / "written"
    merged = _play(tmp_path, {"out_file": str(out_file), "sglang_audit": False}, tasks=CHECK_TASKS + [
        {"name": "Compare only", "ansible.builtin.copy": {"content": "c", "dest": "{{ out_file }}.c", "mode": "0600"},
         "check_mode": "{{ compare_only | bool }}", "vars": {"compare_only": True}}])
    counts = _counts(merged)
    assert counts["Write a file"] == (1, 0, {}) and out_file.exists()
    assert counts["Probe, read-only"] == (1, 0, {})
    assert counts["Write the unit"] == (1, 0, {})
    assert counts["Write each"] == (2, 0, {})
    # check_mode templated true: the copy only compared, and wrote nothing.
    assert counts["Compare only"] == (0, 1, {"check_mode": 1}) and not (tmp_path / "written.c").exists()


def test_an_audit_run_counts_as_checked(tmp_path):
    """sglang_audit true for the host: from the play's vars (playbooks/audit.yml), from the extra
    variables, or from the task's own; every result of the audit is checked, also a module that runs
    (the audit's probes do)."""
    out_file = tmp_path / "written"
    merged = _play(tmp_path / "play", {"out_file": str(out_file)}, tasks=CHECK_TASKS,
                   play_vars={"sglang_audit": True})
    counts = _counts(merged)
    assert counts["Write a file"] == (0, 1, {"audit": 1})
    assert counts["Probe, read-only"] == (0, 1, {"audit": 1})
    # The configure templates' check_mode: both an audit and check mode.
    assert counts["Write the unit"] == (0, 1, {"audit": 1, "check_mode": 1})
    assert not (tmp_path / "written.unit").exists()
    assert counts["Write each"] == (0, 2, {"audit": 2})

    # Extra variables win over the play's false, as in Ansible; a template is resolved.
    merged = _play(tmp_path / "extra", {"out_file": str(out_file), "sglang_audit": "{{ 'yes' }}"},
                   tasks=CHECK_TASKS[:2], play_vars={"sglang_audit": False})
    assert _counts(merged)["Probe, read-only"] == (0, 1, {"audit": 1})

    # The task's own variable, on one task only.
    merged = _play(tmp_path / "task", {"out_file": str(out_file)}, tasks=[
        dict(CHECK_TASKS[1], vars={"sglang_audit": True}), dict(CHECK_TASKS[1], name="Not audited")])
    counts = _counts(merged)
    assert counts["Probe, read-only"] == (0, 1, {"audit": 1}) and counts["Not audited"] == (1, 0, {})


JUDGED = {"roles/sglang/tasks/x.yml:3": "Write the unit", "roles/sglang/tasks/x.yml:9": "Say what would change",
          "roles/sglang/tasks/x.yml:15": "Plan, checked", "roles/sglang/tasks/x.yml:21": "Only audited"}


def _checked_rec(run=0, check_mode=0, audit=0, both=0):
    rec = _rec(ok=run + check_mode + audit + both)
    rec["checked"] = check_mode + audit + both
    rec["checked_by"] = {k: n for k, n in (("check_mode", check_mode + both), ("audit", audit + both)) if n}
    return rec


def test_the_report_separates_run_and_checked_and_strict_fails_on_checked_only_unclassified(tmp_path, monkeypatch,
                                                                                            capsys):
    merged = {"roles/sglang/tasks/x.yml:3": _checked_rec(run=2, check_mode=1, both=3),
              "roles/sglang/tasks/x.yml:9": _checked_rec(check_mode=2),
              "roles/sglang/tasks/x.yml:15": _checked_rec(check_mode=1),
              "roles/sglang/tasks/x.yml:21": _checked_rec(audit=4)}
    design = {"roles/sglang/tasks/x.yml:15": "check_mode: true: it is only ever checked"}
    verdict = coverage.judge(JUDGED, merged, {}, by_design=design)
    assert verdict["checked_never_run"] == [
        "roles/sglang/tasks/x.yml:9 (Say what would change) -- checked 2x (check_mode 2), never run",
        "roles/sglang/tasks/x.yml:21 (Only audited) -- checked 4x (audit 4), never run"]
    assert verdict["checked_by_design"] == [
        "roles/sglang/tasks/x.yml:15 (Plan, checked) -- checked 1x: check_mode: true: it is only ever checked"]
    assert verdict["never_ran"] == [] and verdict["excused"] == []
    assert verdict["tasks"]["roles/sglang/tasks/x.yml:3"] == {
        "name": "Write the unit", "run": 2, "checked": 4, "checked_by": {"check_mode": 4, "audit": 3}}
    assert verdict["totals"]["results_run"] == 2 and verdict["totals"]["results_checked"] == 11
    text = coverage.render(verdict, len(JUDGED))
    assert text.startswith("task coverage: 1 of 4 role and playbook tasks ran (0 excused, 0 only by failing as"
                           " expected, 0 never ran); 3 only checked (1 by design, 2 checked, never run);"
                           " results: 2 run, 11 checked"), text
    assert "checked, never run (only in check mode or audits" in text

    # Listed in coverage-exceptions.yml with a reason: covered, checked only by design. Listed and run for
    # real, or listed where the definition says it already: stale.
    listed = {"roles/sglang/tasks/x.yml: Say what would change": "the --check diff of a fresh host",
              "roles/sglang/tasks/x.yml: Only audited": "audits only: the read-only twin of a write",
              "roles/sglang/tasks/x.yml: Write the unit": "not so: it runs",
              "roles/sglang/tasks/x.yml: Plan, checked": "said twice"}
    verdict = coverage.judge(JUDGED, merged, listed, by_design=design)
    assert verdict["checked_never_run"] == [] and verdict["excused"] == []
    assert verdict["checked_by_design"][0] == ("roles/sglang/tasks/x.yml:9 (Say what would change) -- checked 2x:"
                                               " the --check diff of a fresh host")
    assert len(verdict["checked_by_design"]) == 3
    assert verdict["stale_exceptions"] == [
        "roles/sglang/tasks/x.yml: Write the unit (it ran)",
        "roles/sglang/tasks/x.yml: Plan, checked (its definition says it exists only for --check or audits:"
        " check_mode: true: it is only ever checked)"]

    # The report: strict by default, advisory with the flag or the environment variable; the JSON has both counts.
    monkeypatch.setattr(coverage, "static_tasks", lambda: JUDGED)
    monkeypatch.setattr(coverage, "written_conditions", lambda: {})
    monkeypatch.setattr(coverage, "switch_names", lambda: set())
    monkeypatch.setattr(coverage, "load_exceptions", lambda: {})
    monkeypatch.setattr(coverage, "load_expected_failures", lambda: {})
    monkeypatch.setattr(coverage, "checked_by_design", lambda: design)
    monkeypatch.delenv(coverage.CHECKED_ADVISORY_ENV, raising=False)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "r.json").write_text(json.dumps({"tasks": merged}))
    assert coverage.main(["report", str(runs), "--json", str(tmp_path / "v.json")]) == 1
    out = capsys.readouterr().out
    assert "(Say what would change) -- checked 2x (check_mode 2), never run" in out
    assert "FAILED: a task seen only in check mode or audits" in out
    written = json.loads((tmp_path / "v.json").read_text())
    assert written["tasks"]["roles/sglang/tasks/x.yml:9"]["run"] == 0
    assert written["tasks"]["roles/sglang/tasks/x.yml:9"]["checked"] == 2
    assert written["totals"]["checked_never_run"] == 2
    assert coverage.main(["report", str(runs), "--checked-advisory"]) == 0
    assert "checked, never run (advisory)" in capsys.readouterr().out
    monkeypatch.setenv(coverage.CHECKED_ADVISORY_ENV, "1")
    assert coverage.main(["report", str(runs)]) == 0
    monkeypatch.delenv(coverage.CHECKED_ADVISORY_ENV)
    monkeypatch.setattr(coverage, "load_exceptions", lambda: listed)
    assert coverage.main(["report", str(runs)]) == 0


def test_tasks_that_exist_only_for_check_or_audits_are_classified_from_their_definitions(tmp_path):
    tasks = tmp_path / "roles" / "sglang" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(yaml.safe_dump([
        {"name": "Say what would be built", "ansible.builtin.debug": {"msg": "x"},
         "when": ["ansible_check_mode", "build | default(false)"]},
        {"name": "Plan the rollback", "ansible.builtin.command": "true", "check_mode": True},
        {"name": "Written only outside check mode", "ansible.builtin.debug": {"msg": "x"},
         "when": ["not ansible_check_mode"]},
        {"name": "Either", "ansible.builtin.debug": {"msg": "x"}, "when": ["ansible_check_mode or force | bool"]},
        {"name": "Under --check, for real", "ansible.builtin.command": "true", "check_mode": False,
         "when": "ansible_check_mode"},
        {"name": "Templated", "ansible.builtin.copy": {"content": "x", "dest": "/x"},
         "check_mode": AUDIT_CHECK_MODE},
        {"name": "Audit only", "when": ["x | bool", "(sglang_audit | default(false) | bool)"], "block": [
            {"name": "Compare in the audit", "ansible.builtin.debug": {"msg": "x"}}]},
        {"name": "Checked block", "check_mode": True, "block": [
            {"name": "Checked in the block", "ansible.builtin.debug": {"msg": "x"}},
            {"name": "Real in the checked block", "ansible.builtin.debug": {"msg": "x"}, "check_mode": False}]},
        {"name": "Import the audit's own", "ansible.builtin.import_tasks": "audit.yml", "when": "sglang_audit | bool"},
        {"name": "Negated inside", "ansible.builtin.debug": {"msg": "x"}, "when": "not (x and ansible_check_mode)"},
    ], sort_keys=False))
    (tasks / "audit.yml").write_text(yaml.safe_dump([{"name": "Only in audits", "ansible.builtin.debug": {}}]))
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "audit.yml").write_text(yaml.safe_dump([
        {"hosts": "all", "vars": {"sglang_audit": True},
         "tasks": [{"name": "Audit task", "ansible.builtin.debug": {}}]},
        {"hosts": "all", "tasks": [{"name": "Assert the fleet", "ansible.builtin.assert": {"that": [True]}}]}],
        sort_keys=False))
    static = coverage.static_tasks(tmp_path)
    design = {static[k]: why for k, why in coverage.checked_by_design(tmp_path).items()}
    assert design == {
        "Say what would be built": "when ansible_check_mode: it runs only under --check",
        "Plan the rollback": "check_mode: true: it is only ever checked",
        "Compare in the audit": "when (sglang_audit | default(false) | bool): it runs only in audits",
        "Checked in the block": "check_mode: true: it is only ever checked",
        "Only in audits": "when sglang_audit | bool: it runs only in audits",
        "Audit task": "a task of an audit play (vars: sglang_audit: true)"}


def test_the_role_tasks_that_exist_only_for_check_or_audits():
    static = coverage.static_tasks()
    design = {"%s: %s" % (k.rsplit(":", 1)[0], static[k]) for k in coverage.checked_by_design()}
    assert design == {"roles/sglang/tasks/rollback.yml: Find what the rollback would put back",
                      "roles/sglang/tasks/remediate.yml: Report that the decision waits for the install"}
    for label in coverage.load_exceptions():
        assert label not in design, "its definition says it exists only for --check or audits: %s" % label
