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

One addition, made once when a payload is first written to the cache: the bytecode of each
of its ``.py`` files, compiled by the test hosts' Python (``SGLANG_TEST_BYTECODE_PYTHON``,
default ``python3.11``, Debian 12's) as unchecked-hash ``.pyc`` entries beside the sources.
A host imports the payload from the zip file, where Python neither writes nor finds a
``__pycache__``: every module run compiled ``basic.py`` and the other module_utils again,
about a quarter of the CPU of a module run on a host. zipimport takes a ``.pyc`` entry whose
magic number is its own and falls back to the source otherwise (Debian 13's 3.13). Compiled
from the same bytes, the code is the same; only its frames name the payload's inner path
(``<ansiballz>/ansible/...``) instead of the random directory the host unpacks it in.
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

import base64
import dataclasses
import glob
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ansible import constants as C
from ansible.executor import module_common
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ANSIBLE_VERSION

# molecule/shared/callback_plugins -> the checkout, whose plugins/ is the collection's.
_CHECKOUT = Path(__file__).resolve().parents[3]


def cache_key(checkout: Path = _CHECKOUT, collections_paths=None, bytecode: str = "") -> str:
    """A hash of what the suite's payloads are built from (``bytecode``: the Python compiling them)."""
    digest = hashlib.sha256(("ansible-core " + ANSIBLE_VERSION + "\nbytecode " + bytecode + "\n").encode())
    for path in sorted((checkout / "plugins").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(checkout)).encode() + b"\0" + path.read_bytes() + b"\0")
    for base in collections_paths if collections_paths is not None else C.COLLECTIONS_PATHS:
        for manifest in sorted(glob.glob(os.path.join(base, "ansible_collections", "*", "*", "MANIFEST.json"))):
            digest.update(manifest.encode() + b"\0" + Path(manifest).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def link(local_tmp: str, shared: str, bytecode: str = "") -> str:
    """Make ``<local_tmp>/ansiballz_cache`` point at the shared directory for this key; its path."""
    target = os.path.join(shared, cache_key(bytecode=bytecode))
    os.makedirs(target, exist_ok=True)
    mine = os.path.join(local_tmp, "ansiballz_cache")
    if not os.path.lexists(mine):
        os.symlink(target, mine)
    return target


# Run by the hosts' Python: a zip on stdin, the same zip with a .pyc beside each .py on stdout.
_COMPILE = r"""
import importlib.util, io, sys, zipfile
from importlib._bootstrap_external import _code_to_hash_pyc
src = zipfile.ZipFile(io.BytesIO(sys.stdin.buffer.read()))
out = io.BytesIO()
with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        data = src.read(info)
        dst.writestr(info, data)
        if info.filename.endswith(".py"):
            code = compile(data, "<ansiballz>/" + info.filename, "exec", dont_inherit=True)
            pyc = zipfile.ZipInfo(info.filename[:-3] + ".pyc", date_time=info.date_time)
            pyc.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(pyc, _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False))
sys.stdout.buffer.write(out.getvalue())
"""


def with_bytecode(zip_b64: bytes, python: str) -> bytes:
    """The base64 payload with each .py file's bytecode added, compiled by ``python``."""
    proc = subprocess.run([python, "-I", "-c", _COMPILE], input=base64.b64decode(zip_b64),
                          capture_output=True, check=True, timeout=120)
    return base64.b64encode(proc.stdout)


def add_bytecode_on_dump(python: str) -> None:
    """Make ansible-core's payload cache write each payload with its bytecode (once per process)."""
    cached = module_common._CachedModule
    if getattr(cached.dump, "_sglang_bytecode", False):
        return
    plain_dump = cached.dump

    def dump(self, path):
        plain_dump(dataclasses.replace(self, zip_data=with_bytecode(self.zip_data, python)), path)

    dump._sglang_bytecode = True
    cached.dump = dump


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
            python = shutil.which(os.environ.get("SGLANG_TEST_BYTECODE_PYTHON", "python3.11")) or ""
            if python:
                add_bytecode_on_dump(python)
            link(C.DEFAULT_LOCAL_TMP, shared, os.path.realpath(python) if python else "")
