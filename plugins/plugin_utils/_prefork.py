# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every forked worker would otherwise load for itself, loaded once in the controller's main process.

ansible-core forks one worker per host and task, skipped tasks included, and a worker starts from
whatever its parent had loaded. The parent, unless a playbook happens to template a filter in it,
has loaded no Jinja plugin: so the first ``when`` or argument of every worker that names a filter or
a test loads every builtin filter and test plugin file again (``plugins/filter/core.py`` and the rest),
builds the Jinja lexer's regular expressions again, and imports the collection's filters again. On
2 cores that was about 16 ms of a skipped task's 28 ms of worker CPU, and 137 ms of the 158 ms of a task
with a collection filter (30 hosts; guide_performance.rst). tests/unit/plugins/plugin_utils/test_prefork.py
asks the workers themselves what they found loaded.

``warm_up`` does that work once, before the first worker forks (the collection's report callback
calls it from ``v2_playbook_on_start``), so every worker inherits it. It changes nothing a task
sees: the same plugins, loaded from the same files, only earlier. Anything it cannot do (another
ansible-core with other internals) it leaves to the workers, as before: it never fails a run.
"""
from __future__ import annotations

import importlib

# One expression that goes through what a worker's first conditional goes through: a filter, a
# test, the lexer, the compiler, the evaluation.
_EXPRESSION = "sglang_prefork_probe | default(true) is defined"
# The collection's filters, one file (plugins/filter/sglang.py), imported on first use otherwise.
_COLLECTION_FILTERS = "ansible_collections.fleetops.sglang.plugins.filter.sglang"

_done = False


def warm_up() -> bool:
    """Load the Jinja plugins, the lexer and the collection's filters in this process (once).

    Returns whether everything it tried was loaded; a step that fails is left to the workers."""
    global _done
    if _done:
        return True
    ok = True
    try:
        from ansible.template import Templar, trust_as_template

        # Public API: the filter and the test load every builtin filter and test file through the
        # plugin loaders, and the lexer is cached on the environment class for every later template.
        Templar(variables={}).evaluate_conditional(trust_as_template(_EXPRESSION))
    except Exception:  # pylint: disable=broad-except
        ok = False
    try:
        # Every task result is mapped onto its fields through one cached table, built per process.
        from ansible._internal._task import UnifiedTaskResult  # pylint: disable=import-outside-toplevel

        for source_is_module in (True, False):
            UnifiedTaskResult.get_result_key_to_resolved_field_mapping(source_is_module=source_is_module)
    except Exception:  # pylint: disable=broad-except
        ok = False
    try:
        importlib.import_module(_COLLECTION_FILTERS)
    except Exception:  # pylint: disable=broad-except
        ok = False
    _done = True
    return ok
