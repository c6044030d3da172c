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
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("roles/sglang/tasks/*.yml", "roles/sglang/handlers/*.yml", "playbooks/*.yml")
EXCEPTIONS = REPO / "molecule" / "shared" / "coverage-exceptions.yml"
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


def merge(files: Iterable[Path]) -> Dict[str, Dict]:
    """The per-process records added up."""
    merged: Dict[str, Dict] = {}
    for path in files:
        try:
            tasks = json.loads(Path(path).read_text()).get("tasks", {})
        except (OSError, ValueError):
            continue
        for key, rec in tasks.items():
            out = merged.setdefault(key, {"name": rec.get("name", ""), "ran": 0, "skipped": 0, "conditions": {}})
            out["ran"] += rec.get("ran", 0)
            out["skipped"] += rec.get("skipped", 0)
            for cond, counts in rec.get("conditions", {}).items():
                c = out["conditions"].setdefault(cond, {"true": 0, "false": 0})
                c["true"] += counts.get("true", 0)
                c["false"] += counts.get("false", 0)
    return merged


def load_exceptions(path: Path = EXCEPTIONS) -> Dict[str, str]:
    """"file: task name" -> why no scenario runs it."""
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {"%s: %s" % (file, task): reason for file, tasks in data.items() for task, reason in tasks.items()}


def judge(static: Dict[str, str], merged: Dict[str, Dict], exceptions: Dict[str, str]) -> Dict[str, List[str]]:
    never, excused, never_true, never_false = [], [], [], []
    for key, name in sorted(static.items(), key=lambda kv: (kv[0].rsplit(":", 1)[0], int(kv[0].rsplit(":", 1)[1]))):
        rec = merged.get(key)
        label = "%s: %s" % (key.rsplit(":", 1)[0], name)
        if not rec or rec["ran"] == 0:
            if label in exceptions:
                excused.append("%s (%s) -- %s" % (key, name, exceptions[label]))
            else:
                never.append("%s (%s)" % (key, name))
        for cond, counts in sorted((rec or {}).get("conditions", {}).items()):
            if counts["true"] == 0:
                never_true.append("%s: when %s" % (key, cond))
            if counts["false"] == 0:
                never_false.append("%s: when %s" % (key, cond))
    stale = sorted(label for label in exceptions
                   if label not in {"%s: %s" % (k.rsplit(":", 1)[0], n) for k, n in static.items()})
    ran_anyway = sorted(label for label in exceptions
                        for k, n in static.items()
                        if label == "%s: %s" % (k.rsplit(":", 1)[0], n) and merged.get(k, {}).get("ran", 0) > 0)
    return {"never_ran": never, "excused": excused, "never_true": never_true, "never_false": never_false,
            "stale_exceptions": stale + ["%s (it ran)" % s for s in ran_anyway]}


def render(verdict: Dict[str, List[str]], total: int) -> str:
    ran = total - len(verdict["never_ran"]) - len(verdict["excused"])
    lines = ["task coverage: %d of %d role and playbook tasks ran (%d excused, %d never ran)"
             % (ran, total, len(verdict["excused"]), len(verdict["never_ran"]))]
    for title, key in (("never ran (not excused)", "never_ran"), ("excused", "excused"),
                       ("when items never seen true", "never_true"), ("when items never seen false", "never_false"),
                       ("stale exceptions", "stale_exceptions")):
        if verdict[key]:
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
    p_report.add_argument("--json", type=Path, help="also write the verdict here")
    args = parser.parse_args(argv)
    static = static_tasks()
    merged = merge(sorted(args.directory.glob("*.json")))
    verdict = judge(static, merged, load_exceptions())
    print(render(verdict, len(static)))
    if args.json:
        args.json.write_text(json.dumps(verdict, indent=1))
    if verdict["never_ran"] and not args.advisory:
        print("task coverage: FAILED: a task no scenario runs must get a test or an entry, with its reason,"
              " in %s" % EXCEPTIONS.relative_to(REPO))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
