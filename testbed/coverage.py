#!/usr/bin/env python3
"""Task coverage of a suite run: every role and playbook task, whether any scenario ran it.

molecule/shared/callback_plugins/task_coverage.py writes one JSON file per
ansible-playbook process into SGLANG_TEST_COVERAGE_DIR. This merges them and
compares them with every task the repository defines, read from the YAML itself
(roles/sglang/tasks, roles/sglang/handlers, playbooks/): a task is "file:line" of
its first key, as Ansible names it. Blocks are not tasks (their children are),
and import_tasks, import_role and import_playbook are resolved when a playbook is
parsed, so they never run as tasks of their own.

``report`` prints the tasks no scenario ran and the ``when`` items never seen true
or never seen false, and exits 1 when a task that never ran is not listed, with a
reason, in molecule/shared/coverage-exceptions.yml (keyed "file: task name", which
survives edits that move lines). ansible-core finds a broken condition only when
its branch runs: a branch no test takes is where a rollback crashes at 3 a.m.

Coverage means executed: a task ran when it returned ok or changed at least once.
One seen only failing ran only if the failure was its own (a module's, an assert's)
and the task is either a fail task (failing is what it does) or listed, with the
scenario that fails it and why, in molecule/shared/expected-failures.yml; unlisted,
it is printed with its message as never ran. A failure raised by evaluating a
condition or templating the task (an undefined variable, a broken ``when``) never
counts, listed or not, and cannot be excused.

Executed means executed: the callback counts apart the results that were only "checked"
-- the task's effective check mode was on (``--check``, ``check_mode: true``, the
configure templates' ``check_mode`` templated true in an audit) or the run was an audit
(``sglang_audit`` true) -- from those that ran. A task ran when it returned ok at least
once outside check mode and audits. One seen only checked counts as covered only when it
exists only for ``--check`` or audits: classified from its definition (``check_mode: true``
on it or its block; a ``when`` item, its own or a block's or an import's, that requires
``ansible_check_mode`` or ``sglang_audit``; a play that sets ``sglang_audit: true``) or
listed, with the reason, in molecule/shared/coverage-exceptions.yml. Any other is printed as
"checked, never run" and fails the report; ``--checked-advisory`` (or
SGLANG_COVERAGE_CHECKED_ADVISORY=1) prints it without failing. Records of the older
format (no "checked") count every ok result as run.

Switches: every ``when`` item written in the role (on a task, a block or an
import_tasks) that names a documented switch -- a variable of the role's argument
specs of type bool or with choices, or one whose default is a boolean -- should be
seen both true and false on some host. Those seen one way only (or never) are
printed as advisory; ``--switches-strict`` (or SGLANG_COVERAGE_SWITCHES_STRICT=1)
fails on them.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("roles/sglang/tasks/*.yml", "roles/sglang/handlers/*.yml", "playbooks/*.yml")
EXCEPTIONS = REPO / "molecule" / "shared" / "coverage-exceptions.yml"
EXPECTED_FAILURES = REPO / "molecule" / "shared" / "expected-failures.yml"
CHECKED_ADVISORY_ENV = "SGLANG_COVERAGE_CHECKED_ADVISORY"
ROLE = "roles/sglang"
# A failure of one of these is the task doing its job.
FAIL_ACTIONS = ("fail", "ansible.builtin.fail", "ansible.legacy.fail")
# Failures that never make a task count as run: a condition or a template raised.
BROKEN = ("conditional", "template")
STATIC_ACTIONS = ("import_tasks", "import_role", "import_playbook", "ansible.builtin.import_tasks",
                  "ansible.builtin.import_role", "ansible.builtin.import_playbook")
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")


def _key(node: yaml.MappingNode, name: str) -> Optional[yaml.Node]:
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == name:
            return v
    return None


def _tasks_in(seq: yaml.Node, rel: str, out: List[Tuple[str, str]]) -> None:
    if not isinstance(seq, yaml.SequenceNode):
        return
    for item in seq.value:
        if not isinstance(item, yaml.MappingNode):
            continue
        keys = {k.value for k, _ in item.value if isinstance(k, yaml.ScalarNode)}
        if "block" in keys:
            for sub in ("block", "rescue", "always"):
                child = _key(item, sub)
                if child is not None:
                    _tasks_in(child, rel, out)
            continue
        if keys & set(STATIC_ACTIONS):
            continue
        name_node = _key(item, "name")
        name = name_node.value if isinstance(name_node, yaml.ScalarNode) else ""
        out.append(("%s:%d" % (rel, item.start_mark.line + 1), name))


def static_tasks(repo: Path = REPO) -> Dict[str, str]:
    """Every task the repository defines: "file:line" -> its name."""
    found: List[Tuple[str, str]] = []
    for pattern in SOURCES:
        for path in sorted(glob.glob(str(repo / pattern))):
            rel = str(Path(path).relative_to(repo))
            doc = yaml.compose(Path(path).read_text())
            if doc is None or not isinstance(doc, yaml.SequenceNode):
                continue
            if rel.startswith("playbooks/"):
                for play in doc.value:
                    if isinstance(play, yaml.MappingNode):
                        for section in TASK_LISTS[:4]:
                            child = _key(play, section)
                            if child is not None:
                                _tasks_in(child, rel, found)
            else:
                _tasks_in(doc, rel, found)
    return dict(found)


def _messages(into: Dict[str, List[str]], more: Dict[str, List[str]], keep: int = 3) -> None:
    for kind, msgs in more.items():
        kept = into.setdefault(kind, [])
        for msg in msgs:
            if msg not in kept and len(kept) < keep:
                kept.append(msg)


def merge(files: Iterable[Path]) -> Dict[str, Dict]:
    """The per-process records added up (files of the older format, without "ok", count every run as ok;
    without "checked", every ok result as run)."""
    merged: Dict[str, Dict] = {}
    for path in files:
        try:
            tasks = json.loads(Path(path).read_text()).get("tasks", {})
        except (OSError, ValueError):
            continue
        for key, rec in tasks.items():
            out = merged.setdefault(key, {"name": rec.get("name", ""), "action": "", "ran": 0, "ok": 0, "failed": 0,
                                          "skipped": 0, "checked": 0, "checked_by": {}, "failures": {},
                                          "failure_messages": {}, "conditions": {}})
            out["action"] = out["action"] or rec.get("action", "")
            out["ran"] += rec.get("ran", 0)
            out["ok"] += rec.get("ok", rec.get("ran", 0) - rec.get("failed", 0))
            out["failed"] += rec.get("failed", 0)
            out["skipped"] += rec.get("skipped", 0)
            out["checked"] += rec.get("checked", 0)
            for why, n in (rec.get("checked_by") or {}).items():
                out["checked_by"][why] = out["checked_by"].get(why, 0) + n
            for kind, n in rec.get("failures", {}).items():
                out["failures"][kind] = out["failures"].get(kind, 0) + n
            _messages(out["failure_messages"], rec.get("failure_messages", {}))
            for cond, counts in rec.get("conditions", {}).items():
                c = out["conditions"].setdefault(cond, {"true": 0, "false": 0})
                c["true"] += counts.get("true", 0)
                c["false"] += counts.get("false", 0)
    return merged


def load_exceptions(path: Path = EXCEPTIONS) -> Dict[str, str]:
    """"file: task name" -> why no scenario runs it (never reaches it, or only checks it)."""
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {"%s: %s" % (file, task): reason for file, tasks in data.items() for task, reason in tasks.items()}


def run_and_checked(rec: Dict) -> Tuple[int, int]:
    """(results that ran, results only checked) of one merged record: ok results less the checked ones."""
    ok = rec.get("ok", rec.get("ran", 0) - rec.get("failed", 0))
    checked = min(rec.get("checked", 0), ok)
    return ok - checked, checked


# A when item that only check mode, or only an audit, makes true: the variable alone, through
# ``| bool`` or a ``default``, as one of the items or as a term of an ``and``.
_ONLY_WHEN = {"check_mode": "ansible_check_mode", "audit": "sglang_audit"}


def _requires(item: str, var: str) -> bool:
    text = " ".join(str(item).split())
    if re.search(r"\b(or|not)\b", text):  # a disjunction or a negation: other runs may make it true
        return False
    term = re.compile(r"^\(*\s*%s(\s*\|\s*(bool|default\([^()]*\)))*\s*\)*$" % re.escape(var))
    return any(term.match(part.strip()) for part in re.split(r"\band\b", text))


def _scalar(node: Optional[yaml.Node]) -> Optional[Any]:
    """A node's value as YAML reads it (true, false, a string), None when absent or not a scalar."""
    if not isinstance(node, yaml.ScalarNode):
        return None
    if node.tag.endswith(":bool"):
        return node.value.lower() in ("true", "yes", "on")
    return node.value


