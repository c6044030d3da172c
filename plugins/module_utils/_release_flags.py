# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The option table of an installed SGLang release, read from its source, and its memo.

What _extra_args judges ``sglang_extra_args`` against: the option strings,
their ``dest`` and whether each takes a value, read from the release's own files
with ``ast`` (no import: there is no torch on most hosts that run this):

* up to 0.5.13.post1, every ``parser.add_argument`` in ``ServerArgs.add_cli_args``
  of ``sglang/srt/server_args.py``;
* from 0.5.14, ``add_cli_args_from_dataclass(parser, ServerArgs)`` also registers
  every field annotated ``A[T, "help"]`` or ``A[T, Arg(...)]`` (``cli_name``,
  ``aliases``, ``no_cli``, ``action``), on ``ServerArgs`` itself (0.5.14 - 0.5.18)
  or on the namespace classes listed in ``_INPUT_NAMESPACES`` and imported from
  ``sglang/srt/arg_groups/fields/`` (0.5.20 and later);
* ``allow_abbrev`` from the ``argparse.ArgumentParser(...)`` call in
  ``prepare_server_args`` (absent means True).

The table is memoized on this reader's source and every byte it reads (the flags
memo: parsing ~10k lines costs far more than hashing them).

Stdlib only, Python 3.9 compatible: modules import it on the host as
``ansible_collections.fleetops.sglang.plugins.module_utils._release_flags``.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write, module_source

SERVER_ARGS_FILE = "sglang/srt/server_args.py"
FIELDS_PACKAGE = "sglang.srt.arg_groups.fields"
FIELDS_DIR = "sglang/srt/arg_groups/fields"
TABLE_VERSION = 1


def _const_str(node: ast.AST) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> Optional[ast.AST]:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def _dotted(node: ast.AST) -> str:
    """``argparse.BooleanOptionalAction`` -> that text; '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ""


def _takes_value(action: str, nargs: Optional[ast.AST]) -> Optional[bool]:
    """Whether the option consumes a following argument: False, True, or None (unknown)."""
    if action in ("store_true", "store_false", "store_const", "count", "help", "version",
                  "append_const") or action.endswith("BooleanOptionalAction"):
        return False
    if nargs is not None:
        if isinstance(nargs, ast.Constant) and nargs.value == 0:
            return False
        return True
    if action in ("", "store", "append", "extend"):
        return True
    # Custom actions (SGLang's Deprecated*Action default to nargs=0 or take one value).
    return None


def _option_names(names: List[str], action: str) -> List[str]:
    """Option strings argparse registers: BooleanOptionalAction adds ``--no-X``."""
    out = list(names)
    if action.endswith("BooleanOptionalAction"):
        out += ["--no-" + n[2:] for n in names if n.startswith("--")]
    return out


def _default_dest(names: List[str]) -> str:
    """argparse's dest: the first long option, else the first short one."""
    longs = [n for n in names if n.startswith("--")]
    name = (longs or names)[0].lstrip("-")
    return name.replace("-", "_")


def _add(table: Dict[str, Dict[str, Any]], names: List[str], dest: str, takes_value: Optional[bool],
         source: str) -> None:
    for name in names:
        table[name] = {"dest": dest, "value": takes_value, "source": source}


def _find_class(tree: ast.Module, name: str) -> Optional[ast.ClassDef]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _find_function(body: Sequence[ast.stmt], name: str) -> Optional[ast.FunctionDef]:
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _add_argument_calls(node: ast.AST, table: Dict[str, Dict[str, Any]], source: str) -> int:
    """Every ``<x>.add_argument("--a", "--b", dest=..., action=..., nargs=...)`` under node."""
    count = 0
    for call in ast.walk(node):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [_const_str(a) for a in call.args]
        if not names or any(n is None for n in names):
            raise ValueError("%s:%d: add_argument with names that are not string literals"
                             % (source, call.lineno))
        if not all(n.startswith("-") for n in names):
            continue  # a positional: SGLang's server has none
        action_node = _keyword(call, "action")
        action = _dotted(action_node) if action_node is not None else ""
        dest_node = _keyword(call, "dest")
        dest = _const_str(dest_node) if dest_node is not None else _default_dest(names)
        if dest is None:
            raise ValueError("%s:%d: add_argument with a dest that is not a literal" % (source, call.lineno))
        _add(table, _option_names(names, action), dest, _takes_value(action, _keyword(call, "nargs")),
             "%s:%d" % (source, call.lineno))
        count += 1
    return count


