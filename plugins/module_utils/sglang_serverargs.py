# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launch flags an installed SGLang release accepts, read from its source.

``sglang_extra_args`` is appended verbatim after the flags the role renders, and
SGLang parses the whole line with argparse. Three things then go wrong silently
or late, and none of them can be seen without knowing the release's own flags:

* an unknown flag makes argparse exit 2, which the service only shows as a
  crash loop after the restart;
* the last occurrence of an option wins, and with ``allow_abbrev`` (Python's
  default, and what SGLang uses) an unambiguous prefix *is* that option, so
  ``--speculative-num-st 2`` silently turns the validated 15/1/16 into 2/1/3;
* some flags route DeepSeek's decoder layers through code that captures no aux
  hidden states for the EAGLE-3 draft (see ``CAPTURE_BREAKING``).

So the option strings and their ``dest`` are read here from the release's own
files, with ``ast`` (no import: there is no torch on most hosts that run this):

* up to 0.5.13.post1, every ``parser.add_argument`` in ``ServerArgs.add_cli_args``
  of ``sglang/srt/server_args.py``;
* from 0.5.14, ``add_cli_args_from_dataclass(parser, ServerArgs)`` also registers
  every field annotated ``A[T, "help"]`` or ``A[T, Arg(...)]`` (``cli_name``,
  ``aliases``, ``no_cli``, ``action``), on ``ServerArgs`` itself (0.5.14 - 0.5.18)
  or on the namespace classes listed in ``_INPUT_NAMESPACES`` and imported from
  ``sglang/srt/arg_groups/fields/`` (0.5.20 and later);
* ``allow_abbrev`` from the ``argparse.ArgumentParser(...)`` call in
  ``prepare_server_args`` (absent means True).

Stdlib only, Python 3.9 compatible: modules import it on the host as
``ansible_collections.fleetops.sglang.plugins.module_utils.sglang_serverargs``
and pytest imports it directly.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils.sglang_distribution import package_dirs
from ansible_collections.fleetops.sglang.plugins.module_utils.sglang_fileio import atomic_write, module_source

SERVER_ARGS_FILE = "sglang/srt/server_args.py"
FIELDS_PACKAGE = "sglang.srt.arg_groups.fields"
FIELDS_DIR = "sglang/srt/arg_groups/fields"

# What every flag the role renders stands for, and the variable that sets it.
# The dests are looked up in the release's table: a managed *dest* is what
# matters, since aliases (--tensor-parallel-size) and prefixes reach it too.
MANAGED_FLAGS = (
    ("--model-path", "sglang_model_path"),
    ("--speculative-algorithm", "sglang_speculative_algorithm"),
    ("--speculative-draft-model-path", "sglang_draft_model_path"),
    ("--speculative-num-steps", "sglang_speculative_num_steps"),
    ("--speculative-eagle-topk", "sglang_speculative_eagle_topk"),
    ("--speculative-num-draft-tokens", "sglang_speculative_num_draft_tokens"),
    ("--tp-size", "sglang_tp_size"),
    ("--pp-size", "sglang_pp_size"),
    ("--host", "sglang_host"),
    ("--port", "sglang_port"),
    ("--mem-fraction-static", "sglang_mem_fraction_static"),
    ("--disable-cuda-graph", "sglang_disable_cuda_graph"),
    ("--enable-metrics", "sglang_enable_metrics"),
)

# Flags (by dest) that silently drop or break the aux hidden-state capture the
# draft was trained on, or swap the code the role patched. Evidence per release
# is in the README ("Flags refused in sglang_extra_args").
CAPTURE_BREAKING = {
    "enable_two_batch_overlap": (
        "with two-batch overlap DeepseekV2Model.forward runs every layer from "
        "first_k_dense_replace on through model_forward_maybe_tbo, which captures no aux "
        "hidden states: the draft would get fewer features than it was trained on"
    ),
    "model_impl": (
        "it swaps SGLang's DeepseekV2 implementation (the file the role patches and whose "
        "capture it verified) for another model class"
    ),
    "enable_return_aux_hidden_states": (
        "it turns the speculative algorithm off (reset to None) and only captures aux "
        "hidden states for responses: no draft would run"
    ),
    "return_aux_hidden_state_layer_ids": (
        "it sets which target layers are captured, overriding the draft config's "
        "eagle_aux_hidden_state_layer_ids that the role writes and verifies"
    ),
}
# A config file merges arbitrary flags into argv where the role cannot see them.
OPAQUE_DESTS = {
    "config": (
        "a config file can set any flag, the managed ones included, where the role "
        "cannot check them; give the flags in sglang_extra_args instead"
    ),
}
# --json-model-override-args rewrites the target's config.json in memory; these
# keys change which model class runs or which layer a capture id means.
OVERRIDE_DEST = "json_model_override_args"
OVERRIDE_KEYS_BREAKING = ("architectures", "model_type", "num_hidden_layers", "first_k_dense_replace",
                          "text_config", "eagle_config")