def _walk_checked(seq: yaml.Node, rel: str, repo: Path, whens: Tuple[str, ...], check: Optional[Any],
                  play_why: Optional[str], out: Dict[str, str], stack: Tuple[str, ...]) -> None:
    if not isinstance(seq, yaml.SequenceNode):
        return
    for item in seq.value:
        if not isinstance(item, yaml.MappingNode):
            continue
        names = {k.value for k, _ in item.value if isinstance(k, yaml.ScalarNode)}
        own_check = _scalar(_key(item, "check_mode"))
        here_check = own_check if own_check is not None else check
        here_whens = whens + tuple(_when(item))
        if "block" in names:
            for sub in ("block", "rescue", "always"):
                child = _key(item, sub)
                if child is not None:
                    _walk_checked(child, rel, repo, here_whens, here_check, play_why, out, stack)
            continue
        if names & set(STATIC_ACTIONS):
            action = next(iter(names & {"import_tasks", "ansible.builtin.import_tasks"}), None)
            target = _key(item, action) if action else None
            if isinstance(target, yaml.ScalarNode) and "{{" not in target.value:
                path = (repo / rel).parent / target.value
                if path.exists() and str(path) not in stack:
                    doc = yaml.compose(path.read_text())
                    if doc is not None:
                        _walk_checked(doc, str(path.relative_to(repo)), repo, here_whens, here_check, play_why, out,
                                      stack + (str(path),))
            continue
        key = "%s:%d" % (rel, item.start_mark.line + 1)
        if here_check is True:
            out.setdefault(key, "check_mode: true: it is only ever checked")
            continue
        if play_why:
            out.setdefault(key, play_why)
            continue
        for cond in here_whens:
            if here_check is not False and _requires(cond, _ONLY_WHEN["check_mode"]):
                out.setdefault(key, "when %s: it runs only under --check" % " ".join(cond.split()))
                break
            if _requires(cond, _ONLY_WHEN["audit"]):
                out.setdefault(key, "when %s: it runs only in audits" % " ".join(cond.split()))
                break


