# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Patch hunks: parse them, apply, reverse, and classify a file against them.

* A hunk is anchored on a function (``Class.method``): the old text must occur
  exactly once inside that function. From 0.5.11 the body-A line also occurs in
  ``set_dflash_layers_to_capture``; a file-wide search would be ambiguous.
* A file is "ours" only if reversing the hunks gives back the exact bytes RECORD
  vouches for, and re-applying them gives the current bytes. Markers alone prove
  nothing.

Standard library only (hosts run python3 3.9 to 3.13).
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import Installation
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import read_bytes_text, sha256_hex


@dataclass(frozen=True)
class Hunk:
    """One replacement anchored on a function; the format is in _patches.py."""

    file: str
    function: str
    old: str
    new: str
    optional: bool = False  # skip when the anchor function does not exist at all


def parse_patch(text: str) -> List[Hunk]:
    """Parse a rendered patch template (format described in the templates).

    Directive lines start with ``@@ ``; text outside hunks is ignored so template
    comments and Jinja whitespace handling cannot change the result.
    """
    hunks: List[Hunk] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "@@ hunk":
            i += 1
            continue
        i += 1
        meta: Dict[str, str] = {}
        while i < len(lines) and lines[i].strip() != "@@ old":
            if lines[i].strip():
                key, sep, val = lines[i].partition(":")
                if not sep:
                    raise ValueError("bad hunk header line %r" % lines[i])
                meta[key.strip()] = val.strip()
            i += 1
        body: Dict[str, List[str]] = {"old": [], "new": []}
        section = "old"
        i += 1
        while i < len(lines) and lines[i].strip() != "@@ end":
            if lines[i].strip() == "@@ new":
                section = "new"
            else:
                body[section].append(lines[i] + "\n")
            i += 1
        if i >= len(lines):
            raise ValueError("hunk for %s not closed by '@@ end'" % meta.get("function"))
        if "file" not in meta or "function" not in meta or not body["old"]:
            raise ValueError("hunk needs file, function and old text: %r" % meta)
        hunks.append(Hunk(
            file=meta["file"], function=meta["function"],
            old="".join(body["old"]), new="".join(body["new"]),
            optional=meta.get("optional", "false").lower() == "true",
        ))
        i += 1
    if not hunks:
        raise ValueError("patch text holds no hunks")
    return hunks


@functools.lru_cache(maxsize=8)
def parse_tree(source: str) -> ast.Module:
    """ast.parse, cached for the few texts one call looks at (about 3.5 MB a tree):
    function spans and the no-argument call scan read the same files, six texts at
    most. Callers must not modify the tree."""
    return ast.parse(source)


@functools.lru_cache(maxsize=16)
def function_spans(source: str) -> Dict[str, Tuple[int, int]]:
    """Character span of every top-level function and class method, by qualname.

    A qualname defined twice (conditional definitions) is dropped: anchoring on it
    would be ambiguous, so hunks on it fail as drift. Cached: every hunk and check
    asks about the same few texts, and parsing a 3,000-line file is the slow part.
    The returned dict must not be modified.
    """
    tree = parse_tree(source)
    starts = [0]
    for line in source.splitlines(True):
        starts.append(starts[-1] + len(line))
    spans: Dict[str, Tuple[int, int]] = {}
    dupes = set()

    def add(name: str, node: ast.AST) -> None:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = (starts[first - 1], starts[node.end_lineno])  # type: ignore[attr-defined]
        if name in spans:
            dupes.add(name)
        spans[name] = span

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node.name, node)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add("%s.%s" % (node.name, sub.name), sub)
    for name in dupes:
        del spans[name]
    return spans


def _occurrences(text: str, needle: str) -> List[int]:
    """Positions where ``needle`` starts a line (after indentation if it has none).

    An old text that carries its indentation must start at column 0, so a line at
    indent 12 never matches inside the same line at indent 16 (body B). An old text
    without indentation may follow any indentation (the CUDA-graph calls sit at
    different depths across releases).
    """
    found = []
    pos = text.find(needle)
    while pos != -1:
        line_start = text.rfind("\n", 0, pos) + 1
        prefix = text[line_start:pos]
        if (needle[:1] in " \t" and prefix == "") or (needle[:1] not in " \t" and prefix.strip() == ""):
            found.append(pos)
        pos = text.find(needle, pos + 1)
    return found


