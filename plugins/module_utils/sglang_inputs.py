# -*- coding: utf-8 -*-
"""The role's input contract: every variable's type and accepted range or format.

SGLang and systemd accept bad settings silently: a port of 70000 or a memory
fraction of 1.5 only fails once the server starts, behind a health gate, after the
unit was written and the host restarted; a newline in any value that reaches the
unit or the environment file injects a directive. So every value is judged here,
on the controller, by the role's one preflight task (through the filter
``fleetops.sglang.variable_errors``), before any host is touched.

One table, ``VARIABLES``, holds a checker and the accepted format for each
variable of ``meta/argument_specs.yml`` (tests keep the two in sync, and
``scripts/variable-table`` prints the accepted column of the README from it).
Messages read ``<var>=<value> <problem>; <what is accepted>.``

Stdlib only, no Ansible import: the filter and pytest import it as
``ansible_collections.fleetops.sglang.plugins.module_utils.sglang_inputs``.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_service as _service
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_speculative as _speculative

# --------------------------------------------------------------------------- #
# Constants the rules share
# --------------------------------------------------------------------------- #

VERSION_RE = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)(?:(a|b|rc)([0-9]+))?(?:\.post([0-9]+))?(?:\.dev([0-9]+))?$")
# The first release whose DeepseekV2ForCausalLM has set_eagle3_layers_to_capture.
FIRST_SUPPORTED = "0.5.4.post2"
# useradd's portable name (POSIX portable filename characters, no leading dash), as
# Debian's adduser accepts it for system accounts.
POSIX_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,30}[$]?$")
# systemd unit name without its ".service" suffix; no "@" (a template instance)
# and no "/" (it also names /etc/sglang/<name>.env).
UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,200}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")
URL_RE = re.compile(r"^(https?|file)://[^\s]+$")
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                         r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
# What Ansible's bool filter and argument spec take for true and false.
BOOL_STRINGS = ("yes", "no", "true", "false", "on", "off", "y", "n", "t", "f", "1", "0")
# SGLang's server-side /health_generate check can take up to this many seconds.
SGLANG_HEALTH_CHECK_SECONDS = 20
# Characters that end a line or are invisible in systemd's unit and environment
# syntax: C0 controls (newline, carriage return, NUL, ...) and DEL.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Directories the role must never take over: it creates, chowns or chmods the
# directories it is given (sglang_home to the service user, sglang_state_dir 0700).
SYSTEM_DIRS = frozenset((
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt",
    "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/etc/systemd", "/etc/systemd/system", "/etc/sglang", "/usr/bin", "/usr/lib", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/sbin", "/usr/share", "/var/cache", "/var/lib",
    "/var/log", "/var/tmp", "/var/run",
))
# Characters that systemd reads specially where a path is written into the unit or
# the environment file without quoting (WorkingDirectory=, ReadWritePaths= is a
# space-separated list, HOME=, and the default ExecStart built from sglang_venv).
UNIT_UNSAFE_RE = re.compile(r"[\s%\"'\\$;]")


@dataclass(frozen=True)
class Variable:
    """How one variable is checked, and what the README and the messages say is accepted."""

    accepted: str
    check: Callable[[str, Any, Mapping[str, Any]], List[str]]


# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #


def shown(value: Any) -> str:
    """A value as the user wrote it: bare for plain text and numbers, quoted otherwise.

    Anything with a control character or surrounding spaces is shown as a JSON string,
    so that the message itself stays on one line and the culprit is visible.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if CONTROL_RE.search(value) or value != value.strip():
            return json.dumps(str(value))
        return str(value)
    if isinstance(value, (int, float)):
        return repr(value)
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


def message(var: str, value: Any, problem: str, accepted: str) -> str:
    """The one message style: ``<var>=<value> <problem>; <what is accepted>.``"""
    return "%s=%s %s; accepted: %s." % (var, shown(value), problem, accepted.rstrip("."))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value: Any) -> Optional[int]:
    """An int, or the text of one as ``-e var=15`` gives it; None for anything else."""
    if _is_int(value):
        return int(value)
    if isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*$", value):
        return int(value)
    return None