def checked_by_design(repo: Path = REPO) -> Dict[str, str]:
    """The tasks that exist only for --check or audits, as their definitions say: "file:line" -> why.
    ``check_mode: true`` on the task or a block around it; a ``when`` item (its own, a block's, an
    import's) that requires ``ansible_check_mode`` (unless the task's ``check_mode: false`` runs it for
    real) or ``sglang_audit``; a task of a play whose ``vars`` set ``sglang_audit: true``."""
    out: Dict[str, str] = {}
    for pattern in SOURCES:
        for path in sorted(glob.glob(str(repo / pattern))):
            rel = str(Path(path).relative_to(repo))
            doc = yaml.compose(Path(path).read_text())
            if doc is None or not isinstance(doc, yaml.SequenceNode):
                continue
            if not rel.startswith("playbooks/"):
                _walk_checked(doc, rel, repo, (), None, None, out, (path,))
                continue
            for play in doc.value:
                if not isinstance(play, yaml.MappingNode):
                    continue
                play_vars = _key(play, "vars")
                audit = None
                if isinstance(play_vars, yaml.MappingNode):
                    audit = _scalar(_key(play_vars, _ONLY_WHEN["audit"]))
                why = "a task of an audit play (vars: sglang_audit: true)" if audit is True else None
                for section in TASK_LISTS[:4]:
                    child = _key(play, section)
                    if child is not None:
                        _walk_checked(child, rel, repo, (), _scalar(_key(play, "check_mode")), why, out, (path,))
    return out


def load_expected_failures(path: Path = EXPECTED_FAILURES) -> Dict[str, str]:
    """"file: task name" -> "scenario: why" for the tasks the suite fails on purpose and runs no other way."""
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    out = {}
    for file, tasks in data.items():
        for task, entry in (tasks or {}).items():
            if isinstance(entry, dict):
                entry = "%s: %s" % (entry.get("scenario", "?"), " ".join(str(entry.get("why", "")).split()))
            out["%s: %s" % (file, task)] = str(entry)
    return out


def switch_names(repo: Path = REPO) -> Set[str]:
    """The role's documented switches: options of any entry point of type bool or with choices,
    and variables whose default is a boolean."""
    names: Set[str] = set()
    specs = repo / ROLE / "meta" / "argument_specs.yml"
    if specs.exists():
        for spec in ((yaml.safe_load(specs.read_text()) or {}).get("argument_specs") or {}).values():
            for name, opt in ((spec or {}).get("options") or {}).items():
                if isinstance(opt, dict) and (opt.get("type") == "bool" or opt.get("choices")):
                    names.add(name)
    defaults = repo / ROLE / "defaults" / "main.yml"
    if defaults.exists():
        names |= {k for k, v in (yaml.safe_load(defaults.read_text()) or {}).items() if isinstance(v, bool)}
    return names


