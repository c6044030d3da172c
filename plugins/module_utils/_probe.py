# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit engine of a host: one call that judges whether it runs what it should.

``probe`` is what ``sglang_probe`` runs on the host (the fast path, the audit's first pass) and
what the host's own audit timer runs (``_hostaudit``, shipped to the host as a bundle of these
files): the same code for both. Standard library only; must run under any host ``python3`` from 3.9.
"""

from __future__ import annotations

import hashlib
import os
import time

from ansible_collections.fleetops.sglang.plugins.module_utils._adopt import adoption_blockers, main_pid
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import (
    DEEPSEEK_FILE, TARGET_FILES, EngineError, find_installation)
from ansible_collections.fleetops.sglang.plugins.module_utils._eagle3 import Request
from ansible_collections.fleetops.sglang.plugins.module_utils import _releases
from ansible_collections.fleetops.sglang.plugins.module_utils._memo import audit_memoized, store_audit_memo
from ansible_collections.fleetops.sglang.plugins.module_utils._families import capture_errors
from ansible_collections.fleetops.sglang.plugins.module_utils._release_flags import store_table_memo
from ansible_collections.fleetops.sglang.plugins.module_utils._extra_args import check_venv
from ansible_collections.fleetops.sglang.plugins.module_utils._live import authorized, http_request, read_live
from ansible_collections.fleetops.sglang.plugins.module_utils._metrics import classify, update
from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import (
    FILE_CODES, codes, finding, release_not_pinned)
from ansible_collections.fleetops.sglang.plugins.module_utils._fingerprint import (
    changed_components, current_fingerprint, load_recorded, record, service_active, shown)
from ansible_collections.fleetops.sglang.plugins.module_utils._draftconfig import (
    get_layer_ids, same_ids, view_differences)
from ansible_collections.fleetops.sglang.plugins.module_utils._modeldirs import (
    load_json_object, read_num_hidden_layers, target_model_errors)

SHORT = os.path.basename(DEEPSEEK_FILE)


def eagle3_reasons(audit):
    """Why the installed files are not as the role would leave them (findings, _reasons)."""
    if audit["failed"]:
        return [finding("source.unreadable", audit["msg"])]
    if audit["compliant"]:
        return []
    state = audit["file_state_before"]
    if audit["decision"] == "refuse":
        return [finding("source.refused", "refused: %s" % audit["msg"])]
    if audit["decision"] == "native":
        return [finding("source.restore_needed", "%s %s on a native release: restore needed" % (SHORT, state))]
    return [finding("source.unpatched", "%s %s: patch needed (%s)" % (
        SHORT, state, "; ".join(audit["findings"]) or audit["msg"]))]


def release_reasons(venv, rid):
    """The switch and the seal of the release it points at, against the identity wanted (findings)."""
    state = _releases.switch_state(venv)
    if state["kind"] != "link":
        return state["target"], [finding("release.not_staged", "%s is an in-place venv, not a staged release: the next"
                                         " run adopts it as one (no reinstall, no restart)" % venv)]
    marker = _releases.read_marker(state["target"]) or {}
    if marker.get("id") != rid:
        return state["target"], [finding("release.not_sealed", "%s -> %s, sealed as %s, not as %s" % (
            venv, state["target"], marker.get("id") or "nothing", rid))]
    drift = _releases.problems(state["target"], marker)
    if drift:
        return state["target"], [finding("release.drift", "release %s changed after its seal: %s" % (
            state["target"], "; ".join(drift[:5]) + (" (and %d more)" % (len(drift) - 5) if len(drift) > 5 else "")))]
    return state["target"], []


def draft_reasons(path, wanted, source=None):
    """Compare the draft config's ids with those the release needs, and a view with the draft's files
    (``source``, its directory); (findings, ids found)."""
    try:
        config = load_json_object(path)
    except (OSError, ValueError) as exc:
        return [finding("draft.unreadable", "draft config unreadable: %s" % exc)], None
    if config is None:
        return [finding("draft.missing", "draft config %s does not exist" % path)], None
    found = get_layer_ids(config)
    if wanted is not None and not same_ids(found, wanted):
        return [finding("draft.ids_differ", "draft ids %s != %s" % (found, wanted))], found
    if source and wanted is not None:
        try:
            stale = view_differences(source, os.path.dirname(path), wanted)
        except (OSError, ValueError) as exc:
            return [finding("draft.unreadable", "draft %s unreadable: %s" % (source, exc))], found
        if stale:
            return [finding("draft.view_stale", "draft view %s is not the draft's current files (%s): %s"
                            % (os.path.dirname(path), source, "; ".join(stale)))], found
    return [], found


def file_reasons(files, secret_sha256=None):
    """The rendered files against their sha256 (findings); a missing file differs from its rendering too. A
    secret-bearing file's sha256 comes in ``secret_sha256`` (a no_log argument), by the same name."""
    reasons = []
    for name in sorted(files):
        spec = files[name] or {}
        path = spec.get("path")
        want = str(spec.get("sha256") or (secret_sha256 or {}).get(name) or "").lower()
        differs = FILE_CODES.get(name, "files.differs")
        if not path or not want:
            reasons.append(finding("files.bad_entry", "%s: files entries need path and sha256" % name))
            continue
        try:
            with open(path, "rb") as fh:
                have = hashlib.sha256(fh.read()).hexdigest()
        except FileNotFoundError:
            reasons.append(finding(differs, "%s %s does not exist" % (name, path)))
            continue
        except OSError as exc:
            reasons.append(finding("files.unreadable", "%s unreadable: %s" % (name, exc)))
            continue
        if have != want:
            reasons.append(finding(differs, "%s differs from the rendered one" % name))
    return reasons