def _annotated_fields(cls: ast.ClassDef, table: Dict[str, Dict[str, Any]], source: str) -> int:
    """Fields ``name: A[T, "help" | Arg(...)]`` as add_cli_args_from_dataclass registers them.

    Its ``_unwrap_annotated`` takes the first ``Arg`` or string in the metadata; a
    field with neither (or ``Arg(no_cli=True)``) gets no option.
    """
    count = 0
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(stmt.annotation, ast.Subscript)
                and _dotted(stmt.annotation.value) in ("A", "Annotated", "typing.Annotated")):
            continue
        meta = stmt.annotation.slice
        elts = meta.elts if isinstance(meta, ast.Tuple) else [meta]
        arg = None  # type: Optional[ast.Call]
        is_cli = False
        for elt in elts[1:]:
            if isinstance(elt, ast.Call) and _dotted(elt.func) in ("Arg", "arg_utils.Arg"):
                arg, is_cli = elt, True
                break
            if isinstance(elt, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not (
                    isinstance(elt, ast.Constant) and not isinstance(elt.value, str)):
                is_cli = True
                break
        if not is_cli:
            continue
        field = stmt.target.id
        cli_name = "--" + field.replace("_", "-")
        aliases = []  # type: List[str]
        action, nargs = "", None
        if arg is not None:
            no_cli = _keyword(arg, "no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                continue
            given = _keyword(arg, "cli_name")
            if given is not None:
                cli_name = _const_str(given) or cli_name
            alias_node = _keyword(arg, "aliases")
            if isinstance(alias_node, (ast.List, ast.Tuple)):
                aliases = [a for a in (_const_str(e) for e in alias_node.elts) if a]
            action_node = _keyword(arg, "action")
            action = _dotted(action_node) if action_node is not None else ""
            nargs = _keyword(arg, "nargs")
        inner = elts[0]
        is_bool = isinstance(inner, ast.Name) and inner.id == "bool"
        if not action and is_bool:
            action = "store_true"
        _add(table, _option_names([cli_name] + aliases, action), field,
             _takes_value(action, nargs), "%s:%d" % (source, stmt.lineno))
        count += 1
    return count


def _allow_abbrev(tree: ast.Module) -> bool:
    """``allow_abbrev`` of the parser ``prepare_server_args`` builds (argparse's default: True)."""
    func = _find_function(tree.body, "prepare_server_args")
    for node in ast.walk(func) if func is not None else ():
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("ArgumentParser"):
            value = _keyword(node, "allow_abbrev")
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                return value.value
            return True
    return True


def _namespace_sources(tree: ast.Module) -> List[Tuple[str, str]]:
    """(module file relative to site-packages, class) for each ``_INPUT_NAMESPACES`` entry."""
    names = []  # type: List[str]
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES"
                                                 for t in node.targets)
                and isinstance(node.value, (ast.List, ast.Tuple))):
            names = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
    imported = {}  # type: Dict[str, str]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(FIELDS_PACKAGE + "."):
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
    out = []
    for name in names:
        module = imported.get(name)
        if module is None:
            raise ValueError("%s: _INPUT_NAMESPACES lists %s, which is not imported from %s"
                             % (SERVER_ARGS_FILE, name, FIELDS_PACKAGE))
        out.append((module.replace(".", "/") + ".py", name))
    return out


def table_inputs(site: str) -> List[str]:
    """The files a table of ``site`` reads (for its memo key), in order."""
    paths = [os.path.join(site, SERVER_ARGS_FILE)]
    paths += sorted(glob.glob(os.path.join(site, FIELDS_DIR, "*.py")))
    return paths


