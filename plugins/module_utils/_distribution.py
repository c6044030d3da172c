# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which SGLang release a virtualenv holds, where, and what pip recorded about it.

``find_installation`` is the one reader of the installed release: every module and
task that needs its version, its site-packages or its RECORD asks it (tasks/install.yml
through the sglang_server_flags module), so "installed" means
the same everywhere: one ``sglang`` package under ``<venv>/lib/python3*/site-packages``
and one ``sglang-<ver>.dist-info`` beside it.

"Is this file what pip installed?" is answered by the ``sha256=`` entry that pip
wrote into ``sglang-<ver>.dist-info/RECORD``; whether RECORD itself is the published
wheel's is ``_anchors``' question.
Standard library only (hosts run python3 3.9 to 3.13).
"""

from __future__ import annotations

import base64
import glob
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

# The distribution's name: its package directory and its dist-info's prefix.
NAME = "sglang"
DEEPSEEK_FILE = "sglang/srt/models/deepseek_v2.py"
CUDA_GRAPH_FILE = "sglang/srt/model_executor/cuda_graph_runner.py"
MODEL_RUNNER_FILE = "sglang/srt/model_executor/model_runner.py"
COMPANION_FILES = (CUDA_GRAPH_FILE, MODEL_RUNNER_FILE)
# Every file the engine reads or patches, relative to site-packages.
TARGET_FILES = (DEEPSEEK_FILE,) + COMPANION_FILES


class EngineError(Exception):
    """A failure whose message is meant for the operator as is."""


class Refusal(EngineError):
    """The host must not be changed (drift, unsupported shape, PP > 1)."""


class NotInstalled(EngineError):
    """No SGLang package at all in the virtualenv (a fresh host, or before the install)."""


@dataclass
class Installation:
    """Where SGLang lives in a virtualenv and what pip recorded about it."""

    site_packages: str
    version: str
    dist_info: str
    record: Dict[str, str]  # relative path -> hex sha256, from RECORD ({} when not read)
    name: str = NAME

    def path(self, rel: str) -> str:
        return os.path.join(self.site_packages, rel)


def record_hash_to_hex(entry: str) -> Optional[str]:
    """Convert a RECORD hash (``sha256=<urlsafe b64, no padding>``) to hex."""
    if not entry.startswith("sha256="):
        return None
    b64 = entry[len("sha256="):]
    raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
    return raw.hex()


def parse_record(text: str) -> Dict[str, str]:
    """Map each RECORD path to its hex sha256 (files without a hash are skipped)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        # Paths in sglang's RECORD never contain commas; rsplit keeps us honest anyway.
        parts = line.rsplit(",", 2)
        if len(parts) != 3:
            continue
        digest = record_hash_to_hex(parts[1])
        if digest:
            out[parts[0]] = digest
    return out


def parse_metadata_version(text: str) -> Optional[str]:
    """Read ``Version:`` from a dist-info METADATA header."""
    for line in text.splitlines():
        if not line.strip():
            break
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def find_installation(venv: str, record: bool = True) -> Installation:
    """The SGLang release installed in ``venv``: its site-packages, version, dist-info and RECORD.

    Raises NotInstalled without an ``sglang`` package, EngineError for anything else
    that does not make one readable install (several, no dist-info or several, no
    Version). ``record=False`` leaves RECORD unread (``record`` is then {}): callers
    that only need the version or the site-packages do not pay for parsing it.
    """
    candidates = _package_dirs(venv)
    if not candidates:
        raise NotInstalled("no sglang package under %s/lib/python3*/site-packages" % venv)
    if len(candidates) > 1:
        raise EngineError("several sglang installs in %s: %s" % (venv, ", ".join(candidates)))
    site = os.path.dirname(candidates[0])
    infos = _dist_infos(site)
    if len(infos) != 1:
        raise EngineError("expected one %s-*.dist-info in %s, found %d" % (NAME, site, len(infos)))
    version = parse_metadata_version(_read(os.path.join(infos[0], "METADATA")))
    if not version:
        raise EngineError("no Version in %s/METADATA" % infos[0])
    hashes = parse_record(_read(os.path.join(infos[0], "RECORD"))) if record else {}
    return Installation(site_packages=site, version=version, dist_info=infos[0], record=hashes)


def installation_inputs(venv: str, files: Sequence[str] = ()) -> List[str]:
    """What ``find_installation`` reads, in order, then ``files`` (relative to site-packages).

    For a memo key: each glob as ``glob:<its hits>`` (its result is what counts), then
    METADATA and RECORD; ``files`` once the one site-packages is known. The files
    need not exist.
    """
    candidates = _package_dirs(venv)
    paths = ["glob:" + "|".join(candidates)]
    if len(candidates) != 1:
        return paths
    site = os.path.dirname(candidates[0])
    infos = _dist_infos(site)
    paths.append("glob:" + "|".join(infos))
    if len(infos) == 1:
        paths += [os.path.join(infos[0], "METADATA"), os.path.join(infos[0], "RECORD")]
    return paths + [os.path.join(site, rel) for rel in files]


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise EngineError("cannot read %s: %s" % (path, exc))


def _package_dirs(venv: str) -> List[str]:
    """Every ``<venv>/lib/python3*/site-packages/sglang``."""
    return sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", NAME)))


def all_dist_infos(venv: str) -> List[str]:
    """Every ``*.dist-info`` of every site-packages of ``venv``: its whole installed closure."""
    return sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "*.dist-info")))


def _dist_infos(site: str) -> List[str]:
    """Every ``sglang-*.dist-info`` in one site-packages."""
    return sorted(glob.glob(os.path.join(site, NAME + "-*.dist-info")))
