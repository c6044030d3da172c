#!/usr/bin/env python3
"""Every documented switch, both ways, by behaviour: the registry testbed/switches.yml checked against the specs.

A switch is an option of any entry point of roles/sglang/meta/argument_specs.yml of type bool or with
``choices``, read from the specs themselves, never from the ``when`` texts that happen to name it
(testbed/coverage.py's switch check sees only those, and only proves that a condition was evaluated
both ways). Its values: its default and every other value (a bool's other one, every other choice).

The modules' argument specs (plugins/modules) are left out on purpose: no user of the role sets a
module option. Every bool or choice option of a module is fed by the role's tasks, either from a
role switch (``trust_remote_code`` from ``sglang_trust_remote_code``, ``memo_file`` from
``sglang_audit_memo``, ...), which this registry covers through that switch, or fixed by the task
(``state``, ``mode``, ``merge``); the modules' own options are the unit tests' (tests/unit/plugins).

testbed/switches.yml holds, for every switch and every one of its values, one of:

- ``proven``: a list of tests run on a host (under ``molecule/``: the scenario is the directory's
  name), each ``test: PATH::FUNCTION`` (a pytest function; ``[id]`` of a parametrized one ignored,
  ``PATH::Class::function`` for a method) or ``test: PATH.yml::TASK NAME`` (an assert task of a
  scenario's own playbook), with ``asserts:`` one line of what it checks;
- ``everywhere``: the default value only, run by every scenario that does not set it otherwise;
  refused where the test bed's variables (inventory/demo/group_vars/sglang_demo.yml) set another;
- ``excused``: why it cannot run on a host here, with the tests below a host (``below:``) if any;
- ``missing``: what an assertion on a host would need. ``below:`` may list what unit tests cover.

Any entry may carry ``note:`` (free text: where the value runs without an assertion, say).

The static check of a ``proven`` test (it cannot prove that the assertion is right, only that it
is there and names what it asserts): the file exists and defines the function (read with ast) or
the task; and the test's source names the switch, read as the function's own source together with
the module-level assignments it reads, directly or through each other (the parametrize tables
and the host variables live there), or for a
playbook's task the whole play around it. "Names" means: every string of the entry's ``mentions:``
where given (for a value the test shows by its effect, e.g. ``--disable-cuda-graph`` or
``DevicePolicy``), else the variable's name as a whole word, and for a choice the value too; or
``set_in: FILE``, a YAML file that sets the variable to the value (a scenario's vars, a playbook's
``vars:``) and belongs to the test: under the test's scenario directory, named in that scenario's
molecule.yml, or named in the test's file.

``report`` prints one row per switch and value, and with ``--strict`` exits 1 on a missing value or a
broken entry (a switch of the specs not in the registry, an entry for something no spec declares, a
value that is not the switch's, a test that is not there or does not name the switch).
"""
from __future__ import annotations

import argparse
import ast
import functools
import json
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

REPO = Path(__file__).resolve().parents[1]
SPECS = Path("roles/sglang/meta/argument_specs.yml")
REGISTRY = Path("testbed/switches.yml")
DEMO_VARS = Path("inventory/demo/group_vars/sglang_demo.yml")
KINDS = ("proven", "everywhere", "excused", "missing")
ENTRY_KEYS = set(KINDS) | {"below", "note"}
REF_KEYS = {"test", "asserts", "mentions", "set_in"}


@dataclass
class Switch:
    """One switch of the specs: its values, the default first."""

    name: str
    default: Any
    values: List[Any]
    entry_points: List[str] = field(default_factory=list)

    @property
    def others(self) -> List[Any]:
        return [v for v in self.values if key(v) != key(self.default)]


@dataclass
class Row:
    """The verdict on one value of one switch."""

    switch: str
    value: Any
    default: bool
    status: str  # proven, everywhere, excused, MISSING, BROKEN
    where: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    text: str = ""  # the reason of everywhere, excused or missing
    note: str = ""


