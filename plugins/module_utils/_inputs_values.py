# -*- coding: utf-8 -*-
"""The input contract's shared parts: constants, reading and showing values, the checkers by kind.

How a value is read as Ansible reads it (``as_int``, ``as_bool``, ``as_number``), how
it is shown in a message (``shown``, ``message``: ``<var>=<value> <problem>; <what is
accepted>.``), and the checkers every family of variables uses (a boolean, an
integer range, a host path, a list of strings, a choice). The rules for single
variables are in _inputs_rules, the table in _inputs. Stdlib only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, List, Mapping, Optional

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
# The user information of a URL (scheme://user:password@host): credentials, never shown or put in argv.
URL_CREDENTIALS_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/@\s]+)@")

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
    """How one variable is checked, and what the input guide and the messages say is accepted."""

    accepted: str
    check: Callable[[str, Any, Mapping[str, Any]], List[str]]


def accepting(accepted: str, rule: Callable[[str, Any, Mapping[str, Any], str], List[str]]) -> Variable:
    """A variable whose rule quotes ``accepted`` in its messages: the table says it once."""
    return Variable(accepted, lambda var, value, values: rule(var, value, values, accepted))


LIVE_PROMPTS = 5
ACCEPTED_BOOL = "true or false (also yes/no, on/off, 1/0)"


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


def check_bool(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if as_bool(value) is None:
        return [message(var, value, "is not a boolean", ACCEPTED_BOOL)]
    return []


def check_int_range(low: int, high: Optional[int] = None, nullable: bool = False) -> Callable[..., List[str]]:
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


def path_errors(var: str, value: Any, accepted: str, unit_safe: bool = False,
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


def check_path(accepted: str, unit_safe: bool = False, own_directory: bool = False) -> Callable[..., List[str]]:
    def check(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
        return path_errors(var, value, accepted, unit_safe, own_directory)
    return check


def check_str_list(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if not isinstance(value, (list, tuple)):
        return [message(var, value, "is not a list", "a list of strings, one item per argument")]
    return [message("%s[%d]" % (var, pos), item, "is not a string", "each item a string")
            for pos, item in enumerate(value) if not isinstance(item, str)]


def check_choice(*choices: str) -> Callable[..., List[str]]:
    def check(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
        if value not in choices:
            return [message(var, value, "is not a choice", "one of %s" % ", ".join(choices))]
        return []
    return check


def without_credentials(text: str) -> str:
    """``text`` with the user information of every URL in it replaced by ``***``."""
    return URL_CREDENTIALS_RE.sub(r"\1***@", text)
