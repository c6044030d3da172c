"""A CPU-only venv in which SGLang's own ServerArgs runs, for
tests/unit/plugins/module_utils/test_parse_server_args.py.

Built once under ``${SGLANG_PARSER_VENV:-~/.cache/sglang-remediation/parser-venv}``
(next to the wheel cache), idempotent and locked against parallel pytest runs:

* ``base/``: a Python 3.11 venv with torch 2.13.0 (CPU) and the small packages
  ``sglang.srt.server_args`` imports, exactly as ``requirements/parser-test/base.lock``
  pins them, all ``--no-deps`` (so pip can never pull a CUDA torch), plus
  ``sglang_parser_stubs`` (triton, torchvision, sgl_kernel: GPU-only, imported but
  not run by the parse) loaded from a ``.pth`` file;
* ``releases/<version>/``: ``pip install --no-deps --target`` of the release and the
  pins of ``requirements/parser-test/sglang-<version>.lock`` (transformers differs per
  family); run with ``PYTHONPATH`` set to it, so one torch serves every release.

Each part carries a stamp (sha256 of its lock and the stubs); a changed lock
rebuilds only that part. ``SGLANG_PARSER_PIP_ARGS`` adds pip arguments (an index
that holds the CPU torch build, for instance); ``SGLANG_PARSER_PYTHON`` names the
interpreter.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LOCKS = REPO / "requirements" / "parser-test"
STUBS = HERE / "sglang_parser_stubs.py"
PY = "3.11"

sys.path.insert(0, str(HERE.parent))
import sglang_wheels  # noqa: E402


def root() -> Path:
    default = Path.home() / ".cache" / "sglang-remediation" / "parser-venv"
    return Path(os.environ.get("SGLANG_PARSER_VENV", str(default)))


def find_python() -> Optional[str]:
    """A Python 3.11 (torch 2.13.0's local CPU wheel is cp311)."""
    candidates = [os.environ.get("SGLANG_PARSER_PYTHON", ""), shutil.which("python3.11") or "",
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.11*/bin/python3"))),
                  shutil.which("python3") or ""]
    for cand in candidates:
        if not cand:
            continue
        try:
            out = subprocess.run([cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            continue
        if out == PY:
            return cand
    return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stamp(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _pip(python: str, *args: str) -> None:
    extra = shlex.split(os.environ.get("SGLANG_PARSER_PIP_ARGS", ""))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", *extra, *args], check=True)


TIMINGS: Dict[str, float] = {}


def ensure_base(python: str) -> Path:
    """The torch venv, built when its stamp does not match base.lock and the stubs."""
    base = root() / "base"
    stamp = _stamp(LOCKS / "base.lock", STUBS)
    with locked(root() / ".lock"):
        if (base / ".stamp").is_file() and (base / ".stamp").read_text() == stamp:
            return base
        start = time.monotonic()
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(base)], check=True)
        _pip(str(base / "bin" / "python"), "-r", str(LOCKS / "base.lock"))
        site = Path(glob.glob(str(base / "lib" / "python3*" / "site-packages"))[0])
        shutil.copy(STUBS, site / STUBS.name)
        (site / "sglang_parser_stubs.pth").write_text("import sglang_parser_stubs; sglang_parser_stubs.install()\n")
        (base / ".stamp").write_text(stamp)
        TIMINGS["base"] = time.monotonic() - start
    return base


def release_wheel(version: str) -> Path:
    """The release's wheel for CPython 3.11 (pure up to 0.5.10.post1, cp311 platform wheels after)."""
    cache = sglang_wheels.cache_dir()
    for pattern in ("sglang-%s-py3-none-any.whl", "sglang-%s-cp311-*.whl"):
        hits = sorted(glob.glob(str(cache / (pattern % version))))
        if hits:
            return Path(hits[0])
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", PY, "--implementation", "cp", "--platform", "manylinux_2_34_x86_64",
                    "sglang==%s" % version, "-d", str(cache)], check=True)
    return release_wheel(version)


def ensure_release(python: str, version: str) -> Path:
    """``releases/<version>``: the release --no-deps and its own pins, for PYTHONPATH."""
    base = ensure_base(python)
    lock = LOCKS / ("sglang-%s.lock" % version)
    target = root() / "releases" / version
    wheel = release_wheel(version)
    stamp = _stamp(lock) + wheel.name
    with locked(root() / ".lock"):
        if (target / ".stamp").is_file() and (target / ".stamp").read_text() == stamp:
            return target
        start = time.monotonic()
        shutil.rmtree(target, ignore_errors=True)
        _pip(str(base / "bin" / "python"), "--target", str(target), str(wheel), "-r", str(lock))
        (target / ".stamp").write_text(stamp)
        TIMINGS[version] = time.monotonic() - start
    return target


def env_for(target: Path) -> Dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(target))
    env.pop("PYTHONHOME", None)
    return env
