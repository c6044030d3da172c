"""No unlisted skip: a pytest plugin that fails a run in which a test was skipped, deselected or
xfailed unless one list file names it with its reason (docs/docsite/rst/guide_tests.rst).

Loaded with ``-p sglang_skip_policy`` (this directory on PYTHONPATH; scripts/test sets
``PYTEST_ADDOPTS`` and ``PYTHONPATH`` for the unit tests and for every Molecule verifier), it
does nothing unless a list is named: ``--skip-policy=PATH`` or ``SGLANG_SKIP_POLICY=PATH``. A
developer's run of one file is unaffected unless it opts in.

What it records:

* ``skipped``: a skip mark, ``pytest.skip`` in a test or a fixture, a skipped module;
* ``xfailed`` / ``xpassed``: a test marked xfail, whatever became of it;
* ``deselected``: every item given to the ``pytest_deselected`` hook (``-k``, ``-m``,
  ``--deselect``, a conftest's ``pytest_collection_modifyitems``).

At the end of the session each one the list does not match is printed with its reason and
what to do, and the exit status is made non-zero (1, "tests failed") if it was 0.

The list (YAML, a mapping)::

    root: ..            # node ids' files are taken relative to this directory (itself relative
                        # to the list file; default: the list file's directory)
    allowed:
      - test: "molecule/default/tests/test_ssh_distro.py::*"   # fnmatch: * and ?; [ ] are literal
        outcome: deselected   # optional: skipped, deselected, xfailed or xpassed (default: any)
        when:                 # optional: environment variables, each an fnmatch pattern or a list
          MOLECULE_SCENARIO_NAME: default        # of them; an unset variable reads as ""
          MOLECULE_DISTRO: bookworm
        reason: why this case does not run here   # required

Stdlib, pytest and PyYAML only.
"""

from __future__ import annotations

import fnmatch
import inspect
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

ENV = "SGLANG_SKIP_POLICY"
OUTCOMES = ("skipped", "deselected", "xfailed", "xpassed")
ENTRY_KEYS = {"test", "outcome", "when", "reason"}
THIS_FILE = os.path.normcase(os.path.abspath(__file__))


class PolicyError(Exception):
    """The list file itself is wrong: a usage error, not a verdict."""


def _pattern_matches(value: str, pattern: str) -> bool:
    # fnmatch's [seq] would make "test_x[ansible://host]" a character class: brackets are literal.
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def load(path: Path) -> Tuple[Path, List[Dict[str, Any]]]:
    """(root, entries) of a list file; PolicyError naming the entry when it is malformed."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError("cannot read the skip list %s: %s" % (path, exc))
    if not isinstance(data, dict) or set(data) - {"root", "allowed"}:
        raise PolicyError("%s: expected a mapping with 'root' and 'allowed' only" % path)
    root = (path.parent / str(data.get("root", "."))).resolve()
    entries = data.get("allowed") or []
    if not isinstance(entries, list):
        raise PolicyError("%s: 'allowed' must be a list" % path)
    for n, entry in enumerate(entries, 1):
        where = "%s: allowed entry %d" % (path, n)
        if not isinstance(entry, dict):
            raise PolicyError("%s is not a mapping" % where)
        unknown = set(entry) - ENTRY_KEYS
        if unknown:
            raise PolicyError("%s: unknown keys %s (known: %s)" % (where, sorted(unknown), sorted(ENTRY_KEYS)))
        if not isinstance(entry.get("test"), str) or not entry["test"].strip():
            raise PolicyError("%s: 'test' (a node-id pattern) is required" % where)
        if not isinstance(entry.get("reason"), str) or not entry["reason"].strip():
            raise PolicyError("%s (%s): 'reason' is required" % (where, entry["test"]))
        if entry.get("outcome") is not None and entry["outcome"] not in OUTCOMES:
            raise PolicyError("%s (%s): outcome %r is none of %s" % (where, entry["test"], entry["outcome"],
                                                                     ", ".join(OUTCOMES)))
        when = entry.get("when") or {}
        if not isinstance(when, dict):
            raise PolicyError("%s (%s): 'when' must map environment variables to patterns" % (where, entry["test"]))
        for var, want in when.items():
            wants = want if isinstance(want, list) else [want]
            if not all(isinstance(w, (str, int, float)) and not isinstance(w, bool) for w in wants):
                raise PolicyError("%s (%s): when.%s must be a string or a list of strings" % (where, entry["test"], var))
    return root, entries


def allowed_by(entries: List[Dict[str, Any]], nodeid: str, outcome: str,
               environ: Optional[Dict[str, str]] = None) -> Optional[Dict[str, Any]]:
    """The first entry that lists this node id with this outcome under this environment, or None."""
    environ = os.environ if environ is None else environ
    for entry in entries:
        if entry.get("outcome") not in (None, outcome):
            continue
        if not _pattern_matches(nodeid, entry["test"]):
            continue
        when = entry.get("when") or {}
        if all(any(_pattern_matches(environ.get(var, ""), str(w)) for w in (want if isinstance(want, list) else [want]))
               for var, want in when.items()):
            return entry
    return None


def _who_deselected() -> str:
    """Who called pytest_deselected: the first frame outside pluggy, pytest's hook machinery and this file."""
    for frame in inspect.stack(context=0)[2:]:
        filename = os.path.normcase(os.path.abspath(frame.filename))
        if filename == THIS_FILE or "%spluggy%s" % (os.sep, os.sep) in filename:
            continue
        if "%s_pytest%s" % (os.sep, os.sep) in filename:
            if frame.function == "deselect_by_keyword":
                return "-k"
            if frame.function == "deselect_by_mark":
                return "-m"
            if frame.function in ("pytest_collection_modifyitems", "deselect_by_deselect") and \
                    filename.endswith("main.py"):
                return "--deselect"
            if frame.function.startswith("_hookexec") or frame.function.startswith("_multicall"):
                continue
            return "pytest (%s in %s)" % (frame.function, os.path.basename(frame.filename))
        return "%s:%d (%s)" % (frame.filename, frame.lineno, frame.function)
    return "unknown"