# The one finding adoption can answer (a server that runs what should run, unrecorded).
NO_HEALTHY_START = "server.not_recorded"


def fingerprint_specs(components, audit):
    """The fingerprint's components as the gate records them: the engine's own value for ``sglang``."""
    specs = dict(components)
    if specs.get("sglang") in (None, "", "auto") and not audit["failed"]:
        specs["sglang"] = "value:" + audit["fingerprint"]
    elif specs.get("sglang") in (None, "", "auto"):
        specs.pop("sglang", None)  # no install: the fingerprint differs on the other components or anyway
    return specs


def fingerprint_reasons(components, state_file, audit):
    """(reasons, {current, recorded}) for the running fingerprint, without the service state."""
    specs = fingerprint_specs(components, audit)
    try:
        current = current_fingerprint(specs)
    except OSError as exc:
        return [finding("server.fingerprint_unreadable", "fingerprint: %s" % exc)], {"current": {}, "recorded": {}}
    recorded = load_recorded(state_file) if state_file else {}
    changed = changed_components(current, recorded)
    info = {"current": shown(current), "recorded": shown(recorded.get("components", {}))}
    if changed is None:
        return [finding(NO_HEALTHY_START, "no healthy start recorded: restart needed")], info
    if not changed:
        return [], info
    why = "fingerprint differs (%s): restart needed" % ", ".join(changed)
    return [finding("server.fingerprint_differs", why)], info


def live_reading(live, release, request=http_request):
    """The running server's speculative state (_live), the installed release as its expected version."""
    expected = dict(live["expected"] or {})
    if release and not expected.get("version"):
        expected["version"] = release
    return read_live(authorized(request, live.get("api_key") or ""), live["url"], expected,
                     live["accept_length_min"], live["prompts"] or [], live["max_new_tokens"],
                     live["request_timeout"], live["generate_timeout"])


