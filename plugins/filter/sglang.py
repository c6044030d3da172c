"""Controller-side filters that reuse the role's own validation code.

The rules live once, in plugins/module_utils/sglang_speculative.py, where they are unit
tested; preflight asserts call them through these filters so that a bad value is
refused on the controller, before any host is touched.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_serverargs as _flags
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_speculative as _rules


def layer_id_errors(ids: Any, var: str = "sglang_eagle3_layer_ids") -> list[str]:
    """Errors in the user's wiring that do not need the host (types, order, -1 first)."""
    return _rules.validate_layer_ids(ids, var=var)


def _as_int(value: Any) -> Any:
    """-e on the command line gives strings: accept "15" as 15, leave anything else to the checks."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def speculative_errors(steps: Any, topk: Any, draft_tokens: Any) -> list[str]:
    """Combinations SGLang would silently rewrite or cannot serve."""
    return _rules.validate_speculative(_as_int(steps), _as_int(topk), _as_int(draft_tokens))


def server_args(_: Any = None, **kwargs: Any) -> list[str]:
    """The launch flags, one list item per argument, in a stable order."""
    ints = ("num_steps", "eagle_topk", "num_draft_tokens", "tp_size", "pp_size", "port")
    return _rules.render_server_args(**{k: _as_int(v) if k in ints else v for k, v in kwargs.items()})


def managed_flags(_: Any = None) -> dict[str, str]:
    """Each flag the role renders and the variable that sets it (for the parse's report)."""
    return dict(_flags.MANAGED_FLAGS)


def flag_lines(args: list[str]) -> list[list[str]]:
    """Group argv into one flag and its values per line, for a unit a human can read."""
    lines: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "layer_id_errors": layer_id_errors,
            "speculative_errors": speculative_errors,
            "server_args": server_args,
            "flag_lines": flag_lines,
            "managed_flags": managed_flags,
        }