# argparse's test for "looks like a negative number" (then it is a value).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
TABLE_VERSION = 1


# --------------------------------------------------------------------------- #
# Reading the release
# --------------------------------------------------------------------------- #


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


def site_packages(venv: str) -> Optional[str]:
    """The venv's site-packages holding ``sglang/``, or None without one install."""
    hits = package_dirs(venv)
    return os.path.dirname(hits[0]) if len(hits) == 1 else None


# --------------------------------------------------------------------------- #
# Judging sglang_extra_args
# --------------------------------------------------------------------------- #


def resolve(table: Dict[str, Any], arg: str) -> Tuple[str, List[str]]:
    """What argparse makes of one argv item, as (kind, options).

    kind: ``value`` (not an option), ``exact``, ``prefix`` (one option; an
    abbreviation), ``ambiguous`` (several dests: argparse exits 2), ``unknown``.
    Mirrors ``ArgumentParser._parse_optional`` / ``_get_option_tuples``.
    """
    options = table["options"]
    if not arg or arg[0] != "-" or arg == "-" or _NEGATIVE_NUMBER.match(arg):
        return "value", []
    if arg == "--":
        return "unknown", []
    if arg in options:
        return "exact", [arg]
    name = arg.split("=", 1)[0] if "=" in arg else arg
    if "=" in arg and name in options:
        return "exact", [name]
    if arg.startswith("--") and table.get("allow_abbrev", True):
        hits = sorted(o for o in options if o.startswith(name))
        dests = {options[o]["dest"] for o in hits}
        if len(dests) == 1:
            return "prefix", hits
        if len(dests) > 1:
            return "ambiguous", hits
    elif not arg.startswith("--"):
        # -xVALUE: a short option with its value attached.
        if arg[:2] in options:
            return "exact", [arg[:2]]
    return "unknown", []


def managed_dests(table: Dict[str, Any]) -> Dict[str, Tuple[str, str]]:
    """dest -> (the role's flag, its variable) for every managed flag this release knows."""
    out = {}  # type: Dict[str, Tuple[str, str]]
    for flag, var in MANAGED_FLAGS:
        entry = table["options"].get(flag)
        if entry is not None:
            out.setdefault(entry["dest"], (flag, var))
    return out


def _suggest(table: Dict[str, Any], name: str) -> List[str]:
    """Close option strings, for "did you mean"."""
    import difflib

    longs = [o for o in table["options"] if o.startswith("--")]
    return difflib.get_close_matches(name, longs, n=3, cutoff=0.75)


def _override_errors(value: str, var: str, pos: int) -> List[str]:
    try:
        override = json.loads(value)
    except ValueError as exc:
        return ["%s[%d]: --json-model-override-args %r is not JSON (%s); SGLang would fail at start"
                % (var, pos, value, exc)]
    if not isinstance(override, dict):
        return []
    bad = [k for k in OVERRIDE_KEYS_BREAKING if k in override]
    if not bad:
        return []
    return ["%s[%d]: --json-model-override-args sets %s on the target's config: that changes which "
            "model class runs or which layer a capture id means, so the draft's verified wiring would "
            "not hold. Remove those keys (the layer ids go in sglang_eagle3_layer_ids)"
            % (var, pos, ", ".join(bad))]


