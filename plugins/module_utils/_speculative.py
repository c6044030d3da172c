# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure checks for SGLang EAGLE-3 speculative decoding settings.

SGLang fails *silently* on the two settings this role manages:

* it reads the draft's aux layer ids from ``config.json`` inside a bare
  ``try/except`` and falls back to its defaults on any mistake, and
* with ``--speculative-eagle-topk 1`` it rewrites ``--speculative-num-draft-tokens``
  to ``num_steps + 1`` and only logs a warning.

So every check SGLang skips is made here, before anything reaches a host, with a
message that names the variable, the bad value and what would be accepted.

What is read from the model directories is in _modeldirs, the draft
config's text edits in _draftconfig.

Stdlib only and no Ansible import: modules on Debian hosts (python3 3.9 - 3.13)
import this as ``ansible_collections.fleetops.sglang.plugins.module_utils._speculative``
and pytest imports it directly.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Sequence


def is_int(value: Any) -> bool:
    """True for a real int; bool is an int subclass but True is not a layer id."""
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    """Show a value with its type, so ``"2"`` and ``2`` read differently in errors.

    The type is the first builtin one in the MRO: Ansible hands filters its own
    subclasses (``_AnsibleTaggedStr``), which mean nothing to the user.
    """
    kind = next((t for t in type(value).__mro__ if t.__module__ == "builtins"), type(value))
    return "%r (%s)" % (value, kind.__name__)


# --------------------------------------------------------------------------- #
# Layer ids
# --------------------------------------------------------------------------- #


def validate_layer_ids(
    ids: Any,
    num_hidden_layers: Optional[int] = None,
    expected_count: Optional[int] = None,
    var: str = "sglang_eagle3_layer_ids",
) -> List[str]:
    """Return every reason SGLang would not capture exactly these hidden states.

    SGLang never tells us: a wrong id is either swallowed by its ``try/except``
    (defaults used instead) or captures a different layer than the draft was
    trained on, and the only symptom is a low accept length. ``-1`` means "the
    embedding output" (patched releases) and can only come first, because the
    embedding precedes every layer and SGLang concatenates in list order.
    """
    hint = "a list of distinct ascending ints, e.g. [-1, 2, 30]"
    if not isinstance(ids, (list, tuple)):
        return ["%s must be %s; got %s" % (var, hint, _describe(ids))]
    if not ids:
        return ["%s must not be empty; give %s" % (var, hint)]

    errors = []  # type: List[str]
    for pos, value in enumerate(ids):
        if not is_int(value):
            errors.append(
                "%s[%d] is %s; every id must be an int (a layer index, or -1 first "
                "for the embedding output), e.g. %s"
                % (var, pos, _describe(value), _suggest_ints(ids))
            )
    if errors:
        # Ordering and range make no sense until every element is an int.
        return errors

    for pos, value in enumerate(ids):
        if value == -1 and pos != 0:
            errors.append(
                "%s[%d] is -1, but -1 (the embedding output) is only accepted as the "
                "first id; got %r" % (var, pos, list(ids))
            )
        elif value < -1:
            errors.append(
                "%s[%d] is %d; the only negative id accepted is -1 (the embedding "
                "output, first position)" % (var, pos, value)
            )

    dupes = sorted({v for v in ids if list(ids).count(v) > 1})
    if dupes:
        errors.append(
            "%s has duplicate ids %r in %r; each hidden state can be captured once"
            % (var, dupes, list(ids))
        )
    if list(ids) != sorted(ids):
        errors.append(
            "%s must be ascending (SGLang concatenates captures in layer order, not "
            "list order); got %r, accepted would be %r" % (var, list(ids), sorted(ids))
        )

    if num_hidden_layers is not None:
        too_big = [v for v in ids if v >= num_hidden_layers]
        if too_big:
            errors.append(
                "%s has %r, but the target model has %d hidden layers: ids must be "
                "0..%d (or -1 first)" % (var, too_big, num_hidden_layers, num_hidden_layers - 1)
            )

    if expected_count is not None and len(ids) != expected_count:
        errors.append(
            "%s has %d ids %r, but the draft model's fc layer takes %d hidden states "
            "(from its fc.weight shape); give exactly %d ids"
            % (var, len(ids), list(ids), expected_count, expected_count)
        )
    return errors