def segment(source: str, name: str) -> Optional[str]:
    """The text of function ``name`` (a qualname), None when it is not defined exactly once."""
    spans = function_spans(source)
    if name not in spans:
        return None
    start, end = spans[name]
    return source[start:end]


def hunk_state(source: str, hunk: Hunk) -> str:
    """'applied', 'clean', 'skip' (optional, anchor absent) or 'drift: <why>'."""
    spans = function_spans(source)
    if hunk.function not in spans:
        return "skip" if hunk.optional else "drift: function %s not found" % hunk.function
    start, end = spans[hunk.function]
    body = source[start:end]
    n_new = len(_occurrences(body, hunk.new)) if hunk.new else 0
    n_old = len(_occurrences(body, hunk.old))
    if hunk.new and n_new == 1 and n_old == len(_occurrences(hunk.new, hunk.old)):
        return "applied"
    if n_new == 0 and n_old == 1:
        return "clean"
    return "drift: in %s the old text occurs %d times and the new text %d times" % (hunk.function, n_old, n_new)


def _replace_in_function(source: str, function: str, old: str, new: str) -> str:
    start, end = function_spans(source)[function]
    body = source[start:end]
    (pos,) = _occurrences(body, old)
    return source[:start] + body[:pos] + new + body[pos + len(old):] + source[end:]


@dataclass
class ApplyResult:
    state: str  # applied | clean | drift
    text: str  # the file after applying (== input unless state is clean)
    reason: str = ""


def apply_hunks(source: str, hunks: Sequence[Hunk]) -> ApplyResult:
    """Apply every hunk or none: no fuzz, no partial application."""
    states = [hunk_state(source, h) for h in hunks]
    drift = [s for s in states if s.startswith("drift")]
    if drift:
        return ApplyResult("drift", source, "; ".join(s[len("drift: "):] for s in drift))
    real = [s for s in states if s != "skip"]
    if all(s == "applied" for s in real):
        return ApplyResult("applied", source)
    if not all(s == "clean" for s in real):
        return ApplyResult("drift", source, "some hunks are applied and others are not")
    text = source
    for hunk, state in zip(hunks, states):
        if state == "clean":
            text = _replace_in_function(text, hunk.function, hunk.old, hunk.new)
    return ApplyResult("clean", text)


def reverse_hunks(source: str, hunks: Sequence[Hunk]) -> Optional[str]:
    """Undo applied hunks; None unless every non-skipped hunk is applied."""
    text = source
    for hunk in reversed(list(hunks)):
        state = hunk_state(text, hunk)
        if state == "skip":
            continue
        if state != "applied":
            return None
        text = _replace_in_function(text, hunk.function, hunk.new, hunk.old)
    return text


@dataclass
class FileProbe:
    """What a target file is and what its pristine text would be."""

    rel: str
    path: str
    state: str  # pristine | ours | drift | missing
    sha256: str
    record_sha256: Optional[str]
    text: str
    pristine_text: Optional[str]
    reason: str = ""


def probe_file(inst: Installation, rel: str, hunk_sets: Sequence[Sequence[Hunk]]) -> FileProbe:
    """Classify one file as pristine, ours (for one of ``hunk_sets``) or drift."""
    path = inst.path(rel)
    expected = inst.record.get(rel)
    if not os.path.exists(path):
        return FileProbe(rel, path, "missing", "", expected, "", None, "file does not exist")
    data, text = read_bytes_text(path)
    digest = sha256_hex(data)
    if expected is None:
        return FileProbe(rel, path, "drift", digest, None, text, None, "no sha256 for it in RECORD")
    if digest == expected:
        return FileProbe(rel, path, "pristine", digest, expected, text, text)
    for hunks in hunk_sets:
        mine = [h for h in hunks if h.file == rel]
        if not mine:
            continue
        try:
            base = reverse_hunks(text, mine)
        except SyntaxError:
            base = None
        if base is None or sha256_hex(base.encode("utf-8")) != expected:
            continue
        if apply_hunks(base, mine).text == text:
            return FileProbe(rel, path, "ours", digest, expected, text, base)
    return FileProbe(rel, path, "drift", digest, expected, text, None,
                     "sha256 %s matches neither RECORD (%s) nor our patch applied to it" % (digest, expected))
