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
``scripts/variable-table`` prints the accepted column of the input guide's table from it).
Messages read ``<var>=<value> <problem>; <what is accepted>.`` The checkers by kind
and the helpers live in ``_inputs_values``, the rules for single variables in
``_inputs_rules``.

Stdlib only, no Ansible import: the filter and pytest import it as
``ansible_collections.fleetops.sglang.plugins.module_utils._inputs``.
"""

from __future__ import annotations

import difflib
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.fleetops.sglang.plugins.module_utils import _hostaudit
from ansible_collections.fleetops.sglang.plugins.module_utils._inputs_rules import (
    check_accept_length,
    check_account,
    check_audit_interval,
    check_audit_jitter,
    check_api_key,
    check_environment,
    check_extra_args,
    check_extra_directives,
    check_hashes,
    check_release_anchors,
    check_home,
    check_hook,
    check_host,
    check_index_url,
    check_pip_extra_args,
    check_pip_lock,
    check_install_source,
    check_layer_ids,
    check_live_requests,
    check_mem_fraction,
    check_pp_size,
    check_releases_dir,
    check_request_timeout,
    check_server_command,
    check_service_name,
    check_speculative_triple,
    check_state_dir,
    check_textfile_path,
    check_version,
    check_wheelhouse,
    judged_with_num_steps,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._inputs_values import (
    ACCEPTED_BOOL,
    FIRST_SUPPORTED,
    LIVE_PROMPTS,
    SGLANG_HEALTH_CHECK_SECONDS,
    Variable,
    accepting,
    check_bool,
    check_choice,
    check_int_range,
    check_path,
    control_characters,
    message,
)

_HOST_PATH = "an absolute path on the host, without . or .. components"
_UNIT_PATH = _HOST_PATH + ", spaces, quotes, % $ ; or \\"
_OWN_DIR = ", not a system directory such as / /etc /usr /var/lib"
_API_KEY = '"" (none) or 8 to 512 printable ASCII characters without spaces (one Bearer token)'

VARIABLES: Dict[str, Variable] = {
    "sglang_version": Variable('a release string "X.Y.Z[.postN]", quoted, ' + FIRST_SUPPORTED + " or later", check_version),
    "sglang_venv": Variable(_UNIT_PATH + _OWN_DIR, check_path(_UNIT_PATH + _OWN_DIR, unit_safe=True, own_directory=True)),
    "sglang_releases_dir": accepting(
        _UNIT_PATH + _OWN_DIR + ", on sglang_venv's file system, neither inside sglang_venv nor holding it, apart "
        "from sglang_state_dir", check_releases_dir),
    "sglang_releases_keep": Variable("an integer of at least 2 (the release that serves and one to switch back to)",
                                     check_int_range(2)),
    "sglang_python": Variable(_UNIT_PATH, check_path(_UNIT_PATH, unit_safe=True)),
    "sglang_install_source": Variable('"index" or "wheelhouse" (then sglang_wheelhouse is required)', check_install_source),
    "sglang_pip_index_url": accepting('"" or an http://, https:// or file:// URL without spaces', check_index_url),
    "sglang_wheelhouse": accepting('"" or a directory on the controller holding sglang-<version>-*.whl', check_wheelhouse),
    "sglang_wheelhouse_remote": Variable(_UNIT_PATH + _OWN_DIR,
                                         check_path(_UNIT_PATH + _OWN_DIR, unit_safe=True, own_directory=True)),
    "sglang_pip_hashes": accepting("a list of sha256 hex digests (64 hex characters, no sha256: prefix)", check_hashes),
    "sglang_pip_lock": accepting('"" or the absolute path, on the controller, of a requirements file that pins every '
                                 "package of the release's closure with ==, each with --hash=sha256:, sglang at "
                                 "sglang_version, and no pip option", check_pip_lock),
    "sglang_release_anchors": Variable(
        "{} or a mapping of release -> {file: sha256, or null when not shipped} for each file the role patches or "
        "verifies, for releases the collection does not anchor (scripts/anchors VERSION prints one)",
        check_release_anchors),
    "sglang_pip_no_deps": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_pip_extra_args": Variable("a list of strings, one item per argument, no URL with credentials",
                                      check_pip_extra_args),
    "sglang_eagle3_layer_ids": Variable(
        "distinct ascending integers, -1 (the embedding output) only first, each at most num_hidden_layers - 2 "
        "of the target (the last layer's output is never captured)", check_layer_ids),
    "sglang_pp_size": Variable("1", check_pp_size),
    "sglang_state_dir": accepting(_HOST_PATH + _OWN_DIR + ", outside sglang_venv and sglang_home", check_state_dir),
    "sglang_model_path": Variable(_HOST_PATH + "; its config.json must name a DeepseekV2/V3/V32 architecture",
                                  check_path(_HOST_PATH)),
    "sglang_draft_model_path": Variable(_HOST_PATH, check_path(_HOST_PATH)),
    "sglang_speculative_algorithm": Variable("EAGLE3", check_choice("EAGLE3")),
    "sglang_speculative_num_steps": Variable(
        "a positive integer; with topk 1 exactly draft tokens - 1", check_speculative_triple),
    "sglang_speculative_eagle_topk": Variable("a positive integer", judged_with_num_steps),
    "sglang_speculative_num_draft_tokens": Variable(
        "a positive integer; with topk 1 exactly num_steps + 1, else at most the draft tree's capacity",
        judged_with_num_steps),
    "sglang_tp_size": Variable("a positive integer", check_int_range(1)),
    "sglang_host": accepting("an IPv4 or IPv6 address or a host name", check_host),
    "sglang_port": Variable("an integer from 1 to 65535", check_int_range(1, 65535)),
    "sglang_mem_fraction_static": accepting("null or a number between 0 and 1 (both excluded)", check_mem_fraction),
    "sglang_disable_cuda_graph": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_trust_remote_code": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_enable_metrics": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_extra_args": Variable("a list of strings, one item per argument; no --api-key or --admin-api-key "
                                  "(sglang_api_key, sglang_admin_api_key)", check_extra_args),
    "sglang_service_manage": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_service_name": accepting("a systemd unit name without .service: letters, digits, _ . : -", check_service_name),
    "sglang_user": accepting("a POSIX user name ([a-z_][a-z0-9_-]*, at most 32 characters), not root",
                             check_account("user")),
    "sglang_group": accepting("a POSIX group name ([a-z_][a-z0-9_-]*, at most 32 characters), not root",
                              check_account("group")),
    "sglang_home": accepting(_UNIT_PATH + _OWN_DIR + ", apart from sglang_state_dir, and holding none of "
                             "sglang_venv, sglang_wheelhouse_remote, sglang_python", check_home),
    "sglang_server_command": accepting("an absolute program path then its arguments, without % or $", check_server_command),
    "sglang_environment": accepting(
        "a mapping of names [A-Za-z_][A-Za-z0-9_]* to strings or numbers, printable ASCII", check_environment),
    "sglang_api_key": accepting(_API_KEY, check_api_key),
    "sglang_admin_api_key": accepting(_API_KEY + "; needs SGLang 0.5.8 or later", check_api_key),
    "sglang_start_timeout": Variable("a positive integer (seconds)", check_int_range(1)),
    "sglang_restart_on_change": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_adopt_running": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_keep_failed_drained": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_pre_restart_tasks": accepting('"" or the absolute path of a task file on the controller', check_hook),
    "sglang_post_restart_tasks": accepting('"" or the absolute path of a task file on the controller', check_hook),
    "sglang_audit": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_fast_path": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_audit_memo": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_health_timeout": Variable("a positive integer (seconds)", check_int_range(1)),
    "sglang_health_request_timeout": accepting(
        "an integer above %d (seconds)" % SGLANG_HEALTH_CHECK_SECONDS, check_request_timeout),
    "sglang_live_gate_requests": accepting("an integer from 1 to %d (the role's prompts)" % LIVE_PROMPTS,
                                           check_live_requests),
    "sglang_accept_length_min": accepting("a number from 0 (off) to sglang_speculative_num_draft_tokens",
                                          check_accept_length),
    "sglang_rollback_on_failure": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_defer_failure": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_lock_timeout": Variable("an integer >= 0 (seconds; 0 fails at once)", check_int_range(0)),
    "sglang_lock_ttl": Variable("a positive integer (seconds)", check_int_range(1)),
    "sglang_lock_stale_seconds": Variable("a positive integer (seconds)", check_int_range(1)),
    "sglang_service_hardening": Variable('"default" or "strict" (verify "strict" on one canary GPU host first)',
                                         check_choice("default", "strict")),
    "sglang_service_extra_directives": Variable(
        "a mapping of section (Unit, Service, Install) to directive names [A-Za-z][A-Za-z0-9]* to a value or a "
        "list of values, each directive one the section accepts (guide_hardening), no trailing backslash",
        check_extra_directives),
    "sglang_live_check": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_live_probe_requests": Variable("an integer from 0 (server info only) to %d (the role's prompts)"
                                           % LIVE_PROMPTS, check_int_range(0, LIVE_PROMPTS)),
    "sglang_live_probe_tokens": Variable("an integer from 1 to 1024", check_int_range(1, 1024)),
    "sglang_metrics_textfile": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_metrics_textfile_path": accepting(_UNIT_PATH + ", ending in .prom", check_textfile_path),
    "sglang_audit_timer": Variable(ACCEPTED_BOOL, check_bool),
    "sglang_audit_timer_interval": Variable(_hostaudit.INTERVALS, check_audit_interval),
    "sglang_audit_timer_jitter": accepting("whole seconds, from 0 to less than sglang_audit_timer_interval",
                                           check_audit_jitter),
}

# The sglang_* names that are not the role's variables but are read where they are set: the fleet
# playbooks' (remediate, audit, rollback), the example drain hooks', and the facts the role itself
# sets on a host. Any other sglang_* name is a mistake: Ansible would ignore it without a word.
# The role's phase tags before 2.0.0, kept on the same tasks as aliases of the prefixed ones
# (sglang_install, ...) until 3.0.0; a run that selects or skips one is told so.
DEPRECATED_TAGS = ("preflight", "install", "patch", "verify", "configure", "restart", "restore", "report")


def deprecated_tag_messages(run_tags, skip_tags) -> List[str]:
    """One message per bare phase tag given to --tags or --skip-tags, naming its replacement."""
    given = [t for t in list(run_tags or []) + list(skip_tags or []) if t in DEPRECATED_TAGS]
    return ["the role's tag %r is now %r; the bare name goes in fleetops.sglang 3.0.0" % (t, "sglang_" + t)
            for t in sorted(set(given))]


OTHER_NAMES: Dict[str, str] = {
    "sglang_serial": "the playbooks' batch sizes",
    "sglang_max_fail_percentage": "the playbooks' failure limit",
    "sglang_any_errors_fatal": "the playbooks' any_errors_fatal",
    "sglang_target_hosts": "the playbooks' host pattern",
    "sglang_skip_hosts": "the playbooks' known-out hosts (with the group sglang_maintenance)",
    "sglang_max_unavailable": "the playbooks' bound on hosts out of rotation at once",
    "sglang_canary_by": "the playbooks' canary per group (a group or host variable)",
    "sglang_soak_seconds": "the playbooks' soak between rollout steps",
    "sglang_on_soak_failure": "what the rollout does when a soak fails (stop or rollback)",
    "sglang_rollout_lookahead": "the hosts that prepare while every slot of the rollout's window is taken",
    "sglang_rollout_stop_file": "the file whose presence stops the rollout's window",
    "sglang_rollout_window": "the rollout's window, a play variable of playbooks/remediate.yml",
    "sglang_rollout_stage": "the part of the rollout a job makes (all, canaries, after_canaries)",
    "sglang_rollout_id": "the id the fleet reports of one rollout's jobs share (playbooks/report_merge.yml)",
    "sglang_report_merge_sources": "playbooks/report_merge.yml's reports to merge",
    "sglang_report_merge_dest": "playbooks/report_merge.yml's output directory",
    "sglang_report_merge_hosts": "playbooks/report_merge.yml's hosts the merged report must hold",
    "sglang_lease_break_reason": "why playbooks/lease_break.yml frees a host (recorded on it)",
    "sglang_fleet_report": "how a play takes part in the fleet report (true: a batch, pass: the whole fleet)",
    "sglang_drain_flag": "the example drain hooks' flag file",
    "sglang_drain_seconds": "the example drain hook's wait",
    "sglang_remediation": "the host's report row, a fact the role sets",
    "sglang_live_metrics": "the gate's reading, a fact the role sets",
}


# The inventory's replicas (plugins/plugin_utils/_replicas.py reads them: the rollout's unit). Read by
# playbooks/remediate.yml and audit.yml (tasks/replicas.yml), whose rollout restarts a replica's nodes
# together; refused by name anywhere else (the role's main entry point, a playbook of one's own),
# which would restart each node on its own and take the replica down once per node.
REPLICA_NAMES = ("sglang_replica", "sglang_node_rank", "sglang_nnodes", "sglang_node_addr",
                 "sglang_dist_init_addr", "sglang_dist_init_port")
_REPLICAS_NOT_READ = ("%s names a node of a multi-node replica (--nnodes), whose nodes must stop and start together: "
                      "playbooks/remediate.yml reads the inventory's replicas and rolls each out whole (audit.yml "
                      "reads them too); this entry point (the role's main, or a playbook of your own) would restart "
                      "each node on its own and take the replica down once per node. Run playbooks/remediate.yml, "
                      "or remove %s.")


def unknown_variables(names: Sequence[str], replicas_read: bool = False) -> List[str]:
    """One error per sglang_* name the role neither reads nor sets, naming the nearest known one.

    A typo (sglang_speculative_numsteps for sglang_speculative_num_steps) is the commonest bad
    input of a fleet inventory, and the role would run on the default without a word.
    """
    errors = [] if replicas_read else [_REPLICAS_NOT_READ % (name, name) for name in REPLICA_NAMES if name in names]
    for name in sorted(n for n in names if n.startswith("sglang_") and n not in VARIABLES and n not in OTHER_NAMES
                       and n not in REPLICA_NAMES):
        near = nearest_name(name)
        errors.append("%s is not a variable of the role, so its value would be ignored%s; accepted: the variables "
                      "of the input guide's table (docs/docsite/rst/guide_inputs.rst: the role's own; the "
                      "playbooks' in guide_fleet.rst), each spelled as there."
                      % (name, "; did you mean %s?" % near if near else ""))
    return errors


def nearest_name(name: str) -> Optional[str]:
    """The known name ``name`` most likely misspells: one it abbreviates (the shortest), else the
    closest by difflib on what follows the common ``sglang_`` prefix; None when nothing is close."""
    known = sorted(set(VARIABLES) | set(OTHER_NAMES) | set(REPLICA_NAMES))
    longer = sorted((k for k in known if k.startswith(name)), key=len)
    if longer:
        return longer[0]
    tails = {k[len("sglang_"):]: k for k in known}
    near = difflib.get_close_matches(name[len("sglang_"):], list(tails), n=1, cutoff=0.6)
    return tails[near[0]] if near else None


# Control characters are refused everywhere; the environment's values are not shown.
_SECRET = ("sglang_environment", "sglang_api_key", "sglang_admin_api_key")
NO_CONTROL = ("no control characters in any value (newline, carriage return, tab, NUL and the other C0 "
              "characters): systemd's line syntax would read what follows as a new line or directive")


def variable_errors(values: Mapping[str, Any], live_prompts: int = LIVE_PROMPTS,
                    names: Optional[Sequence[str]] = None, replicas_read: bool = False) -> List[str]:
    """Every reason the role's variables cannot work, in the order of ``VARIABLES``.

    ``values`` holds the role's variables by name; a variable that is absent is not
    judged, and an sglang_* name that is neither the role's nor one of ``OTHER_NAMES``
    is refused (unless ``names`` limits the check to some variables). ``live_prompts`` is how many prompts
    the live gate has. Control characters are looked for first and alone: a value
    that could inject a systemd directive is not judged further.
    """
    context = dict(values)
    context["_live_prompts"] = live_prompts
    errors: List[str] = unknown_variables(list(values), replicas_read) if names is None else []
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
    """What is accepted for ``name``, for the input guide's variable table."""
    return VARIABLES[name].accepted