def _suggest_ints(ids: Sequence[Any]) -> str:
    """Best-effort int version of the user's list, so the fix is copy-pasteable."""
    out = []
    for value in ids:
        if is_int(value):
            out.append(value)
        elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            out.append(int(value.strip()))
        else:
            return "[-1, 2, 30]"
    return repr(out)


# --------------------------------------------------------------------------- #
# Speculative flags
# --------------------------------------------------------------------------- #


def draft_tree_capacity(num_steps: int, eagle_topk: int) -> int:
    """Most tokens an EAGLE draft tree can hold: the root, topk at step 1, then
    topk*topk candidates per further step. More draft tokens cannot be filled."""
    return 1 + eagle_topk + (num_steps - 1) * eagle_topk * eagle_topk


def validate_speculative(
    num_steps: Any,
    eagle_topk: Any,
    num_draft_tokens: Any,
    var_prefix: str = "sglang_speculative_",
) -> List[str]:
    """Return every reason SGLang would not run exactly this speculative triple.

    The incident: steps 1 / topk 1 / draft 16 was silently served as draft 2.
    All three must be given together (SGLang auto-picks any it is not given, so a
    partial triple runs with values nobody chose) or none at all.
    """
    given = {
        "num_steps": num_steps,
        "eagle_topk": eagle_topk,
        "num_draft_tokens": num_draft_tokens,
    }
    flags = {
        "num_steps": "--speculative-num-steps",
        "eagle_topk": "--speculative-eagle-topk",
        "num_draft_tokens": "--speculative-num-draft-tokens",
    }
    missing = [k for k, v in given.items() if v is None]
    if len(missing) == 3:
        return []
    if missing:
        return [
            "set all three of %s or none: %s %s missing (SGLang would choose %s itself)"
            % (
                ", ".join(var_prefix + k for k in given),
                ", ".join(var_prefix + k for k in missing),
                "is" if len(missing) == 1 else "are",
                "it" if len(missing) == 1 else "them",
            )
        ]

    errors = []  # type: List[str]
    for key, value in given.items():
        if not is_int(value) or value < 1:
            errors.append(
                "%s (%s) is %s; it must be a positive int"
                % (var_prefix + key, flags[key], _describe(value))
            )
    if errors:
        return errors

    if eagle_topk == 1 and num_draft_tokens != num_steps + 1:
        errors.append(
            "%snum_steps=%d, %seagle_topk=1, %snum_draft_tokens=%d: with "
            "--speculative-eagle-topk 1 SGLang would silently set "
            "--speculative-num-draft-tokens to %d (num_steps + 1) and only log a "
            "warning. Set %snum_draft_tokens to %d, or %snum_steps to %d to keep %d "
            "draft tokens"
            % (
                var_prefix, num_steps, var_prefix, var_prefix, num_draft_tokens,
                num_steps + 1,
                var_prefix, num_steps + 1, var_prefix, num_draft_tokens - 1,
                num_draft_tokens,
            )
        )
    elif eagle_topk > 1:
        capacity = draft_tree_capacity(num_steps, eagle_topk)
        if num_draft_tokens > capacity:
            errors.append(
                "%snum_draft_tokens=%d exceeds the draft tree capacity %d for "
                "num_steps=%d, eagle_topk=%d (1 + topk + (num_steps-1)*topk^2); "
                "accepted: at most %d, or raise num_steps/eagle_topk"
                % (var_prefix, num_draft_tokens, capacity, num_steps, eagle_topk, capacity)
            )
    return errors


# --------------------------------------------------------------------------- #
# Server flags
# --------------------------------------------------------------------------- #