def adoption(p, result, reasons, audit, check_mode, run_command, which, request=http_request):
    """Adopt a server that runs what should run but has no recorded start (_adopt): record its
    fingerprint (not in check mode or an audit, which only say so) and restart nothing.

    Only when the one finding is that no healthy start was recorded, the service is active and
    its live reading passed; None when adoption was not considered, else what it found.
    """
    spec = p.get("adopt")
    live = result.get("live")
    if spec and spec.get("health_url") and not live:
        # A follower of a multi-node replica: no API to read; its stand-in health server answers once its
        # schedulers joined the replica (the leader's reading is the replica's).
        status, _answer, _error = request(spec["health_url"].rstrip("/") + "/health", 10)
        live = {"read": status == 200, "reasons": []}
    if not spec or codes(reasons) != [NO_HEALTHY_START] or not result["active"] or not live or not live.get("read") \
            or live.get("reasons") or audit["failed"]:
        return None
    paths = list(spec.get("paths") or [])
    try:
        installation = find_installation(p["venv"])
        paths += [installation.path(rel) for rel in TARGET_FILES]
        paths.append(os.path.join(installation.dist_info, "RECORD"))
    except EngineError as exc:
        return {"adopted": False, "recorded": False, "blockers": ["the installed SGLang cannot be read (%s)" % exc]}
    pid = main_pid(p["service"], run_command, which)
    blockers = adoption_blockers(pid, spec["argv"], spec["env_file"], paths)
    found = {"adopted": not blockers, "recorded": False, "blockers": blockers}
    if not blockers and spec.get("record") and not check_mode:
        found["recorded"] = record(p["fingerprint_file"],
                                   fingerprint_specs(p["fingerprint_components"] or {}, audit))
    return found


def write_textfile(textfile, result, check_mode, now=None):
    """The textfile of a run that ends at the probe: files compliant, live findings decide."""
    if not textfile or check_mode or not result["compliant"]:
        return None
    reasons = (result["live"] or {}).get("reasons") or []
    values = verdict_values(result, reasons, textfile, textfile.get("accept_length_min", 0))
    update(textfile["path"], textfile["state_file"], values, restarts=0,
           now=time.time() if now is None else now, success=not reasons)
    return textfile["path"]


def verdict_values(result, reasons, textfile, accept_length_min, error=""):
    """The textfile's values for a probe's verdict (_metrics.render): its findings ``reasons`` (and ``error``) set
    the classes and the compliance; ``textfile`` gives the mode, the replica and whether a timer is installed. The
    fast path's textfile and the host's audit timer (_hostaudit) write through it."""
    audit = result.get("eagle3") or {}
    return dict(compliant=not reasons and not error, release=result.get("release") or "",
                decision=result.get("decision") or "", family=audit.get("family") or "",
                draft_ids=result.get("draft_layer_ids") or [], mode=textfile["mode"], live=result.get("live"),
                classes=classify(codes(reasons), error), accept_length_min=accept_length_min,
                replica=textfile.get("replica") or "", audit_timer=textfile.get("audit_timer", False))


def forward_family(audit):
    """The audit's forward family (L, C, P, R), also from a memo that predates ``shape``."""
    forward = (audit.get("shape") or {}).get("forward")
    family = audit.get("family") or ""
    if forward:
        return forward
    if family.startswith("native_"):
        return family[len("native_"):]
    return "L" if family.endswith("_loop") else None


def input_errors(p, audit):
    """Inputs that cannot work on this host: checked here too, so the fast path refuses them."""
    target = p["target_model_path"]
    if not target:
        return []
    errors = target_model_errors(target)
    if errors or audit["release"] != p["expected_version"] or audit["decision"] not in ("patch", "native"):
        return errors
    forward = forward_family(audit)
    return capture_errors(p["layer_ids"], read_num_hidden_layers(target),
                          forward if forward in ("L", "C", "P", "R") else None, audit["release"])