def key(value: Any) -> str:
    """A value as the registry's keys and the table spell it: YAML reads `true:` as a bool."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_switches(repo: Path = REPO) -> Dict[str, Switch]:
    """Every option of every entry point of type bool or with choices (an alias shared by two entry
    points is one switch)."""
    doc = yaml.safe_load((repo / SPECS).read_text()) or {}
    out: Dict[str, Switch] = {}
    for entry, spec in (doc.get("argument_specs") or {}).items():
        for name, opt in ((spec or {}).get("options") or {}).items():
            if not isinstance(opt, dict) or not (opt.get("type") == "bool" or opt.get("choices")):
                continue
            if name in out:
                out[name].entry_points.append(entry)
                continue
            default = opt.get("default")
            if opt.get("choices"):
                values = list(opt["choices"])
            else:
                values = [True, False]
            # The default first; a bool without one reads as false where the role tests it
            # (`| default(false) | bool`). A choice without one has no default: every value is another.
            if default is None and opt.get("type") == "bool":
                default = False
            values.sort(key=lambda v: key(v) != key(default))
            out[name] = Switch(name, default, values, [entry])
    return out


def _word(text: str, word: str) -> bool:
    return re.search(r"(?<![\w])%s(?![\w])" % re.escape(word), text) is not None


@functools.lru_cache(maxsize=None)
def _parsed(path: str, stamp: Tuple[int, int]) -> Tuple[str, Optional[ast.Module], str]:
    """A verifier's text and tree, once per version of the file (a registry names some files often)."""
    text = Path(path).read_text()
    try:
        return text, ast.parse(text), ""
    except SyntaxError as exc:
        return text, None, str(exc)