def as_number(value: Any) -> Optional[float]:
    """An int or float, or its text (``-e sglang_mem_fraction_static=0.8``); None otherwise."""
    if _is_int(value) or isinstance(value, float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    if math.isnan(number) or math.isinf(number):
        return None
    return number


def as_bool(value: Any) -> Optional[bool]:
    """True or False as Ansible's ``bool`` reads it; None for anything it would misread."""
    if isinstance(value, bool):
        return value
    if _is_int(value) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in BOOL_STRINGS:
        return value.strip().lower() in ("yes", "true", "on", "y", "t", "1")
    return None


def control_characters(value: Any, path: str) -> List[tuple]:
    """Where control characters hide in a value: (path, character, position) for each
    string that holds one, the path written ``var``, ``var[2]`` or ``var.KEY``."""
    found: List[tuple] = []
    if isinstance(value, str):
        match = CONTROL_RE.search(value)
        if match:
            found.append((path, json.dumps(match.group())[1:-1], match.start()))
    elif isinstance(value, Mapping):
        for key in value:
            found += control_characters(key, "%s key %s" % (path, shown(key)))
            found += control_characters(value[key], "%s.%s" % (path, key))
    elif isinstance(value, (list, tuple)):
        for pos, item in enumerate(value):
            found += control_characters(item, "%s[%d]" % (path, pos))
    return found


def version_key(version: str) -> tuple:
    """Order release strings as PEP 440 does for the forms VERSION_RE accepts:
    X.Y.Z.devN < X.Y.ZaN < X.Y.ZbN < X.Y.ZrcN < X.Y.Z < X.Y.Z.postN."""
    m = VERSION_RE.match(version)
    if not m:
        raise ValueError("not a release string: %r" % version)
    major, minor, micro, pre, pre_n, post, dev = m.groups()
    if pre:
        pre_key = (0, {"a": 0, "b": 1, "rc": 2}[pre], int(pre_n))
    elif dev is not None and post is None:
        pre_key = (-1, 0, 0)
    else:
        pre_key = (1, 0, 0)
    return (int(major), int(minor), int(micro), pre_key,
            int(post) if post is not None else -1, int(dev) if dev is not None else float("inf"))


# --------------------------------------------------------------------------- #
# Checkers by kind: (var, value, all values) -> messages
# --------------------------------------------------------------------------- #


def _bool(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if as_bool(value) is None:
        return [message(var, value, "is not a boolean", ACCEPTED_BOOL)]
    return []


def _int_range(low: int, high: Optional[int] = None, nullable: bool = False) -> Callable[..., List[str]]:
    def check(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
        if value is None and nullable:
            return []
        number = as_int(value)
        if number is None or number < low or (high is not None and number > high):
            what = "is not an integer" if number is None else "is out of range"
            return [message(var, value, what, _int_accepted(low, high))]
        return []
    return check


def _int_accepted(low: int, high: Optional[int]) -> str:
    if high is None:
        return "a positive integer" if low == 1 else "an integer >= %d" % low
    return "an integer from %d to %d" % (low, high)


def _path_errors(var: str, value: Any, accepted: str, unit_safe: bool = False,
                 own_directory: bool = False) -> List[str]:
    """Host paths: absolute and normalised; some are written unquoted into the unit."""
    if not isinstance(value, str) or not value.startswith("/"):
        return [message(var, value, "is not an absolute path", accepted)]
    parts = value.split("/")
    if any(p in (".", "..") for p in parts):
        return [message(var, value, "has a . or .. component", accepted)]
    if unit_safe and UNIT_UNSAFE_RE.search(value):
        bad = UNIT_UNSAFE_RE.search(value).group()
        return [message(var, value, "holds %s, which is syntax where the role writes this path unquoted (the "
                        "unit's ExecStart=, WorkingDirectory=, ReadWritePaths=, the environment file, pip's "
                        "command line)" % json.dumps(bad), accepted)]
    if own_directory and (value.rstrip("/") or "/") in SYSTEM_DIRS:
        return [message(var, value, "is a system directory the role would create, chown or chmod as its own",
                        accepted)]
    return []


def _path(accepted: str, unit_safe: bool = False, own_directory: bool = False) -> Callable[..., List[str]]:
    def check(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
        return _path_errors(var, value, accepted, unit_safe, own_directory)
    return check


def _str_list(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if not isinstance(value, (list, tuple)):
        return [message(var, value, "is not a list", "a list of strings, one item per argument")]
    return [message("%s[%d]" % (var, pos), item, "is not a string", "each item a string")
            for pos, item in enumerate(value) if not isinstance(item, str)]


def _choice(*choices: str) -> Callable[..., List[str]]:
    def check(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
        if value not in choices:
            return [message(var, value, "is not a choice", "one of %s" % ", ".join(choices))]
        return []
    return check


# --------------------------------------------------------------------------- #
# Checkers for single variables
# --------------------------------------------------------------------------- #


def _version(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    # Messages kept as preflight wrote them before the rules moved here.
    if not (isinstance(value, str) and VERSION_RE.match(value)):
        return ['%s=%s is not an SGLang release string (expected e.g. "0.5.9" or "0.5.12.post1"; '
                'quote it in YAML).' % (var, shown(value))]
    if version_key(value) < version_key(FIRST_SUPPORTED):
        return ["%s=%s: DeepseekV2ForCausalLM has no set_eagle3_layers_to_capture before %s, so EAGLE-3 "
                "with a DeepSeek target cannot be served; set sglang_version to %s or later."
                % (var, value, FIRST_SUPPORTED, FIRST_SUPPORTED)]
    wheelhouse = values.get("sglang_wheelhouse")
    if values.get("sglang_install_source") == "wheelhouse" and isinstance(wheelhouse, str) and wheelhouse:
        pattern = "%s/sglang-%s-*.whl" % (wheelhouse, value)
        if not glob.glob(pattern):
            return ['sglang_wheelhouse=%s has no wheel for sglang %s (looked for %s); add it with '
                    '"pip download --no-deps sglang==%s -d %s".' % (wheelhouse, value, pattern, value, wheelhouse)]
    return []


def _install_source(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    # The value itself is one of the choices: argument_specs refuses anything else first.
    wheelhouse = values.get("sglang_wheelhouse", "")
    if value == "wheelhouse" and not wheelhouse:
        return ['%s=%s (sglang_wheelhouse=%s): use "index" (optionally with sglang_pip_index_url) or '
                '"wheelhouse" with sglang_wheelhouse set to a directory on the controller.'
                % (var, shown(value), shown(wheelhouse) if wheelhouse else "")]
    return []


def _index_url(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if value == "":
        return []
    if not isinstance(value, str) or not URL_RE.match(value):
        return [message(var, value, "is not an index URL", VARIABLES[var].accepted)]
    return []


def _wheelhouse(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    if not isinstance(value, str):
        return [message(var, value, "is not a string", VARIABLES[var].accepted)]
    if value and values.get("sglang_install_source") == "wheelhouse" and not os.path.isdir(value):
        return [message(var, value, "is not a directory on the controller", VARIABLES[var].accepted)]
    return []


def _hashes(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if not isinstance(value, (list, tuple)):
        return [message(var, value, "is not a list", VARIABLES[var].accepted)]
    return [message("%s[%d]" % (var, pos), item, "is not a sha256 hex digest", VARIABLES[var].accepted)
            for pos, item in enumerate(value) if not (isinstance(item, str) and SHA256_RE.match(item))]


def _layer_ids(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    return _speculative.validate_layer_ids(value, var=var)


def _pp_size(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if as_int(value) != 1:
        return ["%s=%s: with pipeline parallelism the embedding output lives on the first rank while the "
                "draft's hidden states are captured on the last, so the patched wiring cannot work. Use "
                "sglang_pp_size: 1 (tensor parallelism is fine)." % (var, shown(value))]
    return []


def _speculative_triple(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    """The triple is judged once (on num_steps), as SGLang judges it: together."""
    prefix = "sglang_speculative_"
    triple = [values.get(prefix + k) for k in ("num_steps", "eagle_topk", "num_draft_tokens")]
    # A missing triple is not "SGLang's default": the gate asserts the served values
    # equal these variables, so SGLang's own choice (3/1/4) would fail it after the restart.
    missing = [prefix + k for k, v in zip(("num_steps", "eagle_topk", "num_draft_tokens"), triple) if v is None]
    if missing:
        return ["%s=null is not set; give all three of %snum_steps, %seagle_topk and %snum_draft_tokens as "
                "positive integers (SGLang would choose the missing ones itself)." % (m, prefix, prefix, prefix)
                for m in missing]
    return [e if e.endswith(".") else e + "." for e in _speculative.validate_speculative(*[
        as_int(v) if as_int(v) is not None else v for v in triple])]


def _judged_with_num_steps(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    """Part of the speculative triple, which _speculative_triple judges as a whole."""
    return []


def _host(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if isinstance(value, str):
        try:
            ipaddress.ip_address(value)
            return []
        except ValueError:
            # All-digit labels would be a mistyped address, not a name (RFC 1123).
            if HOSTNAME_RE.match(value) and not re.match(r"^[0-9.]+$", value):
                return []
    return [message(var, value, "is not an IP address or host name", VARIABLES[var].accepted)]


def _mem_fraction(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if value is None:
        return []
    number = as_number(value)
    if number is None or isinstance(value, bool) or not 0 < number < 1:
        return [message(var, value, "is not a number between 0 and 1", VARIABLES[var].accepted)]
    return []


def _service_name(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if not isinstance(value, str) or not UNIT_NAME_RE.match(value) or value.endswith(".service"):
        return [message(var, value, "is not a systemd unit name", VARIABLES[var].accepted)]
    return []


def _account(kind: str) -> Callable[..., List[str]]:
    def check(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
        if not isinstance(value, str) or not POSIX_NAME_RE.match(value):
            return [message(var, value, "is not a valid POSIX %s name" % kind, VARIABLES[var].accepted)]
        if value == "root":
            # The role creates the account as a system account with a nologin shell and
            # sglang_home as home: pointed at root it would rewrite root's own entry.
            return [message(var, value, "is root, whose account the role would rewrite (nologin shell, "
                            "home %s)" % "sglang_home", VARIABLES[var].accepted)]
        return []
    return check


def _home(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    errors = _path_errors(var, value, VARIABLES[var].accepted, unit_safe=True, own_directory=True)
    state = values.get("sglang_state_dir")
    if not errors and isinstance(state, str) and state.startswith("/"):
        a, b = value.rstrip("/") + "/", state.rstrip("/") + "/"
        if a.startswith(b) or b.startswith(a):
            errors.append(message(var, value, "overlaps sglang_state_dir=%s (root-only backups and the service "
                                  "user's writable home must stay apart)" % state, VARIABLES[var].accepted))
    return errors


def _state_dir(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    errors = _path_errors(var, value, VARIABLES[var].accepted, unit_safe=False, own_directory=True)
    venv = values.get("sglang_venv")
    if not errors and isinstance(venv, str) and (value.rstrip("/") + "/").startswith(venv.rstrip("/") + "/"):
        errors.append(message(var, value, "is inside sglang_venv=%s, which a reinstall replaces" % venv,
                              VARIABLES[var].accepted))
    return errors


def _server_command(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    accepted = VARIABLES[var].accepted
    if not isinstance(value, str) or not value.strip():
        return [message(var, value, "is not a command", accepted)]
    if not value.split()[0].startswith("/"):
        return [message(var, value, "does not start with an absolute program path", accepted)]
    if "%" in value:
        return [message(var, value, "holds %, which systemd expands as a specifier in ExecStart=", accepted)]
    return []


def _environment(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    """Keys and values of the 0600 environment file; values are never shown (secrets)."""
    accepted = VARIABLES[var].accepted
    if not isinstance(value, Mapping):
        return ["%s is a %s, not a mapping; accepted: %s." % (var, _kind(value), accepted)]
    errors = []
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_KEY_RE.match(key):
            errors.append(message("%s key" % var, key, "is not an environment variable name", accepted))
            continue
        where = "%s.%s" % (var, key)
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            errors.append("%s is a %s (value not shown: it may be a secret); accepted: %s." % (where, _kind(item), accepted))
        elif isinstance(item, str) and any(ord(c) > 126 for c in item):
            # to_json writes \\uXXXX, which systemd's EnvironmentFile= keeps literally.
            errors.append("%s holds a non-ASCII character (value not shown: it may be a secret), which the "
                          "environment file cannot carry unchanged; accepted: %s." % (where, accepted))
    return errors


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return next((t for t in type(value).__mro__ if t.__module__ == "builtins"), type(value)).__name__


def _hook(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if value == "":
        return []
    accepted = VARIABLES[var].accepted
    if not isinstance(value, str) or not os.path.isabs(value):
        return [message(var, value, "is not an absolute path", accepted)]
    if not os.path.isfile(value):
        # Found missing only just before the restart, after the unit was written.
        return [message(var, value, "does not exist on the controller", accepted)]
    return []


def _request_timeout(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    number = as_int(value)
    if number is None or number <= SGLANG_HEALTH_CHECK_SECONDS:
        return [message(var, value, "is not above SGLang's %d s server-side health check"
                        % SGLANG_HEALTH_CHECK_SECONDS, VARIABLES[var].accepted)]
    return []


def _live_requests(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    limit = int(values.get("_live_prompts", LIVE_PROMPTS))
    number = as_int(value)
    if number is None or not 1 <= number <= limit:
        return [message(var, value, "is out of range (the role has %d prompts)" % limit, VARIABLES[var].accepted)]
    return []


def _accept_length(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    number = as_number(value)
    if number is None or isinstance(value, bool) or number < 0:
        return [message(var, value, "is not a number >= 0", VARIABLES[var].accepted)]
    tokens = as_int(values.get("sglang_speculative_num_draft_tokens"))
    if tokens is not None and number > tokens:
        # A step accepts at most every verified token: the gate could never pass.
        return [message(var, value, "is above sglang_speculative_num_draft_tokens=%d, the most tokens a step "
                        "can accept, so every gate would fail" % tokens, VARIABLES[var].accepted)]
    return []


def _extra_directives(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    # The rules live with the unit's other sandbox logic (sglang_service).
    return _service.validate_extra_directives(value, var=var)


def _textfile_path(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    accepted = VARIABLES[var].accepted
    errors = _path_errors(var, value, accepted, unit_safe=True)
    if errors:
        return errors
    if not value.endswith(".prom") or value.endswith("/.prom"):
        # node_exporter's textfile collector reads only *.prom files.
        return [message(var, value, "does not name a *.prom file", accepted)]
    return []


LIVE_PROMPTS = 5
ACCEPTED_BOOL = "true or false (also yes/no, on/off, 1/0)"
_HOST_PATH = "an absolute path on the host, without . or .. components"
_UNIT_PATH = _HOST_PATH + ", spaces, quotes, % $ ; or \\"
_OWN_DIR = ", not a system directory such as / /etc /usr /var/lib"

VARIABLES: Dict[str, Variable] = {
    "sglang_version": Variable('a release string "X.Y.Z[.postN]", quoted, ' + FIRST_SUPPORTED + " or later", _version),
    "sglang_venv": Variable(_UNIT_PATH + _OWN_DIR, _path(_UNIT_PATH + _OWN_DIR, unit_safe=True, own_directory=True)),
    "sglang_python": Variable(_UNIT_PATH, _path(_UNIT_PATH, unit_safe=True)),
    "sglang_install_source": Variable('"index" or "wheelhouse" (then sglang_wheelhouse is required)', _install_source),
    "sglang_pip_index_url": Variable('"" or an http://, https:// or file:// URL without spaces', _index_url),
    "sglang_wheelhouse": Variable('"" or a directory on the controller holding sglang-<version>-*.whl', _wheelhouse),
    "sglang_wheelhouse_remote": Variable(_UNIT_PATH + _OWN_DIR,
                                         _path(_UNIT_PATH + _OWN_DIR, unit_safe=True, own_directory=True)),
    "sglang_pip_hashes": Variable("a list of sha256 hex digests (64 hex characters, no sha256: prefix)", _hashes),
    "sglang_pip_no_deps": Variable(ACCEPTED_BOOL, _bool),
    "sglang_pip_extra_args": Variable("a list of strings, one item per argument", _str_list),
    "sglang_eagle3_layer_ids": Variable(
        "distinct ascending integers, -1 (the embedding output) only first, each at most num_hidden_layers - 2 "
        "of the target (the last layer's output is never captured)", _layer_ids),
    "sglang_pp_size": Variable("1", _pp_size),
    "sglang_state_dir": Variable(_HOST_PATH + _OWN_DIR + ", outside sglang_venv and sglang_home", _state_dir),
    "sglang_model_path": Variable(_HOST_PATH + "; its config.json must name a DeepseekV2/V3/V32 architecture",
                                  _path(_HOST_PATH)),
    "sglang_draft_model_path": Variable(_HOST_PATH, _path(_HOST_PATH)),
    "sglang_speculative_algorithm": Variable("EAGLE3", _choice("EAGLE3")),
    "sglang_speculative_num_steps": Variable(
        "a positive integer; with topk 1 exactly draft tokens - 1", _speculative_triple),
    "sglang_speculative_eagle_topk": Variable("a positive integer", _judged_with_num_steps),
    "sglang_speculative_num_draft_tokens": Variable(
        "a positive integer; with topk 1 exactly num_steps + 1, else at most the draft tree's capacity",
        _judged_with_num_steps),
    "sglang_tp_size": Variable("a positive integer", _int_range(1)),
    "sglang_host": Variable("an IPv4 or IPv6 address or a host name", _host),
    "sglang_port": Variable("an integer from 1 to 65535", _int_range(1, 65535)),
    "sglang_mem_fraction_static": Variable("null or a number between 0 and 1 (both excluded)", _mem_fraction),
    "sglang_disable_cuda_graph": Variable(ACCEPTED_BOOL, _bool),
    "sglang_enable_metrics": Variable(ACCEPTED_BOOL, _bool),
    "sglang_extra_args": Variable("a list of strings, one item per argument", _str_list),
    "sglang_service_manage": Variable(ACCEPTED_BOOL, _bool),
    "sglang_service_name": Variable("a systemd unit name without .service: letters, digits, _ . : -", _service_name),
    "sglang_user": Variable("a POSIX user name ([a-z_][a-z0-9_-]*, at most 32 characters), not root",
                            _account("user")),
    "sglang_group": Variable("a POSIX group name ([a-z_][a-z0-9_-]*, at most 32 characters), not root",
                             _account("group")),
    "sglang_home": Variable(_UNIT_PATH + _OWN_DIR + ", apart from sglang_state_dir", _home),
    "sglang_server_command": Variable("an absolute program path then its arguments, without %", _server_command),
    "sglang_environment": Variable(
        "a mapping of names [A-Za-z_][A-Za-z0-9_]* to strings or numbers, printable ASCII", _environment),
    "sglang_start_timeout": Variable("a positive integer (seconds)", _int_range(1)),
    "sglang_restart_on_change": Variable(ACCEPTED_BOOL, _bool),
    "sglang_pre_restart_tasks": Variable('"" or the absolute path of a task file on the controller', _hook),
    "sglang_post_restart_tasks": Variable('"" or the absolute path of a task file on the controller', _hook),
    "sglang_audit": Variable(ACCEPTED_BOOL, _bool),
    "sglang_fast_path": Variable(ACCEPTED_BOOL, _bool),
    "sglang_audit_memo": Variable(ACCEPTED_BOOL, _bool),
    "sglang_health_timeout": Variable("a positive integer (seconds)", _int_range(1)),
    "sglang_health_request_timeout": Variable(
        "an integer above %d (seconds)" % SGLANG_HEALTH_CHECK_SECONDS, _request_timeout),
    "sglang_live_gate_requests": Variable("an integer from 1 to %d (the role's prompts)" % LIVE_PROMPTS,
                                          _live_requests),
    "sglang_accept_length_min": Variable("a number from 0 (off) to sglang_speculative_num_draft_tokens",
                                         _accept_length),
    "sglang_rollback_on_failure": Variable(ACCEPTED_BOOL, _bool),
    "sglang_defer_gate_failure": Variable(ACCEPTED_BOOL, _bool),
    "sglang_lock_timeout": Variable("an integer >= 0 (seconds; 0 fails at once)", _int_range(0)),
    "sglang_lock_ttl": Variable("a positive integer (seconds)", _int_range(1)),
    "sglang_service_hardening": Variable('"default" or "strict" (verify "strict" on one canary GPU host first)',
                                         _choice("default", "strict")),
    "sglang_service_extra_directives": Variable(
        "a mapping of section (Unit, Service, Install) to directive names [A-Za-z][A-Za-z0-9]* to a value or a "
        "list of values, not a directive the role owns, no trailing backslash", _extra_directives),
    "sglang_live_check": Variable(ACCEPTED_BOOL, _bool),
    "sglang_live_probe_requests": Variable("an integer from 0 (server info only) to %d (the role's prompts)"
                                           % LIVE_PROMPTS, _int_range(0, LIVE_PROMPTS)),
    "sglang_live_probe_tokens": Variable("an integer from 1 to 1024", _int_range(1, 1024)),
    "sglang_metrics_textfile": Variable(ACCEPTED_BOOL, _bool),
    "sglang_metrics_textfile_path": Variable(_UNIT_PATH + ", ending in .prom", _textfile_path),
}

# Control characters are refused everywhere; the environment's values are not shown.
_SECRET = ("sglang_environment",)
NO_CONTROL = ("no control characters in any value (newline, carriage return, tab, NUL and the other C0 "
              "characters): systemd's line syntax would read what follows as a new line or directive")


def variable_errors(values: Mapping[str, Any], live_prompts: int = LIVE_PROMPTS,
                    names: Optional[Sequence[str]] = None) -> List[str]:
    """Every reason the role's variables cannot work, in the order of ``VARIABLES``.

    ``values`` holds the role's variables by name (other names are ignored); a
    variable that is absent is not judged. ``live_prompts`` is how many prompts
    the live gate has. Control characters are looked for first and alone: a value
    that could inject a systemd directive is not judged further.
    """
    context = dict(values)
    context["_live_prompts"] = live_prompts
    errors: List[str] = []
    for name, rule in VARIABLES.items():
        if name not in values or (names is not None and name not in names):
            continue
        value = values[name]
        hidden = control_characters(value, name)
        if hidden:
            for path, char, pos in hidden:
                where = "" if path == name else " (in %s)" % path
                problem = "holds the control character %s at position %d%s" % (char, pos, where)
                if name in _SECRET:
                    errors.append("%s %s, value not shown (it may be a secret); accepted: %s." % (name, problem, NO_CONTROL))
                else:
                    errors.append(message(name, value, problem, NO_CONTROL))
            continue
        errors += rule.check(name, value, context)
    return errors


def accepted(name: str) -> str:
    """What is accepted for ``name``, for the README's variable table."""
    return VARIABLES[name].accepted
