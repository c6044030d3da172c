# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reason codes: every finding the modules return carries one, next to its text.

A finding is ``{"code": "<area>.<what>", "text": "<for people>"}``: the probe's
reasons, the live reading's reasons, the gate's failures and the report row's drift.
The text may be reworded at will; the code is the contract. The textfile's
``sglang_remediation_failure{class}`` (and so the alerts), the report's live column
and the tests read codes, never text.

``REASONS`` is the one table of codes, each with the failure class it sets
(``_metrics.FAILURE_CLASSES``, the textfile's and the alerts' contract). A new
finding gets a new code here first: :func:`finding` refuses one that is not in it.
Standard library only; must run under any host ``python3`` from 3.9.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping

REASONS = {
    # The installed release against sglang_version.
    "release.not_installed": "release",
    "release.not_pinned": "release",
    # The switch of staged releases and the seal of the release it points at (_releases).
    "release.not_staged": "release",
    "release.not_sealed": "release",
    "release.drift": "release",
    # The SGLang files the engine patches (deepseek_v2.py and its companions).
    "source.unpatched": "source",
    "source.restore_needed": "source",
    "source.refused": "source",
    "source.unreadable": "source",
    # The draft model's config.json.
    "draft.ids_differ": "draft_config",
    "draft.missing": "draft_config",
    "draft.unreadable": "draft_config",
    "draft.view_stale": "draft_config",
    # The files the service runs on, against the controller's renderings (a missing one differs too).
    "unit.differs": "service_files",
    "environment.differs": "service_files",
    "api_keys.differs": "service_files",
    "files.differs": "service_files",
    "files.unreadable": "service_files",
    "files.bad_entry": "service_files",
    # The host's audit timer (_hostaudit) is not as the role installs it: no restart needed.
    "timer.differs": "service_files",
    # The running server against the files it should run on.
    "server.differs": "running_server",
    "server.fingerprint_differs": "running_server",
    "server.fingerprint_unreadable": "running_server",
    "server.not_recorded": "running_server",
    "server.inactive": "running_server",
    # What the running server itself shows (the live reading, the gate).
    "live.settings_differ": "live_settings",
    # The SGLang test double serving where the test bed's mark is not (_testbed, _live).
    "live.test_double": "live_settings",
    "live.accept_length_low": "live_accept_length",
    "live.unavailable": "live_unavailable",
    "live.probe_failed": "live_unavailable",
    "live.auth_refused": "live_auth",
    "live.auth_missing": "live_auth",
}

# The staged release's own findings (the probe's, _releases): a dry run's row carries them as they are.
RELEASE_STAGING = ("release.not_staged", "release.not_sealed", "release.drift")
# The findings only the probe makes (no later task of the role reads the same thing again): the staged release's
# and the audit timer's. A dry run's row (an audit, check mode) carries them as the probe found them.
PROBE_ONLY = RELEASE_STAGING + ("timer.differs",)

# The files the role passes to the probe by these names; another name is a generic file.
FILE_CODES = {"unit": "unit.differs", "environment": "environment.differs", "api_keys": "api_keys.differs"}


def failure_class(code: str) -> str:
    """The failure class a code sets; ValueError for an unknown code, never a default class."""
    try:
        return REASONS[code]
    except (KeyError, TypeError):
        raise ValueError("unknown reason code %r: add it to REASONS in plugins/module_utils/_reasons.py"
                         % (code,)) from None


def finding(code: str, text: str) -> Dict[str, str]:
    """One finding; ValueError for a code the table does not know (a new one goes into REASONS first)."""
    failure_class(code)
    return {"code": code, "text": str(text)}


def codes(findings: Iterable[Any]) -> List[str]:
    """The codes of findings, in order."""
    return [f.get("code") if isinstance(f, Mapping) else None for f in findings or []]


def texts(findings: Iterable[Any]) -> List[str]:
    """The texts of findings, in order, for people (a report, a failure message)."""
    return [str(f.get("text", "")) if isinstance(f, Mapping) else str(f) for f in findings or []]


def is_live(item: Any) -> bool:
    """A finding about what the running server shows (its code's area is ``live``)."""
    return isinstance(item, Mapping) and str(item.get("code") or "").startswith("live.")


def release_not_pinned(installed: Any, pinned: Any) -> Dict[str, str]:
    """Another release than sglang_version: the probe and the report row say it in these words."""
    return finding("release.not_pinned", "sglang %s installed, %s pinned" % (installed, pinned))
