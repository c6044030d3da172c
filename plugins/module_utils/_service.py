# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure rules for the SGLang systemd unit: sandbox paths and user directives.

Two things reach the unit from the variables and are checked here, once:

* the paths the sandbox must leave reachable (``ProtectSystem=strict`` makes
  everything else read-only, ``ProtectHome`` hides /home), derived from
  ``sglang_home``, the model paths and the cache variables of
  ``sglang_environment`` -- a GPU server that cannot write its Triton or
  Hugging Face cache fails at the first JIT compile, not at start;
* ``sglang_service_extra_directives``, which is written into the unit verbatim:
  a newline in a value would start a new directive, a trailing backslash would
  swallow the next line, so both are refused before any host is touched.

Stdlib only and no Ansible import: the filter plugin imports it on the
controller (fleetops.sglang.service_*) and pytest imports it directly.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

SECTIONS = ("Unit", "Service", "Install")
DIRECTIVE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
# C0 controls and DEL: a newline or carriage return would start another
# directive, the others have no meaning in a unit file and hide what it says.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

# Directives the role owns; a second value would not refine them but break the
# unit (two ExecStart= on Type=simple) or undo what preflight checked.
OWNED = {
    "ExecStart": "sglang_server_command and the sglang_* flag variables",
    "User": "sglang_user",
    "Group": "sglang_group",
    "Type": "the role (Type=simple: the gates judge readiness)",
    "EnvironmentFile": "sglang_environment (the role writes it to a 0600 file)",
    # The unit is mode 0644: anything in Environment= is readable by every user.
    "Environment": "sglang_environment, which reaches only the 0600 environment file",
}

# What sglang_service_extra_directives may add: directives that order, limit, schedule or tighten
# the service, and cannot weaken its sandbox, run a command, change who it runs as or where its
# output goes. Anything else (ExecStartPre=, NoNewPrivileges=, CapabilityBoundingSet=, User=,
# SupplementaryGroups=, ReadWritePaths=, StandardOutput=file:..., Protect*=, ...) is refused by name.
ALLOWED = {
    "Unit": frozenset((
        "Description", "Documentation", "Wants", "Requires", "Requisite", "BindsTo", "PartOf", "Upholds",
        "Conflicts", "Before", "After", "OnFailure", "OnSuccess", "RequiresMountsFor", "StartLimitIntervalSec",
        "StartLimitBurst")),
    "Service": frozenset((
        "Restart", "RestartSec", "RestartSteps", "RestartMaxDelaySec", "RestartPreventExitStatus",
        "RestartForceExitStatus", "SuccessExitStatus", "TimeoutStartSec", "TimeoutStopSec", "TimeoutAbortSec",
        "KillSignal", "FinalKillSignal", "SendSIGKILL", "Nice", "OOMScoreAdjust", "OOMPolicy", "IOSchedulingClass",
        "IOSchedulingPriority", "CPUAffinity", "NUMAPolicy", "NUMAMask", "Slice", "CPUWeight", "CPUQuota",
        "IOWeight", "MemoryMin", "MemoryLow", "MemoryHigh", "MemoryMax", "MemorySwapMax", "TasksMax",
        # More limits on the same process: they only narrow what it may do.
        "LimitCPU", "LimitFSIZE", "LimitDATA", "LimitSTACK", "LimitCORE", "LimitRSS", "LimitNOFILE", "LimitAS",
        "LimitNPROC", "LimitMEMLOCK", "LimitLOCKS", "LimitSIGPENDING", "LimitMSGQUEUE", "LimitNICE",
        "LimitRTPRIO", "LimitRTTIME",
        # Less reachable, never more: devices (the InfiniBand verbs of multi-node NCCL), read-only and
        # hidden paths.
        "DeviceAllow", "ReadOnlyPaths", "InaccessiblePaths",
        "LogLevelMax", "LogRateLimitIntervalSec", "LogRateLimitBurst", "SyslogIdentifier", "UnsetEnvironment")),
    "Install": frozenset(("WantedBy", "RequiredBy", "Alias")),
}

# Variables of sglang_environment that move a cache out of sglang_home; with
# ProtectSystem=strict each must be writable or the first JIT or download fails.
CACHE_ENV_VARS = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "XDG_CACHE_HOME",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "CUDA_CACHE_PATH",
    "FLASHINFER_WORKSPACE_BASE",
)

# ProtectHome=true makes these inaccessible: a path below them is unreachable
# even with ReadWritePaths= (the parent is mounted over first).
_HOME_ROOTS = ("/home", "/root", "/run/user")


def _describe(value: Any) -> str:
    """A value with its builtin type name (Ansible hands filters its own str subclasses)."""
    kind = next((t for t in type(value).__mro__ if t.__module__ == "builtins"), type(value))
    return "%r (%s)" % (value, kind.__name__)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool))