def extra_args_errors(extra_args: Sequence[Any], table: Dict[str, Any], release: str = "",
                      var: str = "sglang_extra_args") -> List[str]:
    """Every reason ``extra_args`` cannot be appended to the role's flags for this release.

    Each message names the variable, the offending item and the fix.
    """
    errors = []  # type: List[str]
    options = table["options"]
    managed = managed_dests(table)
    where = "SGLang %s" % release if release else "the installed SGLang"
    expect_value = None  # type: Optional[str]
    for pos, arg in enumerate(extra_args):
        if not isinstance(arg, str):
            errors.append("%s[%d] is %r (%s); every item must be a string, one argv element each"
                          % (var, pos, arg, type(arg).__name__))
            expect_value = None
            continue
        kind, hits = resolve(table, arg)
        if kind == "value":
            if expect_value == OVERRIDE_DEST:
                errors += _override_errors(arg, var, pos)
            elif expect_value is None and pos == 0:
                errors.append("%s[0] is %r, a value with no flag before it; argparse would refuse it as "
                              "an unrecognized argument. Start with the flag it belongs to" % (var, arg))
            expect_value = None
            continue
        expect_value = None
        name = arg.split("=", 1)[0]
        if kind == "unknown":
            close = _suggest(table, name)
            errors.append("%s[%d] is %r, a flag %s does not accept (argparse would exit 2 and the "
                          "service would crash-loop after the restart)%s; remove it or use a flag of "
                          "this release" % (var, pos, arg, where,
                                            "; did you mean %s?" % " or ".join(close) if close else ""))
            continue
        if kind == "ambiguous":
            errors.append("%s[%d] is %r, an abbreviation that matches %s in %s (argparse would exit 2); "
                          "spell the flag out" % (var, pos, arg, ", ".join(hits[:6]), where))
            continue
        option = hits[0]
        entry = options[option]
        dest = entry["dest"]
        if kind == "prefix":
            spelled = "%r (an abbreviation of %s)" % (arg, option)
        elif option != name:
            spelled = "%r (%s)" % (arg, option)
        else:
            spelled = repr(arg)
        if dest in managed:
            flag, role_var = managed[dest]
            alias = "" if option == flag else ", an alias of %s" % flag
            errors.append("%s[%d] is %s%s: argparse stores it in %s, which the role sets from %s; the "
                          "last occurrence wins, so it would silently replace the validated value. Remove "
                          "it from %s and set %s instead"
                          % (var, pos, spelled, alias, dest, role_var, var, role_var))
            continue
        if dest in CAPTURE_BREAKING:
            errors.append("%s[%d] is %s, refused: %s. Remove it from %s"
                          % (var, pos, spelled, CAPTURE_BREAKING[dest], var))
            continue
        if dest in OPAQUE_DESTS:
            errors.append("%s[%d] is %s, refused: %s" % (var, pos, spelled, OPAQUE_DESTS[dest]))
            continue
        if dest == OVERRIDE_DEST:
            if "=" in arg:
                errors += _override_errors(arg.split("=", 1)[1], var, pos)
            else:
                expect_value = OVERRIDE_DEST
            continue
        if entry.get("value") is False and "=" in arg:
            errors.append("%s[%d] is %r, but %s takes no value (argparse would exit 2); give %s alone"
                          % (var, pos, arg, option, option))
    return errors


def check_venv(venv: str, extra_args: Sequence[Any], release: str = "",
               memo_file: Optional[str] = None) -> Dict[str, Any]:
    """Read the release in ``venv`` and judge ``extra_args``; ``checked`` False without an install.

    The result carries ``memo_key`` after a miss, for ``store_table_memo`` once the
    caller knows the run ends well (a refused host keeps its files as they were).
    """
    site = site_packages(venv)
    result = {"checked": False, "errors": [], "allow_abbrev": None, "options": 0, "memo": "off",
              "sources": [], "memo_key": None, "table": None}  # type: Dict[str, Any]
    if site is None or not os.path.isfile(os.path.join(site, SERVER_ARGS_FILE)):
        return result
    if not extra_args:
        # Nothing appended, nothing to judge: the rendered flags are the role's own.
        result["checked"] = True
        return result
    table, memo, key = read_flag_table_memoized(site, memo_file)
    result.update(checked=True, memo=memo, memo_key=key, table=table, allow_abbrev=table["allow_abbrev"],
                  options=len(table["options"]), sources=table["sources"],
                  errors=extra_args_errors(extra_args, table, release))
    return result
