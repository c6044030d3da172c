# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of fleetops.sglang.sglang_probe: the whole fast path in one task per host.

Ansible forks a worker per host for every task, controller-only tasks included, so a
compliant host's cost is its task count. This action does the controller-side work
of the fast path in the probe's own worker, around the one remote call:

1. with ``role_checks``, the role's variables are checked before anything is rendered:
   against meta/argument_specs.yml (entry point main, as the role's own validation
   task does) and against the input rules of plugins/module_utils/_inputs.py,
   the same function, and so the same messages, as the preflight task;
2. ``files.<name>.template`` is rendered here (the template lookup, as the template
   task would) and only its sha256 goes to the host. The hosts of one run mostly share
   their inputs, so the sha256 is kept per exact input set (the template's source and
   the templated value of every variable it reads) in the run's local temporary
   directory, which its forked workers share; see ``RenderCache``;
3. the module runs on the host (one call, as without this plugin);
4. with ``report``, a compliant host gets its fleet report row (the
   ``sglang_remediation`` fact); with ``needs_work_group``, a host that needs more joins
   that group, which the rollout play targets.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile

import jinja2
from jinja2 import meta as jinja2_meta
from jinja2 import nodes as jinja2_nodes

from ansible import constants as C
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.text.converters import to_bytes
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase, VariableLayer
from ansible.plugins.loader import lookup_loader
from ansible.utils.display import Display
from ansible.utils.vars import combine_vars

from ansible_collections.fleetops.sglang.plugins.plugin_utils import _fastpath
from ansible_collections.fleetops.sglang.plugins.module_utils import _hostaudit, _inputs
from ansible_collections.fleetops.sglang.plugins.plugin_utils import _rows
from ansible_collections.fleetops.sglang.plugins.module_utils import _runmode
from ansible_collections.fleetops.sglang.plugins.module_utils._fingerprint import split_secret

display = Display()

MODULE = "fleetops.sglang.sglang_probe"
# Options this plugin consumes; the module on the host never receives them.
CONTROLLER_OPTIONS = ("role_checks", "report", "needs_work_group", "fast_path")


# Variables whose value is the whole inventory or play (no cache key can hold them), filters and
# global functions whose answer is not a function of their arguments: a template that uses any
# of them is rendered for every host.
UNCACHEABLE_NAMES = frozenset(("hostvars", "vars", "groups", "play_hosts", "ansible_play_hosts",
                               "ansible_play_hosts_all", "ansible_play_batch"))
IMPURE_FILTERS = frozenset(("random", "shuffle", "password_hash", "strftime", "random_mac"))
PURE_GLOBALS = frozenset(("range", "dict"))
# What the template lookup adds for the template itself: functions of the file, its owner, the
# controller's name and the managed string's setting, which the key holds instead of the values.
# template_run_date is the time of the render: a template that reads it is rendered every time.
TEMPLATE_VARS = frozenset(("ansible_managed", "template_host", "template_path", "template_mtime", "template_uid",
                           "template_destpath", "template_fullpath"))


class AnyName(dict):
    """A filter or test table that has every name (for the analysis of template_inputs only)."""

    def get(self, key, default=None):
        return any_value

    def __contains__(self, key):
        return True


def any_value(*args, **kwargs):
    return None


def template_inputs(source):
    """The free variables of a template's source, or None when its rendering is not a function
    of them alone (another template included, imported or extended; a global function such as
    lookup, query or now; an impure filter; a variable holding the inventory).

    Parsed with Jinja2's own parser: every name the template reads and does not set itself.
    """
    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do"])
    # Jinja2's analysis compiles the template, which needs every filter and test by name; only
    # the names matter here (Ansible's, the collections').
    env.filters, env.tests = AnyName(), AnyName()
    try:
        tree = env.parse(source)
        names = sorted(jinja2_meta.find_undeclared_variables(tree))
    except jinja2.TemplateError:
        return None
    # Another template pulled in (include, import, extends) reads variables and a source the key would not hold.
    if next(tree.find_all((jinja2_nodes.Include, jinja2_nodes.Import, jinja2_nodes.FromImport, jinja2_nodes.Extends)),
            None) is not None:
        return None
    for node in tree.find_all((jinja2_nodes.Filter, jinja2_nodes.Test, jinja2_nodes.Call)):
        if isinstance(node, jinja2_nodes.Call):
            if isinstance(node.node, jinja2_nodes.Name) and node.node.name not in PURE_GLOBALS:
                return None
        elif node.name.rsplit(".", 1)[-1] in IMPURE_FILTERS:
            return None
    if UNCACHEABLE_NAMES.intersection(names):
        return None
    return names


