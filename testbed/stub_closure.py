"""A wheelhouse in which pip's resolver can install a real SGLang release with its dependencies.

The test bed installs SGLang with --no-deps (sglang_pip_no_deps: its GPU stack is gigabytes), so pip's
dependency resolution, production's default, would never run on a test host. ``build`` makes the
closure instead: the release's real wheel, the real wheels of the wheelhouse it is given where they
satisfy a requirement (packaging), and for every other requirement of the release's own metadata
(``Requires-Dist`` without an extra, markers evaluated for the host) a stub wheel of that name at a
version the requirement accepts. A stub holds only its ``.dist-info`` (no module: ``import torch``
fails on the host as it does without dependencies) and requires nothing itself, so the closure is
exactly the release's requirement list, each resolved by pip from the wheelhouse.

    python testbed/stub_closure.py WHEEL OUT_DIR [--python 3.11] [--real WHEELHOUSE]
"""
from __future__ import annotations

import argparse
import base64
import email.parser
import hashlib
import json
import re
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version


def requirements(wheel: Path, python: str = "3.11", machine: str = "x86_64") -> List[Requirement]:
    """The release's own requirements that apply on a Linux host with this Python, extras left out."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if re.match(r"[^/]+\.dist-info/METADATA$", n))
        meta = email.parser.Parser().parsestr(zf.read(name).decode())
    env = {"python_version": python, "python_full_version": python + ".0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": machine, "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    out = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and ("extra" in str(req.marker) or not req.marker.evaluate(env)):
            continue
        out.append(req)
    return out


def version_for(spec: SpecifierSet) -> str:
    """A version the specifier accepts: its pin, its lower bound, or 1.0."""
    candidates = [s.version for s in spec if s.operator in ("==", "===", ">=", "~=") and "*" not in s.version]
    candidates += [s.version.replace(".*", ".0") for s in spec if s.operator == "==" and s.version.endswith(".*")]
    candidates += ["1.0", "0.1"]
    for c in candidates:
        if spec.contains(Version(c), prereleases=True):
            return c
    raise ValueError("no version found for %s" % spec)


def stub_wheel(out: Path, name: str, version: str) -> Path:
    """A wheel of ``name`` ``version`` that installs only its metadata and requires nothing."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = "%s-%s.dist-info" % (dist, version)
    files = {
        info + "/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: test-bed stub of %s\n" % (
            name, version, name),
        info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: fleetops-testbed\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(text.encode())))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = "\n".join(record) + "\n"
    path = out / ("%s-%s-py3-none-any.whl" % (dist, version))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name_, text in files.items():
            zf.writestr(name_, text)
    return path


def _real_wheels(house: Optional[Path]) -> Dict[str, Tuple[Version, Path]]:
    found: Dict[str, Tuple[Version, Path]] = {}
    for wheel in sorted(house.glob("*.whl")) if house else []:
        dist, version = wheel.name.split("-")[:2]
        found[canonicalize_name(dist)] = (Version(version), wheel)
    return found


def build(wheel: Path, out: Path, python: str = "3.11", real: Optional[Path] = None) -> Dict[str, str]:
    """The wheelhouse ``out``: the release's wheel, and one wheel per requirement; name -> version installed."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, out / wheel.name)
    have = _real_wheels(real)
    chosen: Dict[str, str] = {}
    for req in requirements(wheel, python):
        key = canonicalize_name(req.name)
        if key in chosen:
            continue
        if key in have and req.specifier.contains(have[key][0], prereleases=True):
            shutil.copy2(have[key][1], out / have[key][1].name)
            chosen[key] = str(have[key][0])
        else:
            version = version_for(req.specifier)
            stub_wheel(out, req.name, version)
            chosen[key] = version
    return chosen


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--python", default="3.11")
    ap.add_argument("--real", type=Path, help="a wheelhouse whose real wheels are taken where they fit")
    args = ap.parse_args(argv)
    print(json.dumps(build(args.wheel, args.out, args.python, args.real), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