def render_value(value: Any) -> str:
    """The text systemd reads: booleans as yes/no (YAML true would render "True")."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def validate_extra_directives(value: Any, var: str = "sglang_service_extra_directives") -> List[str]:
    """Every reason ``value`` cannot be written into the unit as it stands.

    The accepted shape is a dict of section -> dict of directive -> value or
    list of values (one line per item, the way systemd repeats list settings).
    """
    shape = ('a dict of section (one of %s) to a dict of directive name to a value or a list of values,'
             ' e.g. {"Service": {"LimitNPROC": 65536, "DeviceAllow": ["char-infiniband_verbs rw"]}}'
             % "/".join(SECTIONS))
    if value is None or value == {}:
        return []
    if not isinstance(value, Mapping):
        return ["%s must be %s; got %s." % (var, shape, _describe(value))]
    errors = []  # type: List[str]
    for section, directives in value.items():
        where = "%s[%r]" % (var, section)
        if section not in SECTIONS:
            errors.append("%s: section %s is not accepted; use one of %s." % (var, _describe(section), ", ".join(SECTIONS)))
            continue
        if not isinstance(directives, Mapping):
            errors.append("%s must be a dict of directive name to value; got %s." % (where, _describe(directives)))
            continue
        for key, val in directives.items():
            errors += _directive_errors(where, section, key, val)
    return errors


def _directive_errors(where: str, section: str, key: Any, val: Any) -> List[str]:
    if not isinstance(key, str) or not DIRECTIVE_RE.fullmatch(key):
        return ["%s: directive name %s is not a systemd directive name (a letter, then letters and digits,"
                " e.g. LimitNPROC)." % (where, _describe(key))]
    if key in OWNED:
        return ["%s: %s is set by the role; set %s instead." % (where, key, OWNED[key])]
    if key not in ALLOWED.get(section, ()):
        return ["%s: %s is not accepted: an extra directive may order, limit, schedule or tighten the service, never"
                " weaken its sandbox, run a command, or change who it runs as or where its output goes. Accepted in"
                " [%s]: %s." % (where, key, section, ", ".join(sorted(ALLOWED.get(section, ()))))]
    items = val if isinstance(val, list) else [val]
    errors = []  # type: List[str]
    if key == "ReadOnlyPaths" and any(render_value(i).strip() == "" for i in items if _is_scalar(i)):
        # An empty assignment resets the list: the models would lose the role's own ReadOnlyPaths.
        errors.append("%s[%r] has an empty value, which would reset the role's own ReadOnlyPaths (the models); "
                      "give only paths to add." % (where, key))
    for pos, item in enumerate(items):
        at = "%s[%r]%s" % (where, key, "[%d]" % pos if isinstance(val, list) else "")
        if not _is_scalar(item):
            errors.append("%s is %s; accepted are a string, number or boolean, or a list of them." % (at, _describe(item)))
        elif _CONTROL_RE.search(render_value(item)):
            errors.append("%s is %s: control characters (newlines, tabs, ...) are not accepted, a newline would"
                          " start another directive; put each value on its own list item." % (at, _describe(item)))
        elif render_value(item).endswith("\\"):
            errors.append("%s is %s: a trailing backslash would join the next line of the unit; remove it."
                          % (at, _describe(item)))
    return errors


def directive_lines(value: Any, section: str) -> List[str]:
    """``Key=value`` lines for one section, in the user's order (validated by preflight)."""
    lines = []  # type: List[str]
    for key, val in ((value or {}).get(section) or {}).items():
        for item in val if isinstance(val, list) else [val]:
            lines.append("%s=%s" % (key, render_value(item)))
    return lines


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _clean(path: Any) -> Optional[str]:
    """An absolute path without a trailing slash, or None for anything else (ignored). A path with
    spaces is kept: the unit quotes it (unit_path_word)."""
    if not isinstance(path, str) or not path.startswith("/") or _CONTROL_RE.search(path):
        return None
    return path.rstrip("/") or "/"


# A path written into ReadWritePaths=/ReadOnlyPaths= is one word of a list that systemd splits at
# whitespace, unquotes and C-unescapes, after expanding % specifiers.
_NEEDS_QUOTES = re.compile(r"[\s\"'\\]")


def unit_path_word(path: str, prefix: str = "") -> str:
    """``path`` (after ``prefix``, e.g. "-") as one word of a unit's path list: ``%`` doubled, and
    quoted with its backslashes and double quotes escaped only when it holds whitespace, a quote or
    a backslash, so that a plain path renders as it always did (no unit change, no restart)."""
    word = prefix + path.replace("%", "%%")
    if _NEEDS_QUOTES.search(word):
        word = '"%s"' % word.replace("\\", "\\\\").replace('"', '\\"')
    return word


def service_paths(home: str, model_paths: Sequence[Any], environment: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """What the sandbox must leave reachable, and how ProtectHome must be set for it.

    * read_write: the home (Triton, FlashInfer, DeepGEMM, CUDA and Hugging Face
      caches default below it) and caches moved elsewhere by sglang_environment;
    * read_only: the model paths, so that a model kept below the home cannot be
      rewritten by the server that reads it;
    * protect_home: ``true`` hides /home, /root and /run/user; ``read-only``
      when a path the server needs lies below them.

    Only the names of CACHE_ENV_VARS are read from the environment, never any
    other value: the environment holds secrets and the unit is world-readable.
    """
    read_write = [p for p in [_clean(home)] if p]
    for name in CACHE_ENV_VARS:
        path = _clean((environment or {}).get(name))
        if path and path not in read_write and not _under(path, read_write[:1]):
            read_write.append(path)
    read_only = []  # type: List[str]
    for path in (_clean(p) for p in model_paths):
        if path and path not in read_only:
            read_only.append(path)
    needed = read_write + read_only
    return {
        "read_write": read_write,
        "read_only": read_only,
        # As the unit writes them: the home must exist, a moved cache may not yet ("-"), models are
        # checked by preflight, not at every start ("-").
        "read_write_words": [unit_path_word(p, "-" if n else "") for n, p in enumerate(read_write)],
        "read_only_words": [unit_path_word(p, "-") for p in read_only],
        "protect_home": "read-only" if any(_under(p, _HOME_ROOTS) for p in needed) else "true",
    }
