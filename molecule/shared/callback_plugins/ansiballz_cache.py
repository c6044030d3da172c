# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One AnsiballZ cache for all the ansible-playbook processes of a suite run.

A test instrument, not part of the collection, loaded like run_stats.py from this
directory (no enabling needed), and inert unless SGLANG_TEST_ANSIBALLZ_CACHE names a
directory.

Each ansible-playbook process builds the payload of every module it runs once, into
``<its local tmp>/ansiballz_cache`` (ansible.executor.module_common), and removes that
directory when it ends. Building means parsing the module and every module_util it
imports: about 80 % of a worker's CPU on the role's tasks, and the same work again in
each of the suite's ~200 runs. With the variable set, this callback makes that
directory a symlink to ``$SGLANG_TEST_ANSIBALLZ_CACHE/<key>``, so a payload is built
once per suite run. ansible-core's own lock (flock on ``<payload>.lock``) and its
write-then-rename keep concurrent processes safe, as they do for the forks of one run.

ansible-core names a cached payload after the module alone, not its content: the key
is therefore a hash of everything a payload is made from (ansible-core's version, the
collections' manifests, every file under this collection's plugins/), so an edited
module or module_util gets a new directory. What a host receives is the payload the run
would have built itself; only the work of building it is shared.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: ansiballz_cache
type: aggregate
short_description: Share the AnsiballZ payload cache between the ansible-playbook processes of a test run
description:
  - Links this process's AnsiballZ cache directory to a directory under E(SGLANG_TEST_ANSIBALLZ_CACHE),
    keyed by the content of what payloads are built from; without the variable the callback does nothing.
author:
  - SGLang remediation maintainers (@fleetops)
"""

import glob
import hashlib
import os
from pathlib import Path

from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ANSIBLE_VERSION

# molecule/shared/callback_plugins -> the checkout, whose plugins/ is the collection's.
_CHECKOUT = Path(__file__).resolve().parents[3]


def cache_key(checkout: Path = _CHECKOUT, collections_paths=None) -> str:
    """A hash of what the suite's payloads are built from."""
    digest = hashlib.sha256(("ansible-core " + ANSIBLE_VERSION + "\n").encode())
    for path in sorted((checkout / "plugins").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(checkout)).encode() + b"\0" + path.read_bytes() + b"\0")
    for base in collections_paths if collections_paths is not None else C.COLLECTIONS_PATHS:
        for manifest in sorted(glob.glob(os.path.join(base, "ansible_collections", "*", "*", "MANIFEST.json"))):
            digest.update(manifest.encode() + b"\0" + Path(manifest).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def link(local_tmp: str, shared: str) -> str:
    """Make ``<local_tmp>/ansiballz_cache`` point at the shared directory for this key; its path."""
    target = os.path.join(shared, cache_key())
    os.makedirs(target, exist_ok=True)
    mine = os.path.join(local_tmp, "ansiballz_cache")
    if not os.path.lexists(mine):
        os.symlink(target, mine)
    return target


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "ansiballz_cache"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        shared = os.environ.get("SGLANG_TEST_ANSIBALLZ_CACHE")
        # Loaded in the main process before any worker forks: every worker inherits the link.
        if shared:
            link(C.DEFAULT_LOCAL_TMP, shared)
