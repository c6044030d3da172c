# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the rendered launch flags through the installed SGLang's own ServerArgs.

A script that lives with the module_utils so that it ships with the module that runs
it: sglang_server_flags (its ``resolve`` option) imports it, which puts it in the
module's payload, and hands its own source to the venv's Python as ``python -c``:
one remote call, nothing copied to the host, and SGLang imported only by the venv's
interpreter, never by the module's. It imports nothing of the collection, so it runs
alone; standard library only, Python 3.9 compatible.

argv[1] is a JSON object: ``{"argv": [...rendered flags...], "extra": <how many
trailing items are sglang_extra_args>, "variables": {"--flag": "role_variable", ...}}``.

SGLang rewrites some settings silently in ``ServerArgs.__post_init__`` (from
0.5.23 in ``resolve_once``) and only logs a warning: the incident's
``--speculative-num-draft-tokens 16`` became 2. The role's static rules know the
rewrites found so far; this is the general detector. Every flag the role renders
(the part before the extra args) is parsed alone with SGLang's argparse, which
gives the values the role asked for, typed as SGLang types them; the whole line
then goes through ``prepare_server_args`` (and ``resolve_once``). Any managed
value that differs afterwards is a rewrite: it is named with its variable, the
rendered value and what SGLang would run instead.

On a machine without an accelerator ``--device cpu`` is added (SGLang raises "No
accelerator" otherwise); the speculative and parallel handling does not depend
on it.

Prints one JSON line: ``status`` (OK, REFUSED or UNAVAILABLE below), ``msg``,
``differences``, ``warnings`` (what SGLang logged while resolving) and ``device``,
and exits with that status's EXIT_STATUS: refused is a rewrite, or SGLang's own
parser or checks rejecting the flags; unavailable is ``sglang.srt.server_args``
not importable here, as on hosts without torch.
"""
import argparse
import contextlib
import io
import json
import logging
import sys
import warnings

# The verdicts and the exit status of each, spelled here only: sglang_server_flags maps
# the exit status back to its verdict, and the role reads the verdict from the module.
OK = "ok"
REFUSED = "refused"
UNAVAILABLE = "unavailable"
EXIT_STATUS = {OK: 0, UNAVAILABLE: 3, REFUSED: 4}


def emit(status, msg, **extra):
    # A script of its own under the venv's python, not a module: its answer is its stdout and status.
    sys.stdout.write(json.dumps(dict(extra, status=status, msg=msg), default=repr) + "\n")
    sys.stdout.flush()
    raise SystemExit(EXIT_STATUS[status])


class Collect(logging.Handler):
    """Keeps SGLang's warnings; attached to the ``sglang`` logger, which
    ``logging.basicConfig(force=True)`` in prepare_server_args leaves alone."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        # The resolution's own words, not import-time notes about kernels.
        path = record.pathname.replace("\\", "/")
        if not any(part in path for part in ("server_args", "/arg_groups/", "/speculative/")):
            return
        line = record.getMessage().replace("\033[1;33m", "").replace("\033[0m", "").strip()
        if line and line not in self.lines:
            self.lines.append(line)


# Up to 0.5.13 these dests are copied to the field by ServerArgs.from_cli_args.
FIELD_OF_DEST = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size"}


def plain(value):
    """Enums and other wrappers compare by what they print."""
    for attr in ("value", "name"):
        inner = getattr(value, attr, None)
        if isinstance(inner, (str, int, float, bool)) and not isinstance(value, (str, int, float, bool)):
            return inner
    return value


def same(rendered, resolved):
    rendered, resolved = plain(rendered), plain(resolved)
    return rendered == resolved or (not isinstance(resolved, bool) and str(rendered) == str(resolved))


def has_accelerator():
    try:
        import torch
    except Exception:  # noqa: BLE001 - no torch means no accelerator SGLang could use
        return False
    for name in ("cuda", "xpu", "npu", "musa", "mps"):
        backend = getattr(torch, name, None) if name != "mps" else getattr(torch.backends, "mps", None)
        try:
            if backend is not None and backend.is_available():
                return True
        except Exception:  # noqa: BLE001 - a broken backend is not one SGLang can use either
            continue
    return False


def resolved_view(args):
    """What will run: the ServerArgs itself, or from 0.5.23 its resolving view."""
    if not hasattr(args, "resolve_once"):
        return args
    args.resolve_once()
    for module in ("sglang.srt.arg_groups.overrides", "sglang.srt.arg_groups.model_override_base"):
        try:
            return __import__(module, fromlist=["resolving_view"]).resolving_view(args)
        except (ImportError, AttributeError):
            continue
    return args


def main():
    request = json.loads(sys.argv[1])
    argv = [str(a) for a in request["argv"]]
    managed = argv[: len(argv) - int(request.get("extra", 0))]
    variables = request.get("variables", {})
    collect = Collect()
    logging.getLogger("sglang").addHandler(collect)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            from sglang.srt.server_args import ServerArgs, prepare_server_args
    except Exception as exc:  # noqa: BLE001 - any import failure means "cannot check here"
        emit(UNAVAILABLE, "%s: %s" % (type(exc).__name__, exc))

    device = [] if "--device" in argv or has_accelerator() else ["--device", "cpu"]
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    try:
        with contextlib.redirect_stderr(err):
            asked = parser.parse_args(managed + device)
    except SystemExit:
        emit(REFUSED, "SGLang's parser refuses the role's own flags: %s" % err.getvalue().strip())
    expected = []
    for flag in managed:
        action = parser._option_string_actions.get(flag)  # noqa: SLF001 - argparse has no public lookup
        if flag in variables and action is not None:
            expected.append((variables[flag], flag, action.dest, getattr(asked, action.dest)))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                view = resolved_view(prepare_server_args(argv + device))
        except SystemExit:
            emit(REFUSED, "SGLang's parser refuses the flags: %s" % err.getvalue().strip()[-2000:],
                 warnings=collect.lines, device=device[1:] or None)
        except Exception as exc:  # noqa: BLE001 - SGLang would fail at start with the same error
            emit(REFUSED, "SGLang's own checks refuse the flags: %s: %s" % (type(exc).__name__, exc),
                 warnings=collect.lines, device=device[1:] or None)
    lines = list(collect.lines)
    for caught_warning in caught:
        text = str(caught_warning.message)
        if "/sglang/" in caught_warning.filename.replace("\\", "/") and text not in lines:
            lines.append(text)

    differences, not_compared = [], []
    for variable, flag, dest, rendered in expected:
        field = dest if hasattr(view, dest) else FIELD_OF_DEST.get(dest, dest)
        if not hasattr(view, field):
            not_compared.append(dest)
            continue
        resolved = getattr(view, field)
        if not same(rendered, resolved):
            differences.append({"variable": variable, "flag": flag, "dest": dest,
                                "rendered": plain(rendered), "resolved": plain(resolved)})
    info = dict(differences=differences, warnings=lines, device=device[1:] or None,
                compared=len(expected) - len(not_compared), not_compared=not_compared)
    if differences:
        emit(REFUSED, "SGLang would silently run other values than the role rendered: " + "; ".join(
            "%s (%s): rendered %r, SGLang would run %r" % (d["variable"], d["flag"], d["rendered"], d["resolved"])
            for d in differences) + (". SGLang said: " + " | ".join(lines) if lines else ""), **info)
    emit(OK, "SGLang runs every managed value as rendered (%d compared)" % info["compared"], **info)


if __name__ == "__main__":
    main()
