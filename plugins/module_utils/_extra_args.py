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

So the release's own option table is read first (``_release_flags``, from its
files with ``ast``), and the arguments are judged against it here.

Stdlib only, Python 3.9 compatible: modules import it on the host as
``ansible_collections.fleetops.sglang.plugins.module_utils._extra_args``
and pytest imports it directly.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import EngineError, find_installation
from ansible_collections.fleetops.sglang.plugins.module_utils._release_flags import (
    SERVER_ARGS_FILE,
    read_flag_table_memoized,
)

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
    # A node of a multi-node replica: rendered from the inventory's replica (plugin_utils/_replicas.py).
    ("--nnodes", "sglang_nnodes"),
    ("--node-rank", "sglang_node_rank"),
    ("--dist-init-addr", "sglang_dist_init_addr"),
)

# Flags (by dest) that silently drop or break the aux hidden-state capture the
# draft was trained on, or swap the code the role patched. Evidence per release
# is in the input guide (docs/docsite/rst/guide_inputs.rst, "Flags refused in sglang_extra_args").
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
# --trust-remote-code: SGLang, and the role's flag check as root (prepare_server_args reaches
# AutoConfig.from_pretrained on 0.5.9), then run the Python files of the model directories. Only where
# sglang_trust_remote_code says so, and those directories are then root's all the way down (_rootpaths).
REMOTE_CODE_DEST = "trust_remote_code"
REMOTE_CODE_VAR = "sglang_trust_remote_code"
# The server's API keys: never on its command line, which every local user reads in
# /proc/<pid>/cmdline and `systemctl show`. The role writes them to the 0640 file that
# its --config flag names (sglang_api_key, sglang_admin_api_key).
# dest -> (SGLang's option, the role's variable).
SECRET_DESTS = {
    "api_key": ("--api-key", "sglang_api_key"),
    "admin_api_key": ("--admin-api-key", "sglang_admin_api_key"),
}
# The shortest spelling judged a key flag without a release's table ("--api", "--adm").
_SECRET_PREFIX_MIN = 5


def secret_flag(arg: Any) -> Optional[Tuple[str, str]]:
    """(option, variable) when ``arg`` spells a key flag by name, on any release: the option, an
    abbreviation of it (from ``--api`` / ``--adm`` on) or either with ``=value``; else None."""
    if not isinstance(arg, str) or not arg.startswith("--"):
        return None
    name = arg.split("=", 1)[0]
    for option, var in SECRET_DESTS.values():
        if len(name) >= _SECRET_PREFIX_MIN and option.startswith(name):
            return option, var
    return None


def secret_flag_error(var: str, pos: int, option: str, key_var: str) -> str:
    """The refusal of a key flag in ``var``; the item and its value are never shown."""
    return ("%s[%d] gives %s (value not shown: it is a secret) on the command line, where every local "
            "user reads it (/proc/<pid>/cmdline, systemctl show). Remove it and its value from %s and set "
            "%s instead: the role hands the key to the server in a 0640 file through --config"
            % (var, pos, option, var, key_var))


def key_route_errors(table: Dict[str, Any], release: str, key_vars: Sequence[str]) -> List[str]:
    """Why this release cannot take the keys that are set (``key_vars``) through --config."""
    if not key_vars:
        return []
    dests = {entry["dest"] for entry in table["options"].values()}
    where = "SGLang %s" % release if release else "the installed SGLang"
    errors = []  # type: List[str]
    if "config" not in dests:
        errors.append("%s is set, but %s has no --config, the only way the role gives a key to the server "
                      "(never on its command line); leave %s empty or pin a release with --config"
                      % (" and ".join(key_vars), where, " and ".join(key_vars)))
        return errors
    for dest, (option, var) in sorted(SECRET_DESTS.items()):
        if var in key_vars and dest not in dests:
            errors.append("%s is set, but %s has no %s; leave %s empty or pin a release that has %s"
                          % (var, where, option, var, option))
    return errors


# --json-model-override-args rewrites the target's config.json in memory; these
# keys change which model class runs or which layer a capture id means.
OVERRIDE_DEST = "json_model_override_args"
OVERRIDE_KEYS_BREAKING = ("architectures", "model_type", "num_hidden_layers", "first_k_dense_replace",
                          "text_config", "eagle_config")

# argparse's test for "looks like a negative number" (then it is a value).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


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
                      var: str = "sglang_extra_args", trust_remote_code: bool = False) -> List[str]:
    """Every reason ``extra_args`` cannot be appended to the role's flags for this release.

    Each message names the variable, the offending item and the fix.
    """
    errors = []  # type: List[str]
    options = table["options"]
    managed = managed_dests(table)
    where = "SGLang %s" % release if release else "the installed SGLang"
    expect_value = None  # type: Optional[str]
    for pos, arg in enumerate(extra_args):
        if expect_value == "secret":
            expect_value = None  # a key's value: neither judged nor shown
            continue
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
        secret = secret_flag(arg) if kind in ("unknown", "ambiguous") else None
        if kind in ("exact", "prefix") and options[hits[0]]["dest"] in SECRET_DESTS:
            secret = SECRET_DESTS[options[hits[0]]["dest"]]
        if secret is not None:
            errors.append(secret_flag_error(var, pos, secret[0], secret[1]))
            expect_value = None if "=" in arg else "secret"
            continue
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
        if dest == REMOTE_CODE_DEST and not trust_remote_code:
            errors.append("%s[%d] is %s, refused: it makes SGLang, and the role's flag check as root, run the Python "
                          "files of the model directories (sglang_model_path, sglang_draft_model_path), where whoever "
                          "can write them runs code as root. Remove it, or set %s: true, which also requires those "
                          "directories to be root's and writable by nobody else" % (var, pos, spelled, REMOTE_CODE_VAR))
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
               memo_file: Optional[str] = None, key_vars: Sequence[str] = (),
               trust_remote_code: bool = False) -> Dict[str, Any]:
    """Read the release in ``venv`` and judge ``extra_args``, and whether it takes the keys that
    are set (``key_vars``: variable names, never values); ``checked`` False without an install.

    The result carries ``memo_key`` after a miss, for ``store_table_memo`` once the
    caller knows the run ends well (a refused host keeps its files as they were).
    """
    result = {"checked": False, "errors": [], "allow_abbrev": None, "options": 0, "memo": "off",
              "sources": [], "memo_key": None, "table": None}  # type: Dict[str, Any]
    try:
        site = find_installation(venv, record=False).site_packages
    except EngineError:
        return result
    if not os.path.isfile(os.path.join(site, SERVER_ARGS_FILE)):
        return result
    if not extra_args and not key_vars:
        # Nothing appended, nothing to judge: the rendered flags are the role's own.
        result["checked"] = True
        return result
    table, memo, key = read_flag_table_memoized(site, memo_file)
    result.update(checked=True, memo=memo, memo_key=key, table=table, allow_abbrev=table["allow_abbrev"],
                  options=len(table["options"]), sources=table["sources"],
                  errors=key_route_errors(table, release, key_vars)
                  + extra_args_errors(extra_args, table, release, trust_remote_code=trust_remote_code))
    return result


def refusal(release: str, errors: Sequence[str]) -> str:
    """The one failure message of the flag check (sglang_server_flags and the probe alike)."""
    return "SGLang %s cannot run what the role would render: %s" % (release, " ".join(errors))
