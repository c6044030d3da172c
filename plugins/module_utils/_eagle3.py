# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe, decide, patch and verify SGLang's EAGLE-3 embedding capture on DeepSeek, in one pass.

The engine shared by the ``sglang_eagle3`` and ``sglang_probe`` modules, the pytest
suite and ``scripts/check-all-releases``. It only sequences the concerns, each in
its own file:

* ``_distribution``: where SGLang is installed, RECORD and METADATA;
* ``_anchors``: the installed files are the ones the release's publisher shipped;
* ``_hunks``: parse, apply and reverse the patch hunks, classify a file;
* ``_families``: the release family read from the code, the decision table;
* ``_verify``: grep evidence, compilation, the semantic check and the
  forward-capture check (``_forward``: the release's capture code, executed);
* ``_fileio``: atomic writes;
* ``_memo``: the audit memo over all of the above.

It must run under whatever ``python3`` a host has (3.9 to 3.13) and therefore
imports nothing from Ansible, SGLang or torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils import _anchors
from ansible_collections.fleetops.sglang.plugins.module_utils import _sandbox
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import (
    COMPANION_FILES,
    DEEPSEEK_FILE,
    MODEL_RUNNER_FILE,
    EngineError,
    Installation,
    Refusal,
    find_installation,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import atomic_write, read_bytes_text, sha256_hex
from ansible_collections.fleetops.sglang.plugins.module_utils._hunks import FileProbe, Hunk, apply_hunks, parse_patch, probe_file
from ansible_collections.fleetops.sglang.plugins.module_utils._patches import PATCHES
from ansible_collections.fleetops.sglang.plugins.module_utils._families import (
    DEFAULT_LAYER_IDS,
    Shape,
    decide,
    default_id_calls,
    detect_body,
    detect_forward,
    runner_stores_ids,
    validate_layer_ids,
)
from ansible_collections.fleetops.sglang.plugins.module_utils._verify import (
    RunCommand,
    forward_capture_check,
    semantic_check_native,
    verify_texts,
)


@dataclass
class Request:
    venv: str
    layer_ids: List[int] = field(default_factory=lambda: list(DEFAULT_LAYER_IDS))
    # Patch name -> hunk text; empty means the ones shipped with the engine (_patches.PATCHES).
    patches: Dict[str, str] = field(default_factory=dict)
    state: str = "present"  # present | absent | audit
    backup_dir: str = "/var/lib/sglang-remediation/backup"
    pipeline_parallel_size: int = 1
    python: Optional[str] = None
    check_mode: bool = False
    # Release -> {file: sha256 or None}: releases the collection does not anchor (sglang_release_anchors).
    anchors: Dict[str, Any] = field(default_factory=dict)
    # How the commands that start the release's Python run (_sandbox: mode, user); None: as the caller.
    sandbox: Optional[Dict[str, Any]] = field(default=None, compare=False)
    run_command: Optional[RunCommand] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.patches:
            self.patches = dict(PATCHES)


def _hunks(patches: Dict[str, str], name: str) -> List[Hunk]:
    if name not in patches:
        raise EngineError("patch %r was not passed in 'patches' (got: %s)"
                          % (name, ", ".join(sorted(patches)) or "none"))
    return parse_patch(patches[name])


def _known_hunk_sets(patches: Dict[str, str]) -> List[List[Hunk]]:
    return [parse_patch(text) for _name, text in sorted(patches.items())]


def run(req: Request) -> Dict[str, Any]:
    """Probe, decide, apply and verify in one pass; returns the module's result.

    The result carries ``failed: True`` and ``msg`` when the host must not or could
    not be changed; the host is then as it was before the call.
    """
    result: Dict[str, Any] = {
        "changed": False, "release": None, "family": None, "decision": None,
        "file_state_before": None, "sha256_before": None, "sha256_after": None,
        "record_sha256": None, "companion": {"needed": False, "files": []},
        "draft_layer_ids": None, "evidence": [], "checks": {"compiled": None, "semantic": None},
        "compliant": False, "findings": [], "msg": "", "diff": [], "failed": False,
        # Filled by _forward on state=present; audit and absent never execute SGLang's code.
        "forward": {"executed": False, "ok": None, "reason": "state=%s" % req.state,
                    "summary": "forward: not executed (state=%s)" % req.state},
    }
    try:
        # Every command that starts the release's Python (compile, forward) runs in the sandbox.
        req = replace(req, run_command=_sandbox.runner(req.run_command, req.sandbox))
        ids = validate_layer_ids(req.layer_ids)
        inst = find_installation(req.venv)
        result["release"] = inst.version
        _anchors.check(inst, req.anchors)
        _run(req, ids, inst, result)
    except Refusal as exc:
        # audit only reports: a refusal is a finding there, not a task failure.
        result["failed"] = req.state != "audit"
        result["decision"] = "refuse"
        result["compliant"] = False
        result["msg"] = "sglang %s: %s" % (result["release"] or "unknown release", exc)
    except (EngineError, _sandbox.SandboxError, ValueError, OSError, SyntaxError, UnicodeDecodeError) as exc:
        result["failed"] = True
        result["msg"] = "sglang %s: %s" % (result["release"] or "unknown release", exc)
    if result["failed"]:
        result["changed"] = False
        result["diff"] = []
    result["fingerprint"] = fingerprint_value(result)
    return result


def _refuse(path: str, reason: str) -> None:
    raise Refusal("%s: refused: %s" % (path, reason))


def _run(req: Request, ids: List[int], inst: Installation, result: Dict[str, Any]) -> None:
    known = _known_hunk_sets(req.patches)
    main = probe_file(inst, DEEPSEEK_FILE, known)
    result.update(file_state_before=main.state, sha256_before=main.sha256,
                  sha256_after=main.sha256, record_sha256=main.record_sha256)
    if main.state in ("drift", "missing"):
        _refuse(main.path, "file is %s (%s)" % (main.state, main.reason))
    if main.pristine_text is None:
        raise AssertionError("a patched file has no pristine text")
    shape = Shape(body=detect_body(main.pristine_text), forward=detect_forward(main.pristine_text))
    companions: List[FileProbe] = []
    for rel in COMPANION_FILES:
        probe = probe_file(inst, rel, known)
        if probe.state == "missing":
            continue
        companions.append(probe)
        # A drifted companion is read as it is, so a leftover no-argument call
        # still marks the release as needing the companion (and is then refused).
        text = probe.pristine_text if probe.pristine_text is not None else probe.text
        shape.default_id_calls += default_id_calls(text, rel)
        if rel == MODEL_RUNNER_FILE:
            shape.ids_on_runner = runner_stores_ids(text)
    dec = decide(shape, ids, req.pipeline_parallel_size)
    result.update(family=dec.family, decision=dec.decision, draft_layer_ids=dec.draft_layer_ids)
    result["shape"] = {"body": shape.body, "forward": shape.forward, "default_id_calls": shape.default_id_calls}
    if dec.decision == "refuse":
        _refuse(main.path, dec.reason)
    if dec.decision == "native":
        _native(main, ids, result)
        if req.state == "present":
            errors = _forward(req, inst, "native", ids, result["draft_layer_ids"], {}, result)
            if errors:
                raise EngineError("verification failed: " + "; ".join(errors))
        return
    plan: List[Tuple[FileProbe, List[Hunk]]] = [(main, _hunks(req.patches, dec.family))]
    if dec.companion:
        hunks = _hunks(req.patches, dec.companion)
        for probe in companions:
            mine = [h for h in hunks if h.file == probe.rel]
            if mine:
                plan.append((probe, mine))
        result["companion"] = {"needed": True, "template": dec.companion,
                               "files": [p.rel for p, _planned in plan[1:]]}
    for probe, _planned in plan:
        if probe.state == "drift":
            _refuse(probe.path, "file is drift (%s)" % probe.reason)
    if req.state == "absent":
        _restore(req, inst, [p for p, _planned in plan], result)
    else:
        _present(req, ids, inst, plan, result)


def _native(main: FileProbe, ids: List[int], result: Dict[str, Any]) -> None:
    """0.5.14+: no source change; prove the translated ids reach layers_to_capture."""
    if main.pristine_text is None:
        raise AssertionError("a patched file has no pristine text")
    errors = semantic_check_native(main.pristine_text, ids)
    result["checks"] = {"compiled": None, "semantic": not errors}
    if errors:
        _refuse(main.path, "; ".join(errors))
    result["compliant"] = main.state == "pristine"
    result["msg"] = ("native embedding capture: the draft config must list eagle_aux_hidden_state_layer_ids "
                     "%r; no source change" % (result["draft_layer_ids"],))


def _forward(req: Request, inst: Installation, route: str, ids: List[int], draft_ids: List[int],
             texts: Dict[str, str], result: Dict[str, Any]) -> List[str]:
    """The forward-capture check under the venv's python; its result goes to ``result["forward"]``."""
    result["forward"], errors = forward_capture_check(req.python, inst.site_packages, route, ids, draft_ids,
                                                      req.run_command, texts=texts)
    return errors


def _diff(path: str, before: str, after: str) -> Dict[str, str]:
    return {"before_header": path, "after_header": path, "before": before, "after": after}


def _restore(req: Request, inst: Installation, probes: List[FileProbe], result: Dict[str, Any]) -> None:
    """state=absent: put the RECORD bytes back wherever our patch is in place."""
    for probe in probes:
        if probe.state != "ours":
            continue
        data = pristine_bytes_for_restore(req.backup_dir, inst.version, probe)
        result["diff"].append(_diff(probe.path, probe.text, data.decode("utf-8")))
        if not req.check_mode:
            _replace(probe.path, data)
        result["changed"] = True
        if probe.rel == DEEPSEEK_FILE:
            result["sha256_after"] = sha256_hex(data)
    result["compliant"] = True
    result["msg"] = "pristine files restored" if result["changed"] else "files already pristine"


def _present(req: Request, ids: List[int], inst: Installation,
             plan: List[Tuple[FileProbe, List[Hunk]]], result: Dict[str, Any]) -> None:
    """state=present (write unless check mode) or audit (never write)."""
    targets: Dict[str, str] = {}
    pristine: Dict[str, str] = {}
    paths: Dict[str, str] = {}
    to_write: List[FileProbe] = []
    for probe, hunks in plan:
        if probe.pristine_text is None:
            raise AssertionError("a patched file has no pristine text")
        res = apply_hunks(probe.pristine_text, hunks)
        if res.state != "clean":
            _refuse(probe.path, "patch does not apply to the pristine file: %s" % (res.reason or res.state))
        targets[probe.rel], pristine[probe.rel], paths[probe.rel] = res.text, probe.pristine_text, probe.path
        if probe.text != res.text:
            to_write.append(probe)
            result["diff"].append(_diff(probe.path, probe.text, res.text))
    pending = ", ".join(p.rel for p in to_write)
    if req.state == "audit" or req.check_mode:
        # Verify what the files would be, without touching them.
        evidence, checks, errors = verify_texts(targets, pristine, ids, paths, req.python, on_disk=False,
                                                run_command=req.run_command)
        if req.state == "present":  # check mode: the would-be texts, executed
            errors += _forward(req, inst, "patch", ids, ids, targets, result)
        result.update(evidence=evidence, checks=checks)
        if req.state == "audit":
            result["diff"] = []
            result["compliant"] = not to_write and not errors
            result["findings"] = errors or ([] if result["compliant"] else ["not patched: " + pending])
            result["msg"] = "compliant" if result["compliant"] else "not compliant: " + "; ".join(result["findings"])
            return
        if errors:
            raise EngineError("the patched text would fail verification: " + "; ".join(errors))
        result.update(changed=bool(to_write), compliant=not to_write,
                      sha256_after=sha256_hex(targets[DEEPSEEK_FILE].encode("utf-8")))
        result["msg"] = ("would patch: " + pending) if to_write else "already patched"
        return
    written: List[FileProbe] = []
    try:
        for probe in to_write:
            save_backup(req.backup_dir, inst.version, probe)
        for probe in to_write:
            _replace(probe.path, targets[probe.rel].encode("utf-8"))
            written.append(probe)
        on_disk = {rel: read_bytes_text(paths[rel])[1] for rel in targets}
        evidence, checks, errors = verify_texts(on_disk, pristine, ids, paths, req.python, on_disk=True,
                                                run_command=req.run_command)
        errors += _forward(req, inst, "patch", ids, ids, {}, result)  # the files on disk, executed
        if errors:
            raise EngineError("verification failed after writing, pristine files restored: " + "; ".join(errors))
    except BaseException:
        for probe in written:
            _replace(probe.path, pristine_bytes_for_restore(req.backup_dir, inst.version, probe))
        raise
    result.update(evidence=evidence, checks=checks, changed=bool(to_write), compliant=True,
                  sha256_after=sha256_hex(read_bytes_text(paths[DEEPSEEK_FILE])[0]))
    result["msg"] = ("patched: " + pending) if to_write else "already patched"


# ------------------------------------------------------------------ backups


def _replace(path: str, data: bytes) -> None:
    """Replace an installed file, keeping its mode and (when allowed) its owner."""
    atomic_write(path, data, like=os.stat(path), durable=True)


def backup_path(backup_dir: str, version: str, rel: str) -> str:
    return os.path.join(backup_dir, "sglang-" + version, rel)


def save_backup(backup_dir: str, version: str, probe: FileProbe) -> str:
    """Copy the pristine bytes out of site-packages before the first write."""
    dest = backup_path(backup_dir, version, probe.rel)
    os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
    data = (probe.pristine_text or "").encode("utf-8")
    if sha256_hex(data) != probe.record_sha256:
        raise EngineError("refusing to back up %s: not the RECORD bytes" % probe.path)
    if not (os.path.exists(dest) and sha256_hex(read_bytes_text(dest)[0]) == probe.record_sha256):
        atomic_write(dest, data, mode=None)
    return dest


def pristine_bytes_for_restore(backup_dir: str, version: str, probe: FileProbe) -> bytes:
    """The RECORD-verified pristine bytes: from the backup, else from reversing our hunks."""
    dest = backup_path(backup_dir, version, probe.rel)
    if os.path.exists(dest):
        data = read_bytes_text(dest)[0]
        if sha256_hex(data) == probe.record_sha256:
            return data
    if probe.pristine_text is not None:
        data = probe.pristine_text.encode("utf-8")
        if sha256_hex(data) == probe.record_sha256:
            return data
    raise EngineError("no backup of %s matching RECORD sha256 %s" % (probe.path, probe.record_sha256))


# ------------------------------------------------------------------ fingerprint


def fingerprint_value(result: Dict[str, Any]) -> str:
    """The text the fingerprint's ``sglang`` component hashes, from a ``run()`` result.

    Release, deepseek_v2.py's sha256_after and the companion dict as Python prints
    it, joined by spaces: byte for byte what the role rendered in Jinja before this
    value moved here, so that a host recorded by an older collection is not
    restarted by the upgrade (tests/unit/plugins/modules/test_sglang_probe.py keeps the old rendering to prove
    it). Audit and present give the same text on a compliant host, since
    sha256_after is then the file's current hash.
    """
    def text(value: Any) -> str:
        return "" if value is None else str(value)

    return "%s %s %s" % (text(result.get("release")), text(result.get("sha256_after")), text(result.get("companion")))