class SkipPolicy:
    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.root, self.entries = load(path)
        # (nodeid relative to root, outcome, reason), in the order they happened.
        self.seen: List[Tuple[str, str, str]] = []
        self.unlisted: List[Tuple[str, str, str]] = []

    def _relative(self, nodeid: str) -> str:
        """The node id with its file taken relative to the list's root (absolute when outside it)."""
        file_part, sep, rest = nodeid.partition("::")
        path = (self.config.rootpath / file_part).resolve()
        try:
            file_part = path.relative_to(self.root).as_posix()
        except ValueError:
            file_part = path.as_posix()
        return file_part + sep + rest

    def record(self, nodeid: str, outcome: str, reason: str) -> None:
        self.seen.append((self._relative(nodeid), outcome, reason))

    @pytest.hookimpl(trylast=True)
    def pytest_deselected(self, items) -> None:
        who = _who_deselected()
        for item in items:
            self.record(item.nodeid, "deselected", "deselected by %s" % who)

    def pytest_collectreport(self, report) -> None:
        if report.skipped:
            self.record(report.nodeid, "skipped", _skip_reason(report))

    def pytest_runtest_logreport(self, report) -> None:
        if hasattr(report, "wasxfail"):
            if report.skipped:
                self.record(report.nodeid, "xfailed", "xfail: %s" % (report.wasxfail or "(no reason)"))
            elif report.passed and report.when == "call":
                self.record(report.nodeid, "xpassed", "xfail that passed: %s" % (report.wasxfail or "(no reason)"))
        elif report.skipped:
            self.record(report.nodeid, "skipped", _skip_reason(report))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session) -> None:
        seen = set()
        for nodeid, outcome, reason in self.seen:
            if (nodeid, outcome) in seen:
                continue
            seen.add((nodeid, outcome))
            if allowed_by(self.entries, nodeid, outcome) is None:
                self.unlisted.append((nodeid, outcome, reason))
        if self.unlisted and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        if not self.unlisted:
            if self.seen:
                tr.write_line("skip policy: %d skipped or deselected, each listed in %s" % (len(self.seen), self.path))
            return
        tr.write_sep("=", "skip policy: %d unlisted skip(s) or deselection(s)" % len(self.unlisted), red=True,
                     bold=True)
        for nodeid, outcome, reason in self.unlisted:
            tr.write_line("%s %s" % (outcome.upper(), nodeid), red=True)
            tr.write_line("    %s" % reason)
        tr.write_line("")
        tr.write_line("A CI run fails on a test that does not run. Either fix it (make it run here, or make it fail")
        tr.write_line("with what to install or fetch), or, when not running here is deliberate, list it in")
        tr.write_line("%s with the reason, e.g.:" % self.path)
        nodeid, outcome, _ = self.unlisted[0]
        tr.write_line('  - test: "%s"' % nodeid)
        tr.write_line("    outcome: %s" % outcome)
        tr.write_line('    reason: "why it does not run here"')


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, lineno, message = longrepr
        return "%s (%s:%s)" % (message, path, lineno)
    return str(longrepr)


def pytest_addoption(parser) -> None:
    parser.addoption("--skip-policy", metavar="PATH", default=None,
                     help="fail the run on any skip, xfail or deselection the list at PATH does not name "
                          "(default: $%s; unset: off)" % ENV)


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    path = config.getoption("--skip-policy") or os.environ.get(ENV, "")
    if not path:
        return
    try:
        policy = SkipPolicy(config, Path(path).resolve())
    except PolicyError as exc:
        raise pytest.UsageError(str(exc))
    config.pluginmanager.register(policy, "sglang-skip-policy")
