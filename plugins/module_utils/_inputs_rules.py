# -*- coding: utf-8 -*-
"""The input contract's rules for single variables: (var, value, all values) -> messages.

A rule that quotes what is accepted in its messages takes that text as a fourth
argument, from the table (``accepting`` in _inputs_values): the table in
_inputs says it once, for the input guide and the messages alike. Rules that
judge several variables together (the wheelhouse and the release, the speculative
triple, the home and the state directory) read the others from ``values``. Stdlib only.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import re
from typing import Any, Callable, List, Mapping

from ansible_collections.fleetops.sglang.plugins.module_utils import _anchors
from ansible_collections.fleetops.sglang.plugins.module_utils import _hostaudit
from ansible_collections.fleetops.sglang.plugins.module_utils import _service
from ansible_collections.fleetops.sglang.plugins.module_utils import _releases
from ansible_collections.fleetops.sglang.plugins.module_utils import _speculative
from ansible_collections.fleetops.sglang.plugins.module_utils._extra_args import secret_flag, secret_flag_error
from ansible_collections.fleetops.sglang.plugins.module_utils._inputs_values import (
    ENV_KEY_RE,
    FIRST_SUPPORTED,
    HOSTNAME_RE,
    LIVE_PROMPTS,
    POSIX_NAME_RE,
    SGLANG_HEALTH_CHECK_SECONDS,
    SHA256_RE,
    UNIT_NAME_RE,
    URL_CREDENTIALS_RE,
    URL_RE,
    VERSION_RE,
    as_int,
    as_number,
    check_str_list,
    message,
    path_errors,
    shown,
    version_key,
    without_credentials,
)

# --------------------------------------------------------------------------- #
# Checkers for single variables
# --------------------------------------------------------------------------- #


def check_version(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
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


def check_install_source(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    # The value itself is one of the choices: argument_specs refuses anything else first.
    wheelhouse = values.get("sglang_wheelhouse", "")
    if value == "wheelhouse" and not wheelhouse:
        return ['%s=%s (sglang_wheelhouse=%s): use "index" (optionally with sglang_pip_index_url) or '
                '"wheelhouse" with sglang_wheelhouse set to a directory on the controller.'
                % (var, shown(value), shown(wheelhouse) if wheelhouse else "")]
    return []


def check_index_url(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    if value == "":
        return []
    if not isinstance(value, str) or not URL_RE.match(value):
        # The URL may hold credentials: the message shows it without them.
        return [message(var, without_credentials(value) if isinstance(value, str) else value,
                        "is not an index URL", accepted)]
    return []


def check_pip_extra_args(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    """A list of strings, none holding a URL with credentials: pip's argv is readable by every local
    user while it runs and lands in the run's logs (the module's invocation, the change set)."""
    errors = check_str_list(var, value, values)
    if errors:
        return [without_credentials(e) for e in errors]
    return ["%s[%d]=%s holds credentials (user:password@ in a URL); pip's arguments are readable by every local "
            "user while it runs and land in the run's logs: give that index as sglang_pip_index_url (written to a "
            "0600 pip configuration file, never to argv), or keep its credentials in root's ~/.netrc on the hosts."
            % (var, pos, shown(without_credentials(item))) for pos, item in enumerate(value)
            if URL_CREDENTIALS_RE.search(item)]


def check_wheelhouse(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    if not isinstance(value, str):
        return [message(var, value, "is not a string", accepted)]
    if value and values.get("sglang_install_source") == "wheelhouse" and not os.path.isdir(value):
        return [message(var, value, "is not a directory on the controller", accepted)]
    return []


def check_hashes(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    if not isinstance(value, (list, tuple)):
        return [message(var, value, "is not a list", accepted)]
    return [message("%s[%d]" % (var, pos), item, "is not a sha256 hex digest", accepted)
            for pos, item in enumerate(value) if not (isinstance(item, str) and SHA256_RE.match(item))]


def check_release_anchors(_var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    """Releases the collection does not anchor, in the shape of its own table: each error names the entry."""
    return _anchors.extra_errors(value)


def check_pip_lock(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    """A lock of the release's whole closure, read on the controller: each line one package pinned with its
    hashes, sglang at sglang_version, and no second source of hashes (sglang_pip_hashes)."""
    if value == "":
        return []
    if not isinstance(value, str) or not os.path.isabs(value):
        return [message(var, value, "is not an absolute path", accepted)]
    try:
        with open(value, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        return [message(var, value, "cannot be read on the controller (%s)" % exc.strerror, accepted)]
    if values.get("sglang_pip_hashes"):
        return [message(var, value, "is given with sglang_pip_hashes: the lock holds sglang's hashes too; give one "
                        "of them (sglang_pip_hashes: [])", accepted)]
    version = values.get("sglang_version")
    return [message(var, value, problem, accepted) for problem in
            _releases.lock_errors(text, str(version))[:5]]


def check_layer_ids(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    return _speculative.validate_layer_ids(value, var=var)


def check_pp_size(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    if as_int(value) != 1:
        return ["%s=%s: with pipeline parallelism the embedding output lives on the first rank while the "
                "draft's hidden states are captured on the last, so the patched wiring cannot work. Use "
                "sglang_pp_size: 1 (tensor parallelism is fine)." % (var, shown(value))]
    return []


def check_speculative_triple(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
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


def judged_with_num_steps(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    """Part of the speculative triple, which _speculative_triple judges as a whole."""
    return []


def check_host(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    if isinstance(value, str):
        try:
            ipaddress.ip_address(value)
            return []
        except ValueError:
            # All-digit labels would be a mistyped address, not a name (RFC 1123).
            if HOSTNAME_RE.match(value) and not re.match(r"^[0-9.]+$", value):
                return []
    return [message(var, value, "is not an IP address or host name", accepted)]


def check_mem_fraction(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    if value is None:
        return []
    number = as_number(value)
    if number is None or isinstance(value, bool) or not 0 < number < 1:
        return [message(var, value, "is not a number between 0 and 1", accepted)]
    return []


def check_service_name(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    if not isinstance(value, str) or not UNIT_NAME_RE.match(value) or value.endswith(".service"):
        return [message(var, value, "is not a systemd unit name", accepted)]
    return []


def check_account(kind: str) -> Callable[..., List[str]]:
    def check(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
        if not isinstance(value, str) or not POSIX_NAME_RE.match(value):
            return [message(var, value, "is not a valid POSIX %s name" % kind, accepted)]
        if value == "root":
            # The role creates the account as a system account with a nologin shell and
            # sglang_home as home: pointed at root it would rewrite root's own entry.
            return [message(var, value, "is root, whose account the role would rewrite (nologin shell, "
                            "home %s)" % "sglang_home", accepted)]
        return []
    return check


# What root installs, reads or runs on the host: the service user, who owns sglang_home and everything
# below it, must not be able to rewrite it (sglang_state_dir has its own rule above: the two stay apart).
_ROOTS_PATHS = ("sglang_venv", "sglang_releases_dir", "sglang_wheelhouse_remote", "sglang_python")


def check_home(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    errors = path_errors(var, value, accepted, unit_safe=True, own_directory=True)
    state = values.get("sglang_state_dir")
    if not errors and isinstance(state, str) and state.startswith("/"):
        a, b = value.rstrip("/") + "/", state.rstrip("/") + "/"
        if a.startswith(b) or b.startswith(a):
            errors.append(message(var, value, "overlaps sglang_state_dir=%s (root-only backups and the service "
                                  "user's writable home must stay apart)" % state, accepted))
    if errors:
        return errors
    home = value.rstrip("/") + "/"
    for other in _ROOTS_PATHS:
        path = values.get(other)
        if isinstance(path, str) and path.startswith("/") and (path.rstrip("/") + "/").startswith(home):
            errors.append(message(var, value, "holds %s=%s: the home is the service user's to write, so that user "
                                  "could rewrite what root installs and runs there; keep the home apart (e.g. "
                                  "sglang_home=/var/lib/sglang) or move %s out of it" % (other, path, other), accepted))
    return errors


def check_state_dir(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    errors = path_errors(var, value, accepted, unit_safe=False, own_directory=True)
    venv = values.get("sglang_venv")
    if not errors and isinstance(venv, str) and (value.rstrip("/") + "/").startswith(venv.rstrip("/") + "/"):
        errors.append(message(var, value, "is inside sglang_venv=%s, which a reinstall replaces" % venv,
                              accepted))
    return errors


def check_releases_dir(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    """Beside sglang_venv (the link to one of them), neither inside the other, apart from the state directory."""
    errors = path_errors(var, value, accepted, unit_safe=True, own_directory=True)
    if errors:
        return errors
    mine = value.rstrip("/") + "/"
    for other, why in (("sglang_venv", "the link to the release that serves"),
                       ("sglang_state_dir", "root's backups, leases and change sets")):
        path = values.get(other)
        if isinstance(path, str) and path.startswith("/"):
            theirs = path.rstrip("/") + "/"
            if mine.startswith(theirs) or theirs.startswith(mine):
                errors.append(message(var, value, "overlaps %s=%s (%s); keep the releases beside it, e.g. "
                                      "sglang_releases_dir=/opt/sglang/releases" % (other, path, why), accepted))
    return errors


def check_server_command(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    if not isinstance(value, str) or not value.strip():
        return [message(var, value, "is not a command", accepted)]
    if not value.split()[0].startswith("/"):
        return [message(var, value, "does not start with an absolute program path", accepted)]
    if "%" in value:
        return [message(var, value, "holds %, which systemd expands as a specifier in ExecStart=", accepted)]
    if "$" in value:
        return [message(var, value, "holds $, which systemd expands from the environment file (secrets included) "
                        "in ExecStart=", accepted)]
    return []


# Set by the role where a key is set (templates/sglang.env.j2): SGLang logs its server args, keys included,
# unless its logging configuration quiets the loggers that do.
LOGGING_CONFIG_ENV = "SGLANG_LOGGING_CONFIG_PATH"


def check_environment(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    """Keys and values of the 0600 environment file; values are never shown (secrets)."""
    if not isinstance(value, Mapping):
        return ["%s is a %s, not a mapping; accepted: %s." % (var, _kind(value), accepted)]
    errors = []
    keyed = any(isinstance(values.get(k), str) and values.get(k) for k in ("sglang_api_key", "sglang_admin_api_key"))
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_KEY_RE.match(key):
            errors.append(message("%s key" % var, key, "is not an environment variable name", accepted))
            continue
        where = "%s.%s" % (var, key)
        if key == LOGGING_CONFIG_ENV and keyed:
            errors.append("%s is set, but with sglang_api_key or sglang_admin_api_key the role sets it: SGLang logs its "
                          "server args, the keys in them, unless its logging configuration (the role's) quiets the "
                          "loggers that print them; remove %s from %s." % (where, key, var))
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            errors.append("%s is a %s (value not shown: it may be a secret); accepted: %s." % (where, _kind(item), accepted))
        elif isinstance(item, str) and any(ord(c) > 126 for c in item):
            # to_json writes \\uXXXX, which systemd's EnvironmentFile= keeps literally.
            errors.append("%s holds a non-ASCII character (value not shown: it may be a secret), which the "
                          "environment file cannot carry unchanged; accepted: %s." % (where, accepted))
    return errors


def check_api_key(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    """A server key: what an HTTP Authorization header carries as one Bearer token. Never shown."""
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        return ["%s is a %s (value not shown: it is a secret); accepted: %s." % (var, _kind(value), accepted)]
    if not 8 <= len(value) <= 512:
        return ["%s is %d characters long (value not shown: it is a secret); accepted: %s." % (var, len(value), accepted)]
    if any(not 33 <= ord(c) <= 126 for c in value):
        return ["%s holds a space or a character outside printable ASCII (value not shown: it is a secret), which "
                "an Authorization header cannot carry as one token; accepted: %s." % (var, accepted)]
    return []


def check_extra_args(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    """A list of strings, none of them a key flag (the release's own table judges the rest on the host)."""
    errors = check_str_list(var, value, values)
    if errors:
        return errors
    for pos, arg in enumerate(value):
        secret = secret_flag(arg)
        if secret is not None:
            errors.append(secret_flag_error(var, pos, secret[0], secret[1]) + ".")
    return errors


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return next((t for t in type(value).__mro__ if t.__module__ == "builtins"), type(value)).__name__


def check_hook(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    if value == "":
        return []
    if not isinstance(value, str) or not os.path.isabs(value):
        return [message(var, value, "is not an absolute path", accepted)]
    if not os.path.isfile(value):
        # Found missing only just before the restart, after the unit was written.
        return [message(var, value, "does not exist on the controller", accepted)]
    return []


def check_request_timeout(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    number = as_int(value)
    if number is None or number <= SGLANG_HEALTH_CHECK_SECONDS:
        return [message(var, value, "is not above SGLang's %d s server-side health check"
                        % SGLANG_HEALTH_CHECK_SECONDS, accepted)]
    return []


def check_live_requests(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    limit = int(values.get("_live_prompts", LIVE_PROMPTS))
    number = as_int(value)
    if number is None or not 1 <= number <= limit:
        return [message(var, value, "is out of range (the role has %d prompts)" % limit, accepted)]
    return []


def check_accept_length(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    number = as_number(value)
    if number is None or isinstance(value, bool) or number < 0:
        return [message(var, value, "is not a number >= 0", accepted)]
    tokens = as_int(values.get("sglang_speculative_num_draft_tokens"))
    if tokens is not None and number > tokens:
        # A step accepts at most every verified token: the gate could never pass.
        return [message(var, value, "is above sglang_speculative_num_draft_tokens=%d, the most tokens a step "
                        "can accept, so every gate would fail" % tokens, accepted)]
    return []


def check_extra_directives(var: str, value: Any, _values: Mapping[str, Any]) -> List[str]:
    # The rules live with the unit's other sandbox logic (_service).
    return _service.validate_extra_directives(value, var=var)


def check_audit_interval(var: str, value: Any, values: Mapping[str, Any]) -> List[str]:
    number = as_int(value)
    if number is None or isinstance(value, bool):
        return [message(var, value, "is not a whole number of seconds", _hostaudit.INTERVALS)]
    try:
        _hostaudit.calendar(number)
    except ValueError:
        return [message(var, value, "does not repeat on the clock (the timer's OnCalendar, which Persistent= needs)",
                        _hostaudit.INTERVALS)]
    return []


def check_audit_jitter(var: str, value: Any, values: Mapping[str, Any], accepted: str) -> List[str]:
    number, interval = as_int(value), as_int(values.get("sglang_audit_timer_interval", 900))
    if number is None or isinstance(value, bool) or number < 0 or (interval is not None and number >= interval):
        return [message(var, value, "is not from 0 to less than sglang_audit_timer_interval=%s, so that one run "
                        "never slides into the next" % values.get("sglang_audit_timer_interval", 900), accepted)]
    return []


def check_textfile_path(var: str, value: Any, _values: Mapping[str, Any], accepted: str) -> List[str]:
    errors = path_errors(var, value, accepted, unit_safe=True)
    if errors:
        return errors
    if not value.endswith(".prom") or value.endswith("/.prom"):
        # node_exporter's textfile collector reads only *.prom files.
        return [message(var, value, "does not name a *.prom file", accepted)]
    return []