def _names(nodes: Sequence[ast.AST]) -> set:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _py_source(path: Path, name: str) -> Tuple[Optional[str], str]:
    """(source of the function with the module-level statements it reads, whole file text), or (None, why).

    The module-level statements are those that bind a name the function or its decorators use, and
    the ones those use in turn: a parametrize table, a dict of host variables."""
    st = path.stat()
    text, tree, error = _parsed(str(path), (st.st_mtime_ns, st.st_size))
    if tree is None:
        return None, "%s does not parse: %s" % (path, error)
    parts = name.split("::")
    scope: List[ast.stmt] = tree.body
    node: Optional[ast.AST] = None
    for i, part in enumerate(parts):
        part = part.split("[", 1)[0]
        found = [n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.name == part]
        if not found:
            return None, "no %s in %s" % ("::".join(parts[:i + 1]), path)
        node = found[0]
        scope = getattr(node, "body", [])
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, "%s in %s is not a function" % (name, path)
    own = "\n".join(ast.get_source_segment(text, d) or "" for d in node.decorator_list)
    own += "\n" + (ast.get_source_segment(text, node) or "")
    bindings = [(n, {t.id for tgt in (n.targets if isinstance(n, ast.Assign) else [n.target])
                     for t in ast.walk(tgt) if isinstance(t, ast.Name)})
                for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    wanted, used = _names([node]), []
    grew = True
    while grew:
        grew = False
        for stmt, bound in bindings:
            if stmt not in used and bound & wanted:
                used.append(stmt)
                wanted |= _names([stmt])
                grew = True
    module = "\n".join(ast.get_source_segment(text, n) or "" for n in tree.body if n in used)
    return own + "\n" + module, text


def _yml_source(path: Path, name: str) -> Tuple[Optional[str], str]:
    """(text of the play holding the task or play named ``name``, whole file text), or (None, why)."""
    text = path.read_text()
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        return None, "%s does not parse: %s" % (path, exc)

    def named(node: yaml.Node) -> bool:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == "name" and isinstance(v, yaml.ScalarNode) \
                        and v.value.strip() == name.strip():
                    return True
            return any(named(v) for _, v in node.value)
        if isinstance(node, yaml.SequenceNode):
            return any(named(v) for v in node.value)
        return False

    lines = text.splitlines()
    plays = root.value if isinstance(root, yaml.SequenceNode) else [root] if root is not None else []
    for play in plays:
        if named(play):
            return "\n".join(lines[play.start_mark.line:play.end_mark.line + 1]), text
    return None, "no task or play named %r in %s" % (name, path)


def _sets(doc: Any, var: str, value: Any) -> bool:
    """Whether a YAML document sets ``var`` to ``value`` anywhere (a vars block, host_vars, a role's)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == var and key(v) == key(value):
                return True
            if _sets(v, var, value):
                return True
    elif isinstance(doc, list):
        return any(_sets(v, var, value) for v in doc)
    return False


def check_ref(repo: Path, ref: Any, switch: Switch, value: Any, on_host: bool) -> Tuple[str, List[str]]:
    """(where, problems) of one test reference."""
    if not isinstance(ref, dict) or not isinstance(ref.get("test"), str) or "::" not in ref["test"]:
        return str(ref), ["a test is written `test: PATH::FUNCTION` (or PATH.yml::TASK NAME): %r" % (ref,)]
    problems = ["unknown key %r" % k for k in sorted(set(ref) - REF_KEYS)]
    rel, _, name = ref["test"].partition("::")
    parts = Path(rel).parts
    scenario = parts[1] if len(parts) > 2 and parts[0] == "molecule" else None
    where = "%s: %s" % (scenario or "unit", name)
    if not str(ref.get("asserts") or "").strip():
        problems.append("%s: say in `asserts:` what it checks" % ref["test"])
    if on_host and scenario is None:
        problems.append("%s is not run on a host (not under molecule/<scenario>/): list it under `below:`"
                        % ref["test"])
    path = repo / rel
    if not path.is_file():
        return where, problems + ["%s: no such file" % rel]
    if path.suffix == ".py":
        source, text = _py_source(path, name)
    elif path.suffix in (".yml", ".yaml"):
        source, text = _yml_source(path, name)
    else:
        return where, problems + ["%s: a test is a .py function or a .yml task" % rel]
    if source is None:
        return where, problems + [text]
    if not on_host:
        return where, problems
    mentions = ref.get("mentions")
    if mentions is not None:
        mentions = [mentions] if isinstance(mentions, str) else list(mentions)
        absent = [m for m in mentions if str(m) not in source]
        traced, why = not absent, "does not mention %s" % ", ".join(repr(m) for m in absent)
    else:
        traced = _word(source, switch.name) and (isinstance(value, bool) or _word(source, str(value)))
        why = "does not name %s%s" % (switch.name, "" if isinstance(value, bool) else " and %r" % value)
    if ref.get("set_in"):
        # Checked wherever given: a wrong one misleads a reader even where the test names the switch.
        ok, why_not = _check_set_in(repo, str(ref["set_in"]), scenario, text, switch.name, value)
        if not ok:
            problems.append("%s: %s" % (ref["test"], why_not))
        elif not traced:
            traced = True
    if not traced:
        problems.append("%s %s" % (ref["test"], why))
    return where, problems


def _check_set_in(repo: Path, rel: str, scenario: Optional[str], test_text: str, var: str,
                  value: Any) -> Tuple[bool, str]:
    path = repo / rel
    if not path.is_file():
        return False, "set_in %s: no such file" % rel
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as exc:
        return False, "set_in %s does not parse: %s" % (rel, exc)
    if not _sets(docs, var, value):
        return False, "set_in %s does not set %s: %s" % (rel, var, key(value))
    scenario_dir = "molecule/%s/" % scenario if scenario else None
    molecule_yml = repo / "molecule" / (scenario or "") / "molecule.yml"
    tied = (scenario_dir is not None and rel.startswith(scenario_dir)) \
        or (molecule_yml.is_file() and path.name in molecule_yml.read_text()) \
        or path.name in test_text
    if not tied:
        return False, "set_in %s is neither the scenario's nor named by the test" % rel
    return True, ""


def _demo_value(repo: Path, var: str) -> Tuple[bool, Any]:
    path = repo / DEMO_VARS
    if not path.is_file():
        return False, None
    demo = yaml.safe_load(path.read_text()) or {}
    return (var in demo), demo.get(var)


def judge_value(repo: Path, switch: Switch, value: Any, entry: Any) -> Row:
    is_default = key(value) == key(switch.default)
    row = Row(switch.name, value, is_default, "BROKEN")
    if not isinstance(entry, dict):
        row.problems.append("%s: %s: no entry for this value" % (switch.name, key(value)))
        return row
    kinds = [k for k in KINDS if k in entry]
    row.problems += ["%s: %s: unknown key %r" % (switch.name, key(value), k) for k in sorted(set(entry) - ENTRY_KEYS)]
    row.note = str(entry.get("note") or "")
    if len(kinds) != 1:
        row.problems.append("%s: %s: give exactly one of %s (found %s)" % (
            switch.name, key(value), ", ".join(KINDS), ", ".join(kinds) or "none"))
        return row
    kind = kinds[0]
    if kind == "proven":
        refs = entry["proven"] if isinstance(entry["proven"], list) else [entry["proven"]]
        if not refs:
            row.problems.append("%s: %s: proven by no test" % (switch.name, key(value)))
        for ref in refs:
            where, problems = check_ref(repo, ref, switch, value, on_host=True)
            row.where.append(where)
            row.problems += problems
        row.status = "proven"
    elif kind == "everywhere":
        row.text = str(entry["everywhere"] or "")
        overridden, demo = _demo_value(repo, switch.name)
        if not is_default:
            row.problems.append("%s: %s: `everywhere` is for the default value only; name the tests that assert it"
                                % (switch.name, key(value)))
        elif overridden and key(demo) != key(value):
            row.problems.append("%s: %s: the test bed sets %s: %s (%s): name where the default runs" % (
                switch.name, key(value), switch.name, key(demo), DEMO_VARS))
        row.status = "everywhere"
    elif kind == "excused":
        row.text = str(entry["excused"] or "")
        row.status = "excused"
    else:
        row.text = str(entry["missing"] or "")
        row.status = "MISSING"
    for ref in entry.get("below") or []:
        where, problems = check_ref(repo, ref, switch, value, on_host=False)
        row.where.append("below: " + where)
        row.problems += problems
    if kind in ("excused", "missing") and not row.text.strip():
        row.problems.append("%s: %s: say why (%s)" % (switch.name, key(value), kind))
    if row.problems:
        row.status = "BROKEN"
    return row


def judge(repo: Path, switches: Dict[str, Switch], registry: Dict[str, Any]) -> List[Row]:
    rows: List[Row] = []
    for name, switch in switches.items():  # in the specs' order
        entries = registry.get(name)
        if not isinstance(entries, dict):
            for value in switch.values:
                rows.append(Row(name, value, key(value) == key(switch.default), "BROKEN",
                                problems=["%s: a switch of the specs (%s) with no entry in %s" % (
                                    name, ", ".join(switch.entry_points), REGISTRY)]))
            continue
        known = {key(v) for v in switch.values}
        by_key = {key(k): v for k, v in entries.items()}
        for value in switch.values:
            rows.append(judge_value(repo, switch, value, by_key.get(key(value))))
        for k in sorted(set(by_key) - known):
            rows.append(Row(name, k, False, "BROKEN", problems=[
                "%s: %s is not a value of the switch (%s)" % (name, k, ", ".join(key(v) for v in switch.values))]))
    for name in sorted(set(registry) - set(switches)):
        rows.append(Row(name, "-", False, "BROKEN", problems=[
            "%s: in %s but no entry point of %s declares it a switch" % (name, REGISTRY, SPECS)]))
    return rows


def load_registry(repo: Path = REPO) -> Dict[str, Any]:
    path = repo / REGISTRY
    if not path.is_file():
        return {}
    return (yaml.safe_load(path.read_text()) or {}).get("switches") or {}


def render(rows: Sequence[Row], switches: Dict[str, Switch], width: int = 160) -> str:
    """The table: one row per switch and value; the "where" column one item a line, wrapped."""
    head = ("switch", "value", "", "status")
    table = []
    last = None
    for r in rows:
        sw = switches.get(r.switch)
        role = "default" if r.default else "other"
        if sw is not None and len(sw.values) == 1:
            role = "default, only choice"
        items = [w for w in r.where if not w.startswith("below: ")] \
            + [" ".join(t.split()) for t in (r.text, r.note) if t] + [w for w in r.where if w.startswith("below: ")]
        table.append((r.switch if r.switch != last else "", key(r.value), role, r.status, items))
        last = r.switch
    widths = [max([len(head[i])] + [len(t[i]) for t in table]) for i in range(4)]
    indent = sum(widths) + 2 * len(widths)
    wrap = max(40, width - indent)
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  where (scenario: test), or why",
             "  ".join("-" * w for w in widths) + "  " + "-" * min(wrap, 30)]
    for t in table:
        where: List[str] = []
        for item in t[4] or [""]:
            where += textwrap.wrap(item, wrap, subsequent_indent="  ", break_long_words=False) or [""]
        lines.append("  ".join(c.ljust(w) for c, w in zip(t[:4], widths)) + "  " + where[0])
        lines += [" " * indent + w for w in where[1:]]
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines.append("")
    lines.append("%d switches, %d values: %s" % (
        len(switches), len(rows), ", ".join("%s %d" % (s, counts[s]) for s in
                                             ("proven", "everywhere", "excused", "MISSING", "BROKEN") if s in counts)))
    problems = [p for r in rows for p in r.problems if r.status == "BROKEN"]
    if problems:
        lines.append("broken entries:")
        lines += ["  - " + p for p in problems]
    return "\n".join(lines)


def report(repo: Path = REPO, strict: bool = False, json_file: Optional[Path] = None) -> int:
    switches = load_switches(repo)
    rows = judge(repo, switches, load_registry(repo))
    print(render(rows, switches))
    if json_file is not None:
        json_file.write_text(json.dumps([{
            "switch": r.switch, "value": r.value if isinstance(r.value, (bool, int, float)) else key(r.value),
            "default": r.default, "status": r.status, "where": r.where, "text": r.text, "note": r.note,
            "problems": r.problems}
            for r in rows], indent=1) + "\n")
    bad = [r for r in rows if r.status in ("MISSING", "BROKEN")]
    if bad and strict:
        print("switches: FAILED: %d values with no assertion on a host or a broken entry (%s)" % (len(bad), REGISTRY))
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="switches", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_report = sub.add_parser("report", help="the table; --strict fails on a missing value or a broken entry")
    p_report.add_argument("--strict", action="store_true", help="exit 1 on a missing value or a broken entry")
    p_report.add_argument("--json", type=Path, help="also write the rows here")
    p_report.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return report(args.repo, args.strict, args.json)


if __name__ == "__main__":
    sys.exit(main())