class RenderCache:
    """The sha256 of a rendered template per exact input set, shared by one run's forked workers.

    The key is the sha256 of the template's path and source and of the templated value of
    every variable the template reads (``template_inputs``), as JSON. A value JSON cannot
    hold exactly (a date, an object) makes the template uncacheable: it is rendered every
    time. Entries are files in ``directory`` (by default the run's local temporary
    directory, removed when the run ends), written whole with a rename, so a worker reads
    either nothing or a complete entry.
    """

    def __init__(self, directory=None):
        self.directory = directory or os.path.join(C.DEFAULT_LOCAL_TMP, "fleetops_sglang_render")

    @staticmethod
    def key(path, source, values):
        """The entry's name, or None when a value has no exact JSON form."""
        try:
            blob = json.dumps([path, source, values], sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            return None
        return hashlib.sha256(to_bytes(blob, errors="surrogate_or_strict")).hexdigest()

    def get(self, key):
        try:
            with open(os.path.join(self.directory, key)) as handle:
                value = handle.read()
        except OSError:
            return None
        return value if len(value) == 64 else None

    def put(self, key, value):
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            with os.fdopen(fd, "w") as handle:
                handle.write(value)
            os.replace(tmp, os.path.join(self.directory, key))
        except OSError:
            pass  # a cache that cannot be written only costs the next host a render

    def json_of(self, key, compute):
        """A JSON value kept under ``key`` (computed once per run): the parsed spec, a template's inputs."""
        path = os.path.join(self.directory, key)
        try:
            with open(path) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            pass
        value = compute()
        self.put(key, json.dumps(value))
        return value


def spec_errors(spec, values):
    """What the role's own argument validation (validate_argument_spec) would refuse.

    ``values``: the role's variables that the spec names, already templated.
    """
    result = ArgumentSpecValidator(spec).validate(values, validate_role_argument_spec=True)
    return list(result.error_messages)


def textfile_args(textfile, audit):
    """The textfile option with the run's mode as its label, unless the task gives one: the same
    mode the row of a host that ends here gets (plugins/module_utils/_runmode.py)."""
    return dict({"mode": _runmode.run_mode(audit)}, **dict(textfile))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    @classmethod
    def finalize_task_arg(cls, name, value, templar, context):
        """Leave the arguments as written: run() templates them after the role checks.

        A bad variable is then refused with its preflight message, not by the first
        argument expression it breaks (ansible-core 2.21, the oldest meta/runtime.yml allows).

        Not public API: ansible-core 2.21 marks ActionBase.finalize_task_arg experimental, and no
        public hook lets an action see its arguments before they are templated.
        """
        return value

    def _role_values(self, names, task_vars):
        """The named variables as the role sees them (templated), absent ones left out."""
        return self._templar.template({n: task_vars[n] for n in names if n in task_vars})

    def _main_spec(self, role):
        """The options of the role's entry point main, read from its meta/argument_specs.yml as it is shipped
        (through the loader's public API, once per run: the parsed options are kept in the run's cache)."""
        path = os.path.join(role.get_role_path(), "meta", "argument_specs.yml")
        if not os.path.isfile(path):
            return {}
        stat = os.stat(path)

        def load():
            data = self._loader.load_from_file(path) or {}
            return ((data.get("argument_specs") or {}).get("main") or {}).get("options") or {}

        key = "spec-" + hashlib.sha256(to_bytes("%s:%d:%d" % (path, stat.st_mtime_ns, stat.st_size))).hexdigest()
        return self._cache().json_of(key, load)

    def _cache(self):
        return RenderCache()

    def _role_errors(self, task_vars):
        """(message, errors) of the role's two checks, the first that fails; (None, []) when both pass."""
        role = self._task._role
        if role is not None:
            spec = self._main_spec(role)
            if spec:
                values = combine_vars(self._role_values(spec, task_vars), role.get_role_params())
                errors = spec_errors(spec, values)
                if errors:
                    return "Validation of arguments failed:\n%s" % "\n".join(errors), errors
        names = [n for n in task_vars if n.startswith("sglang_")]
        values = self._role_values(names, task_vars)
        prompts = self._templar.template(task_vars.get("_sglang_live_prompts", []))
        errors = _inputs.variable_errors(dict(values), live_prompts=len(prompts or []) or _inputs.LIVE_PROMPTS,
                                         replicas_read="_sglang_replicas" in task_vars)
        if errors:
            return " ".join(errors), errors
        return None, []

    def _render_sha256(self, template, task_vars):
        """sha256 of the role's template as the template task writes it (the content stays here).

        Rendered with the template lookup (as the template task renders it) once per exact
        input set of the run; the other hosts with the same inputs read its sha256 from the
        run's ``RenderCache``.
        """
        lookup = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
        key = self._render_key(lookup, template, task_vars)
        cache = self._cache()
        if key is not None:
            cached = cache.get(key)
            if cached is not None:
                return cached
        content = lookup.run([template], variables=task_vars)[0]
        digest = hashlib.sha256(to_bytes(content, errors="surrogate_or_strict")).hexdigest()
        if key is not None:
            cache.put(key, digest)
        return digest

    def _render_key(self, lookup, template, task_vars):
        """The cache key of this render (see RenderCache), or None when it must be rendered."""
        path = lookup.find_file_in_search_path(task_vars, "templates", template)
        if not path:
            return None  # the lookup's own render says that the file is missing
        with open(path, "rb") as handle:
            source = handle.read().decode("utf-8", errors="surrogateescape")
        cache = self._cache()
        names = cache.json_of("inputs-" + hashlib.sha256(to_bytes(source, errors="surrogate_or_strict")).hexdigest(),
                              lambda: template_inputs(source))
        if names is None:
            return None
        # What the lookup adds (ansible_managed and the template_* variables) unless a variable of the
        # same name is set: keyed by what the lookup derives them from.
        added = [n for n in names if n not in task_vars]
        if not TEMPLATE_VARS.issuperset(added):
            return None  # read through a default, a test of definedness or template_run_date: render it
        values = {name: self._templar.template(task_vars[name]) for name in names if name in task_vars}
        if added:
            managed = C.config.get_config_value("DEFAULT_MANAGED_STR")
            if "{{" in managed or "{%" in managed:
                return None
            stat = os.stat(path)
            values["(template lookup)"] = [template, stat.st_mtime_ns, stat.st_uid, os.uname()[1], managed]
        return RenderCache.key(path, source, values)

    def _join(self, group):
        """Put this host in ``group`` (the rollout's hosts), as group_by would.

        Not public API: ActionBase.add_group (and register_host_variables below) are experimental in
        ansible-core 2.21. The public way, a group_by and a set_fact task, costs two more tasks on every
        host of the probe pass; meta/runtime.yml bounds requires_ansible to the releases the suite runs."""
        self.add_group(group, parent_group_names=["all"])

    def _set_facts(self, facts):
        """The row as a host variable, as set_fact sets it (what report.yml sets for the other hosts)."""
        self.register_host_variables({}, VariableLayer.CACHEABLE_FACT)
        self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        role_checks = boolean(self._templar.template(args.pop("role_checks", False)), strict=False)
        report, fast_path, group = False, True, None

        if role_checks:
            tags = (task_vars.get("ansible_run_tags"), task_vars.get("ansible_skip_tags"))
            for message in _inputs.deprecated_tag_messages(*tags):
                display.deprecated(message, version="3.0.0", collection_name="fleetops.sglang")
            msg, errors = self._role_errors(task_vars)
            if msg:
                result.update(failed=True, msg=msg, errors=errors)
                return result
        args = self._templar.template(args)
        report = boolean(args.pop("report", report), strict=False)
        fast_path = boolean(args.pop("fast_path", fast_path), strict=False)
        group = args.pop("needs_work_group", group)

        files = {}
        for name, spec in (args.get("files") or {}).items():
            spec = dict(spec or {})
            if spec.get("template"):
                spec["sha256"] = self._render_sha256(spec.pop("template"), task_vars)
            files[name] = spec
        # A secret-bearing file's sha256 never in the module's shown arguments (AWX's job events, -vvv): its
        # no_log argument.
        args["files"], secret = split_secret(files)
        if secret:
            args["secret_sha256"] = secret
        audit = boolean(self._templar.template(task_vars.get("sglang_audit", False)), strict=False)
        if args.get("textfile"):
            args["textfile"] = textfile_args(args["textfile"], audit)
        if args.get("audit_timer"):
            # The host's audit timer judges it against this run's own arguments (no key, no secret file's hash).
            timer = dict(args["audit_timer"])
            timer["spec"] = _hostaudit.spec_of(args, timer)
            # Only for the spec: the module's option has no such key.
            timer.pop("textfile", None)
            args["audit_timer"] = result["audit_spec"] = timer

        if not fast_path and not args.get("live"):
            # Nothing to read on the host: with the fast path off every host takes the full role.
            result.update(changed=False, compliant=False, probed=False, ends_here=False)
            if group:
                self._join(group)
            return result

        result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        if result.get("failed"):
            return result
        # The one "a compliant host is done here" decision; tasks/main.yml reads it.
        result["ends_here"] = _fastpath.ends_here(result, fast_path)
        if result["ends_here"]:
            if report:
                flags = self._templar.template({
                    "num_steps": task_vars.get("sglang_speculative_num_steps"),
                    "eagle_topk": task_vars.get("sglang_speculative_eagle_topk"),
                    "num_draft_tokens": task_vars.get("sglang_speculative_num_draft_tokens"),
                })
                replica = self._templar.template(task_vars.get("_sglang_replica_name") or "")
                facts = {"sglang_remediation": _rows.probe_row(
                    task_vars.get("inventory_hostname"), str(args.get("expected_version")), result, flags,
                    audit=audit, check_mode=bool(self._task.check_mode or self._play_context.check_mode),
                    replica=replica or None)}
                self._set_facts(facts)
                result["ansible_facts"] = facts
        elif group:
            self._join(group)
        return result
