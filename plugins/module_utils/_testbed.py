# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The test bed's mark: what makes a host a disposable test container, and nothing else one.

The one rule for three guards (docs/docsite/rst/guide_hardening.rst, "The test bed cannot
reach production"):

- ``playbooks/testbed-prepare.yml`` refuses a host that is not marked before it writes anything
  (it overwrites model configs and installs the test double);
- the test double (``files/sglang_test_double``) refuses to start on one;
- the gate and the live reading (``_live``) refuse a server that identifies as the test double
  on one, so a double that reached a real host never passes a gate.

A host is marked when both hold:

- it runs in a container (``/.dockerenv``, which Docker creates, or ``/run/.containerenv``,
  Podman's);
- ``/etc/sglang-testbed`` holds exactly :data:`MARK_TEXT`. The test bed mounts it read-only into
  every container it creates (``testbed/testbed.py``, ``testbed/instances.py``); no package,
  image or role writes it.

Standard library only, and no import from the collection: the test double loads this file from
beside itself, where ``testbed-prepare.yml`` installs it. Must run under any host ``python3``
from 3.9.
"""

from __future__ import annotations

import os

MARK_PATH = "/etc/sglang-testbed"
MARK_TEXT = ("fleetops.sglang test bed: this host is a disposable test container, not an inference host.\n"
             "Never create this file on a real host: the test bed's playbooks and its SGLang test double\n"
             "run where it is.\n")
CONTAINER_FILES = ("/.dockerenv", "/run/.containerenv")
# Where the paths above are looked up; the unit tests point it at a directory of their own.
ROOT = "/"


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def mark_problem(root: str = "") -> str:
    """Why the host under ``root`` (default :data:`ROOT`) is not a marked test-bed container; "" when it is."""
    root = root or ROOT
    if not any(os.path.exists(_under(root, path)) for path in CONTAINER_FILES):
        return "not a container (none of %s exists)" % ", ".join(CONTAINER_FILES)
    try:
        with open(_under(root, MARK_PATH), encoding="utf-8") as fh:
            text = fh.read(len(MARK_TEXT) + 1)
    except OSError as exc:
        return "%s cannot be read (%s)" % (MARK_PATH, exc.strerror or exc)
    if text != MARK_TEXT:
        return "%s does not hold the test bed's mark" % MARK_PATH
    return ""
