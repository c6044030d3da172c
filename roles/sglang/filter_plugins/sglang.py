"""Controller-side filters that reuse the role's own validation code.

The rules live once, in module_utils/sglang_speculative.py (flags, layer ids)
and module_utils/sglang_service.py (the unit's sandbox paths and extra
directives), where they are unit tested; preflight asserts and the unit template
call them through these filters so that a bad value is refused on the
controller, before any host is touched.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any

_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location("sglang_role_" + name, os.path.join(_UTILS, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _logic() -> Any:
    return _load("sglang_speculative")


def _service() -> Any:
    return _load("sglang_service")


def layer_id_errors(ids: Any, var: str = "sglang_eagle3_layer_ids") -> list[str]:
    """Errors in the user's wiring that do not need the host (types, order, -1 first)."""
    return _logic().validate_layer_ids(ids, var=var)


def _as_int(value: Any) -> Any:
    """-e on the command line gives strings: accept "15" as 15, leave anything else to the checks."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def speculative_errors(steps: Any, topk: Any, draft_tokens: Any) -> list[str]:
    """Combinations SGLang would silently rewrite or cannot serve."""
    return _logic().validate_speculative(_as_int(steps), _as_int(topk), _as_int(draft_tokens))


def server_args(_: Any = None, **kwargs: Any) -> list[str]:
    """The launch flags, one list item per argument, in a stable order."""
    ints = ("num_steps", "eagle_topk", "num_draft_tokens", "tp_size", "pp_size", "port")
    return _logic().render_server_args(**{k: _as_int(v) if k in ints else v for k, v in kwargs.items()})


def flag_lines(args: list[str]) -> list[list[str]]:
    """Group argv into one flag and its values per line, for a unit a human can read."""
    lines: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    return lines


def extra_directive_errors(value: Any, var: str = "sglang_service_extra_directives") -> list[str]:
    """Extra unit directives that would not read back as the user wrote them."""
    return _service().validate_extra_directives(value, var=var)


def directive_lines(value: Any, section: str) -> list[str]:
    """``Key=value`` lines of sglang_service_extra_directives for one unit section."""
    return _service().directive_lines(value, section)


def service_paths(home: str, model_paths: list[Any], environment: Any = None) -> dict[str, Any]:
    """ReadWritePaths, ReadOnlyPaths and ProtectHome for the unit's sandbox."""
    return _service().service_paths(home, model_paths, environment)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglang_layer_id_errors": layer_id_errors,
            "sglang_speculative_errors": speculative_errors,
            "sglang_server_args": server_args,
            "sglang_flag_lines": flag_lines,
            "sglang_service_extra_directive_errors": extra_directive_errors,
            "sglang_service_directive_lines": directive_lines,
            "sglang_service_paths": service_paths,
        }