def read_flag_table(site: str) -> Dict[str, Any]:
    """The option table of the release installed in ``site`` (the dir holding ``sglang/``).

    Returns ``{"options": {option: {dest, value, source}}, "allow_abbrev": bool,
    "sources": [...]}``; ``value`` is whether the option takes an argument (None:
    a custom action, unknown). Raises ValueError when the code has a shape this
    reader does not know, rather than guess a table that would pass anything.
    """
    path = os.path.join(site, SERVER_ARGS_FILE)
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), filename=path)
    cls = _find_class(tree, "ServerArgs")
    if cls is None:
        raise ValueError("%s has no class ServerArgs" % path)
    add_cli_args = _find_function(cls.body, "add_cli_args")
    if add_cli_args is None:
        raise ValueError("%s: ServerArgs has no add_cli_args" % path)
    options = {}  # type: Dict[str, Dict[str, Any]]
    sources = []  # type: List[str]
    from_dataclass = any(isinstance(n, ast.Call) and _dotted(n.func).endswith("add_cli_args_from_dataclass")
                         for n in ast.walk(add_cli_args))
    if from_dataclass:
        # Registered first by add_cli_args_from_dataclass, then the manual ones.
        _annotated_fields(cls, options, SERVER_ARGS_FILE)
        sources.append(SERVER_ARGS_FILE + ":ServerArgs")
        for rel, name in _namespace_sources(tree):
            with open(os.path.join(site, rel), "rb") as handle:
                sub = ast.parse(handle.read(), filename=rel)
            ns_cls = _find_class(sub, name)
            if ns_cls is None:
                raise ValueError("%s has no class %s" % (rel, name))
            _annotated_fields(ns_cls, options, rel)
            sources.append("%s:%s" % (rel, name))
    manual = _add_argument_calls(add_cli_args, options, SERVER_ARGS_FILE)
    sources.append("%s:ServerArgs.add_cli_args (%d add_argument calls)" % (SERVER_ARGS_FILE, manual))
    options.setdefault("-h", {"dest": "help", "value": False, "source": "argparse"})
    options.setdefault("--help", {"dest": "help", "value": False, "source": "argparse"})
    if "--model-path" not in options:
        raise ValueError("%s: no --model-path found; this release's flags are laid out in a way "
                         "the reader does not know" % path)
    return {"version": TABLE_VERSION, "options": options, "allow_abbrev": _allow_abbrev(tree),
            "sources": sources}


def table_key(site: str) -> Optional[str]:
    """sha256 over this reader and every byte it would read; None when not pinned down."""
    source = module_source(globals())
    if source is None:
        return None
    h = hashlib.sha256(repr((TABLE_VERSION, sys.version, os.path.abspath(site))).encode("utf-8"))
    h.update(hashlib.sha256(source).hexdigest().encode("ascii"))
    for path in table_inputs(site):
        try:
            with open(path, "rb") as handle:
                digest = hashlib.sha256(handle.read()).hexdigest()
        except FileNotFoundError:
            digest = "missing"
        except OSError:
            return None
        h.update(("%s=%s\n" % (path, digest)).encode("utf-8"))
    return h.hexdigest()


def read_flag_table_memoized(site: str, memo_file: Optional[str]) -> Tuple[Dict[str, Any], str, Optional[str]]:
    """``read_flag_table`` answered from ``memo_file`` while every byte it reads is unchanged.

    Returns (table, "hit" | "miss" | "off", key to store a miss under). Hashing the
    files costs far less than parsing ~10k lines; a memo that cannot be read only
    costs the parse.
    """
    key = table_key(site) if memo_file else None
    if key is None:
        return read_flag_table(site), "off", None
    try:
        with open(memo_file, encoding="utf-8") as handle:
            memo = json.load(handle)
        if isinstance(memo, dict) and memo.get("key") == key and isinstance(memo.get("table"), dict):
            return memo["table"], "hit", None
    except (OSError, ValueError):
        pass
    table = read_flag_table(site)
    # A file that changed while it was read leaves nothing to store.
    return table, "miss", key if table_key(site) == key else None


def store_table_memo(memo_file: str, key: Optional[str], table: Dict[str, Any]) -> bool:
    """Store a missed table; False when there is nothing to store or it cannot be written."""
    if not key:
        return False
    try:
        atomic_write(memo_file, json.dumps({"key": key, "table": table}), mode=None, dir_mode=0o755)
        return True
    except OSError:
        return False