def _when(item: yaml.MappingNode) -> List[str]:
    node = _key(item, "when")
    nodes = node.value if isinstance(node, yaml.SequenceNode) else [node] if node is not None else []
    return [n.value for n in nodes if isinstance(n, yaml.ScalarNode) and not n.tag.endswith(":bool")]


def _walk_conditions(seq: yaml.Node, rel: str, repo: Path, written: Dict[str, Dict], stack: Tuple[str, ...]) -> List[str]:
    """The task keys under seq (imports resolved); records each ``when`` written there with the tasks it guards."""
    keys: List[str] = []
    if not isinstance(seq, yaml.SequenceNode):
        return keys
    for item in seq.value:
        if not isinstance(item, yaml.MappingNode):
            continue
        names = {k.value for k, _ in item.value if isinstance(k, yaml.ScalarNode)}
        key = "%s:%d" % (rel, item.start_mark.line + 1)
        if "block" in names:
            here = []
            for sub in ("block", "rescue", "always"):
                child = _key(item, sub)
                if child is not None:
                    here += _walk_conditions(child, rel, repo, written, stack)
        elif names & set(STATIC_ACTIONS):
            here = []
            action = next(iter(names & {"import_tasks", "ansible.builtin.import_tasks"}), None)
            target = _key(item, action) if action else None
            if isinstance(target, yaml.ScalarNode) and "{{" not in target.value:
                path = (repo / rel).parent / target.value
                if path.exists() and str(path) not in stack:
                    here = _file_conditions(path, repo, written, stack + (str(path),))
        else:
            here = [key]
        conds = _when(item)
        if conds:
            name_node = _key(item, "name")
            written[key] = {"name": name_node.value if isinstance(name_node, yaml.ScalarNode) else "",
                            "conditions": conds, "tasks": here}
        keys += here
    return keys


def _file_conditions(path: Path, repo: Path, written: Dict[str, Dict], stack: Tuple[str, ...]) -> List[str]:
    doc = yaml.compose(path.read_text())
    return _walk_conditions(doc, str(path.relative_to(repo)), repo, written, stack) if doc is not None else []


def written_conditions(repo: Path = REPO) -> Dict[str, Dict]:
    """Every ``when`` written in the role: "file:line" of its task, block or import ->
    {"name", "conditions": [items], "tasks": [the task keys it guards]}."""
    written: Dict[str, Dict] = {}
    for pattern in SOURCES:
        if pattern.startswith(ROLE):
            for path in sorted(glob.glob(str(repo / pattern))):
                _file_conditions(Path(path), repo, written, (path,))
    return written


def switches(written: Dict[str, Dict], merged: Dict[str, Dict], names: Iterable[str]) -> List[str]:
    """The ``when`` items naming a switch that no host saw both true and false."""
    names = sorted(set(names))
    if not names:
        return []
    pattern = re.compile(r"(?<![\w.])(%s)(?!\w)" % "|".join(map(re.escape, names)))
    out = []
    for key, rec in sorted(written.items(), key=lambda kv: (kv[0].rsplit(":", 1)[0], int(kv[0].rsplit(":", 1)[1]))):
        for cond in rec["conditions"]:
            if not pattern.search(cond):
                continue
            true = sum(merged.get(k, {}).get("conditions", {}).get(cond, {}).get("true", 0) for k in rec["tasks"])
            false = sum(merged.get(k, {}).get("conditions", {}).get(cond, {}).get("false", 0) for k in rec["tasks"])
            if true and false:
                continue
            seen = ("only true (%d)" % true if true else "only false (%d)" % false if false else "never evaluated")
            out.append("%s (%s): when %s -- %s" % (key, rec["name"], " ".join(cond.split()), seen))
    return out


def _first(rec: Dict, kinds: Iterable[str]) -> str:
    for kind in kinds:
        for msg in rec.get("failure_messages", {}).get(kind, []):
            return msg
    return "(no message)"


def _checked_text(rec: Dict, checked: int) -> str:
    by = rec.get("checked_by") or {}
    how = ", ".join("%s %d" % (why, by[why]) for why in sorted(by) if by[why])
    return "checked %dx%s, never run" % (checked, " (%s)" % how if how else "")


