"""Download SGLang wheels once and lay out just enough of them as a fake venv.

Nothing of SGLang is committed: wheels are fetched with pip at test time into
``${SGLANG_WHEEL_CACHE:-~/.cache/sglang-remediation/wheels}`` and only the files the
engine reads are extracted (deepseek_v2.py, the CUDA-graph companion files, the capture
code the forward-capture check runs, and the dist-info RECORD and METADATA), so each fake venv looks like a real install to it.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List, Optional

EXTRACT = (
    "sglang/srt/models/deepseek_v2.py",
    "sglang/srt/model_executor/cuda_graph_runner.py",
    "sglang/srt/model_executor/model_runner.py",
    # What the forward-capture check executes besides (module_utils/_forward_code.py).
    "sglang/srt/layers/communicator.py",
    "sglang/srt/layers/aux_hidden_states.py",
    "sglang/srt/layers/layer_boundary/stage.py",
)


def cache_dir() -> Path:
    """Where wheels are kept between runs (shared with scripts/check-all-releases)."""
    default = Path.home() / ".cache" / "sglang-remediation" / "wheels"
    path = Path(os.environ.get("SGLANG_WHEEL_CACHE", str(default)))
    path.mkdir(parents=True, exist_ok=True)
    return path


def find_wheel(version: str) -> Optional[Path]:
    hits = sorted(glob.glob(str(cache_dir() / ("sglang-%s-*.whl" % version))))
    return Path(hits[0]) if hits else None


def fetch_wheel(version: str, pip: Optional[List[str]] = None) -> Path:
    """Return the cached wheel, downloading it with pip (no dependencies) if needed."""
    wheel = find_wheel(version)
    if wheel is not None:
        return wheel
    cmd = (pip or [sys.executable, "-m", "pip"]) + [
        "download", "--quiet", "--no-deps", "sglang==%s" % version, "-d", str(cache_dir())]
    subprocess.run(cmd, check=True)
    wheel = find_wheel(version)
    if wheel is None:
        raise RuntimeError("pip download sglang==%s left no wheel in %s" % (version, cache_dir()))
    return wheel


def make_venv(version: str, root: Path, pyver: str = "python3.12") -> Path:
    """Build ``root/lib/<pyver>/site-packages`` holding the wheel's files we need."""
    wheel = fetch_wheel(version)
    site = root / "lib" / pyver / "site-packages"
    info = "sglang-%s.dist-info/" % version
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for name in list(EXTRACT) + [info + "RECORD", info + "METADATA"]:
            if name in names:
                zf.extract(name, site)
    return root


def extract_server_args(version: str, root: Path) -> Path:
    """``root`` as a site-packages holding the files that define the release's launch flags.

    ``sglang/srt/server_args.py`` and, from 0.5.20, ``sglang/srt/arg_groups/fields/*.py``
    (plus the dist-info METADATA): what plugins/module_utils/_release_flags.py reads.
    """
    wheel = fetch_wheel(version)
    info = "sglang-%s.dist-info/METADATA" % version
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name in ("sglang/srt/server_args.py", info) or (
                    name.startswith("sglang/srt/arg_groups/fields/") and name.endswith(".py")):
                zf.extract(name, root)
    return root


def available_versions(pip: Optional[List[str]] = None) -> List[str]:
    """All sglang versions the configured index offers, newest first (pip index)."""
    cmd = (pip or [sys.executable, "-m", "pip"]) + ["index", "versions", "sglang"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    for line in out.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise RuntimeError("pip index versions sglang printed no version list")