def _check_extra_args(extra_args: Sequence[Any]) -> None:
    """Refuse extra args that are not strings (preflight refuses them first, by name).

    Whether an item re-sets a managed flag depends on the installed release (its
    aliases, and prefixes where its parser allows abbreviations): the host judges
    that, before any write, with _extra_args, the one copy of that rule.
    """
    for arg in extra_args:
        if not isinstance(arg, str):
            raise ValueError("sglang_extra_args items must be strings; got %s" % _describe(arg))


def render_server_args(
    model_path: str,
    draft_model_path: Optional[str] = None,
    speculative_algorithm: Optional[str] = "EAGLE3",
    num_steps: Optional[int] = None,
    eagle_topk: Optional[int] = None,
    num_draft_tokens: Optional[int] = None,
    tp_size: int = 1,
    pp_size: int = 1,
    host: str = "127.0.0.1",
    port: int = 30000,
    mem_fraction_static: Optional[float] = None,
    disable_cuda_graph: bool = False,
    enable_metrics: bool = False,
    extra_args: Optional[Sequence[str]] = None,
    nnodes: int = 1,
    node_rank: int = 0,
    dist_init_addr: Optional[str] = None,
) -> List[str]:
    """Launch flags for ``python -m sglang.launch_server``, one argv element each.

    Deterministic order so a rendered unit file only changes when a value does
    (no spurious restarts). Raises ValueError on a triple SGLang would rewrite, so
    a rejected combination can never be rendered. With ``speculative_algorithm``
    None the speculative flags are omitted (a baseline server for comparison).
    A node of a multi-node replica (``nnodes`` > 1, plugin_utils/_replicas.py) gets
    ``--nnodes``, ``--node-rank`` and ``--dist-init-addr`` (the leader's rendezvous).
    """
    for name, value in (("tp_size", tp_size), ("pp_size", pp_size), ("port", port), ("nnodes", nnodes)):
        if not is_int(value) or value < 1:
            raise ValueError("%s must be a positive int; got %s" % (name, _describe(value)))
    if nnodes > 1 and (not is_int(node_rank) or not 0 <= node_rank < nnodes or not dist_init_addr):
        raise ValueError("a node of %d nodes needs a node_rank from 0 to %d and a dist_init_addr; got %s and %s"
                         % (nnodes, nnodes - 1, _describe(node_rank), _describe(dist_init_addr)))
    if mem_fraction_static is not None and (
        isinstance(mem_fraction_static, bool)
        or not isinstance(mem_fraction_static, (int, float))
        or not 0 < mem_fraction_static < 1
    ):
        raise ValueError(
            "mem_fraction_static must be a number in (0, 1); got %s" % _describe(mem_fraction_static)
        )
    extra = list(extra_args or [])
    _check_extra_args(extra)

    args = ["--model-path", str(model_path)]
    if speculative_algorithm:
        if not draft_model_path:
            raise ValueError("speculative_algorithm %s needs draft_model_path" % speculative_algorithm)
        errors = validate_speculative(num_steps, eagle_topk, num_draft_tokens)
        if errors:
            raise ValueError("; ".join(errors))
        args += [
            "--speculative-algorithm", str(speculative_algorithm),
            "--speculative-draft-model-path", str(draft_model_path),
        ]
        if num_steps is not None:
            args += [
                "--speculative-num-steps", str(num_steps),
                "--speculative-eagle-topk", str(eagle_topk),
                "--speculative-num-draft-tokens", str(num_draft_tokens),
            ]
    args += ["--tp-size", str(tp_size)]
    if pp_size != 1:
        args += ["--pp-size", str(pp_size)]
    args += ["--host", str(host), "--port", str(port)]
    if nnodes > 1:
        args += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--dist-init-addr", str(dist_init_addr)]
    if mem_fraction_static is not None:
        args += ["--mem-fraction-static", repr(float(mem_fraction_static))]
    if disable_cuda_graph:
        args.append("--disable-cuda-graph")
    if enable_metrics:
        args.append("--enable-metrics")
    return args + extra