def judge(static: Dict[str, str], merged: Dict[str, Dict], exceptions: Dict[str, str],
          expected: Optional[Dict[str, str]] = None, written: Optional[Dict[str, Dict]] = None,
          switch_vars: Iterable[str] = (), by_design: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The verdict. ``by_design``: "file:line" -> why, the tasks whose definitions say they exist only
    for --check or audits (checked_by_design()). A task seen only checked is covered when its definition
    says so or ``exceptions`` lists it with its reason (the same list as for a task never reached)."""
    expected = expected or {}
    by_design = by_design or {}
    never, excused, as_expected, broken, never_true, never_false = [], [], [], [], [], []
    only_checked, checked_never_run = [], []
    covered = set()
    labels = {}
    per_task: Dict[str, Dict[str, Any]] = {}
    for key, name in sorted(static.items(), key=lambda kv: (kv[0].rsplit(":", 1)[0], int(kv[0].rsplit(":", 1)[1]))):
        rec = merged.get(key) or {}
        label = labels[key] = "%s: %s" % (key.rsplit(":", 1)[0], name)
        failures = rec.get("failures", {})
        run, checked = run_and_checked(rec)
        per_task[key] = {"name": name, "run": run, "checked": checked, "checked_by": dict(rec.get("checked_by") or {})}
        own = failures.get("task", 0)
        bad = sum(failures.get(kind, 0) for kind in BROKEN)
        design = by_design.get(key) or exceptions.get(label)
        if run > 0:
            covered.add(key)
            if bad:
                broken.append("%s (%s) -- %s" % (key, name, _first(rec, BROKEN)))
        elif checked and design:
            only_checked.append("%s (%s) -- checked %dx: %s" % (key, name, checked, " ".join(design.split())))
            if bad:
                broken.append("%s (%s) -- %s" % (key, name, _first(rec, BROKEN)))
        elif own and (rec.get("action") in FAIL_ACTIONS or label in expected):
            covered.add(key)
            why = expected.get(label, "a fail task")
            as_expected.append("%s (%s) -- failed %dx as expected (%s): %s" % (key, name, own, why, _first(rec, ["task"])))
            if bad:
                broken.append("%s (%s) -- %s" % (key, name, _first(rec, BROKEN)))
        elif bad and not checked:
            never.append("%s (%s) -- failed %dx on a broken condition or template, which never counts: %s"
                         % (key, name, bad, _first(rec, BROKEN)))
        elif label in exceptions:
            excused.append("%s (%s) -- %s" % (key, name, exceptions[label]))
        elif checked:
            checked_never_run.append("%s (%s) -- %s" % (key, name, _checked_text(rec, checked)))
            if bad:
                broken.append("%s (%s) -- %s" % (key, name, _first(rec, BROKEN)))
        elif own:
            never.append("%s (%s) -- only failed (%dx), and expected-failures.yml does not list it: %s"
                         % (key, name, own, _first(rec, ["task"])))
        else:
            never.append("%s (%s)" % (key, name))
        for cond, counts in sorted(rec.get("conditions", {}).items()):
            if counts["true"] == 0:
                never_true.append("%s: when %s" % (key, cond))
            if counts["false"] == 0:
                never_false.append("%s: when %s" % (key, cond))
    known = set(labels.values())
    stale = sorted(label for label in exceptions if label not in known)
    ran_anyway = sorted(labels[k] for k in covered if labels[k] in exceptions)
    said = sorted("%s (its definition says it exists only for --check or audits: %s)" % (labels[k], why)
                  for k, why in by_design.items() if labels.get(k) in exceptions)
    stale_expected = []
    for label in sorted(expected):
        keys = [k for k, lab in labels.items() if lab == label]
        if not keys:
            stale_expected.append("expected-failures: %s (no such task)" % label)
        elif any((merged.get(k) or {}).get("ok", 0) > 0 for k in keys):
            stale_expected.append("expected-failures: %s (it ran without failing)" % label)
        elif not any((merged.get(k) or {}).get("failures", {}).get("task", 0) for k in keys):
            stale_expected.append("expected-failures: %s (it never failed)" % label)
    totals = {"tasks": len(static), "run": sum(1 for c in per_task.values() if c["run"] > 0),
              "checked_only": len(only_checked) + len(checked_never_run), "checked_by_design": len(only_checked),
              "checked_never_run": len(checked_never_run),
              "results_run": sum(c["run"] for c in per_task.values()),
              "results_checked": sum(c["checked"] for c in per_task.values())}
    return {"never_ran": never, "excused": excused, "failed_as_expected": as_expected, "broken_failures": broken,
            "checked_by_design": only_checked, "checked_never_run": checked_never_run,
            "never_true": never_true, "never_false": never_false,
            "switches": switches(written or {}, merged, switch_vars),
            "stale_exceptions": stale + ["%s (it ran)" % s for s in ran_anyway] + said + stale_expected,
            "totals": totals, "tasks": per_task}


def render(verdict: Dict[str, Any], total: int, switches_strict: bool = False, checked_advisory: bool = False) -> str:
    by_design = verdict.get("checked_by_design", [])
    unrun = verdict.get("checked_never_run", [])
    ran = total - len(verdict["never_ran"]) - len(verdict["excused"]) - len(by_design) - len(unrun)
    totals = verdict.get("totals") or {}
    lines = ["task coverage: %d of %d role and playbook tasks ran (%d excused, %d only by failing as expected,"
             " %d never ran); %d only checked (%d by design, %d checked, never run); results: %d run, %d checked"
             % (ran, total, len(verdict["excused"]), len(verdict.get("failed_as_expected", [])),
                len(verdict["never_ran"]), len(by_design) + len(unrun), len(by_design), len(unrun),
                totals.get("results_run", 0), totals.get("results_checked", 0))]
    for title, key in (("never ran (not excused)", "never_ran"),
                       ("checked, never run (%s)" % (
                           "advisory" if checked_advisory else
                           "only in check mode or audits: give it a real run, or list it with its reason"),
                        "checked_never_run"),
                       ("excused", "excused"),
                       ("only checked, by design (they exist for --check or audits, as their definitions"
                        " say or coverage-exceptions.yml does)", "checked_by_design"),
                       ("ran only by failing (a fail task, or listed in expected-failures.yml)", "failed_as_expected"),
                       ("also failed on a broken condition or template (advisory: the task ran elsewhere)",
                        "broken_failures"),
                       ("when items never seen true", "never_true"), ("when items never seen false", "never_false"),
                       ("switches not seen both true and false (%s)" % (
                           "strict" if switches_strict else "advisory; --switches-strict fails on them"), "switches"),
                       ("stale exceptions", "stale_exceptions")):
        if verdict.get(key):
            lines.append("%s:" % title)
            lines += ["  - " + item for item in verdict[key]]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="coverage", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_report = sub.add_parser("report")
    p_report.add_argument("directory", type=Path)
    p_report.add_argument("--advisory", action="store_true",
                          help="print only (a subset of the scenarios ran): never fail")
    p_report.add_argument("--switches-strict", action="store_true",
                          default=os.environ.get("SGLANG_COVERAGE_SWITCHES_STRICT", "") not in ("", "0"),
                          help="fail when a when item naming a switch was not seen both true and false"
                               " (also SGLANG_COVERAGE_SWITCHES_STRICT=1)")
    p_report.add_argument("--checked-advisory", action="store_true",
                          default=os.environ.get(CHECKED_ADVISORY_ENV, "") not in ("", "0"),
                          help="print the tasks seen only in check mode or audits, never run, without failing"
                               " (also %s=1)" % CHECKED_ADVISORY_ENV)
    p_report.add_argument("--json", type=Path, help="also write the verdict here")
    args = parser.parse_args(argv)
    static = static_tasks()
    merged = merge(sorted(args.directory.glob("*.json")))
    verdict = judge(static, merged, load_exceptions(), load_expected_failures(), written_conditions(), switch_names(),
                    checked_by_design())
    print(render(verdict, len(static), args.switches_strict, args.checked_advisory))
    if args.json:
        args.json.write_text(json.dumps(verdict, indent=1))
    rc = 0
    if verdict["never_ran"] and not args.advisory:
        print("task coverage: FAILED: a task no scenario runs must get a test or an entry, with its reason,"
              " in %s (one only seen failing on purpose: in %s)"
              % (EXCEPTIONS.relative_to(REPO), EXPECTED_FAILURES.relative_to(REPO)))
        rc = 1
    if verdict["checked_never_run"] and not args.checked_advisory and not args.advisory:
        print("task coverage: FAILED: a task seen only in check mode or audits must get a real run, or an entry,"
              " with its reason, in %s (--checked-advisory or %s=1 makes this advisory)"
              % (EXCEPTIONS.relative_to(REPO), CHECKED_ADVISORY_ENV))
        rc = 1
    if verdict["switches"] and args.switches_strict and not args.advisory:
        print("task coverage: FAILED: a when item naming a switch was not seen both true and false")
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