def probe(p, check_mode=False, run_command=None, which=None):
    result = dict(changed=False, compliant=False, reasons=[], release=None, decision=None,
                  draft_layer_ids=None, draft_layer_ids_found=None, eagle3=None,
                  fingerprint={"current": {}, "recorded": {}}, active=None, restart_needed=False, adoption=None,
                  server_flags={"checked": False, "errors": []},
                  live=None, textfile=None, release_dir=None)
    flags = {"memo_key": None, "table": None}
    reasons = result["reasons"]
    audit = audit_memoized(Request(
        venv=p["venv"], layer_ids=p["layer_ids"], patches=p["patches"] or {}, state="audit",
        backup_dir=p["backup_dir"], pipeline_parallel_size=p["pipeline_parallel_size"], check_mode=True,
        anchors=p["anchors"],
    ), p["memo_file"], write=False)
    audit.pop("diff", None)
    result["errors"] = input_errors(p, audit)
    if result["errors"]:
        return result
    result.update(eagle3=audit, release=audit["release"], decision=audit["decision"],
                  draft_layer_ids=audit["draft_layer_ids"])
    if audit["release"] is None:
        reasons.append(finding("release.not_installed", "sglang %s not installed in %s (%s)" % (
            p["expected_version"], p["venv"], audit["msg"])))
    elif audit["release"] != p["expected_version"]:
        # What to patch is decided on the pinned release once it is installed.
        reasons.append(release_not_pinned(audit["release"], p["expected_version"]))
    else:
        # The flags the pinned release accepts, before anything else is judged: a bad
        # sglang_extra_args fails the probe, so nothing on the host is touched.
        try:
            flags = check_venv(p["venv"], p["extra_args"] or [], audit["release"], p["flags_memo_file"],
                               key_vars=p["key_vars"], trust_remote_code=p["trust_remote_code"])
        except (OSError, ValueError, SyntaxError) as exc:
            flags = {"checked": False, "memo_key": None, "table": None,
                     "errors": ["sglang_extra_args cannot be checked: the launch flags of SGLang %s could not "
                                "be read (%s); empty sglang_extra_args or report the layout" % (audit["release"], exc)]}
        result["server_flags"] = {k: v for k, v in flags.items() if k not in ("memo_key", "table")}
        if flags["errors"]:
            audit.pop("memo_key", None)
            return result
        reasons += eagle3_reasons(audit)
        draft, found = draft_reasons(p["draft_config"], audit["draft_layer_ids"], p["draft_source"])
        reasons += draft
        result["draft_layer_ids_found"] = found
    if p["service_manage"]:
        reasons += file_reasons(p["files"] or {}, p["secret_sha256"] or {})
        fp_reasons, result["fingerprint"] = fingerprint_reasons(
            p["fingerprint_components"] or {}, p["fingerprint_file"], audit)
        reasons += fp_reasons
        result["active"] = service_active(p["service"], run_command, which)
        if not result["active"]:
            reasons.append(finding("server.inactive", "service %s not active" % p["service"]))
        elif p.get("live"):
            result["live"] = live_reading(p["live"], audit["release"])
        result["adoption"] = adoption(p, result, reasons, audit, check_mode, run_command, which)
        if result["adoption"] and result["adoption"]["adopted"]:
            # What runs is what should run: only its record was missing (written now, or by the next run).
            del reasons[:]
            result["changed"] = result["adoption"]["recorded"]
        elif result["adoption"]:
            # Adoption is considered only when that record is the one finding.
            reasons[0]["text"] += " (not adopted: %s)" % "; ".join(result["adoption"]["blockers"])
        # Every finding changes a fingerprint component (or starts the service).
        result["restart_needed"] = bool(reasons)
    if p.get("release") and audit["release"] == p["expected_version"]:
        # Judged after the restart decision: a release to adopt, seal or rebuild as it was needs no restart.
        result["release_dir"], found = release_reasons(p["venv"], p["release"]["id"])
        reasons += found
    # The host's audit timer as the role installs it (an audit says so; a converging run installs it after this).
    reasons += p.get("_timer_findings") or []
    result["compliant"] = not reasons
    # Only a verdict the run ends on is stored: a host that goes on to be changed or
    # refused leaves the memo as it was (the patching module stores its own).
    # What this call wrote, said in RV(written): records of the run, never the host's configuration.
    written = [p["fingerprint_file"]] if (result.get("adoption") or {}).get("recorded") else []
    if p["memo_write"] and not check_mode and result["compliant"] and p["memo_file"]:
        store_audit_memo(p["memo_file"], audit)
        written.append(p["memo_file"])
    if p["memo_write"] and not check_mode and result["compliant"] and p["flags_memo_file"]:
        store_table_memo(p["flags_memo_file"], flags["memo_key"], flags["table"])
        written.append(p["flags_memo_file"])
    audit.pop("memo_key", None)
    textfile = dict(p["textfile"], accept_length_min=(p.get("live") or {}).get("accept_length_min", 0)) \
        if p.get("textfile") else None
    result["textfile"] = write_textfile(textfile, result, p.get("_check_mode", False))
    result["written"] = written + ([result["textfile"]] if result["textfile"] else [])
    return result
