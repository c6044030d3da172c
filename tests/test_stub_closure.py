"""testbed/stub_closure.py: the closure in which pip's resolver installs a real release with its
dependencies on a test host (image-build's sglang_pip_no_deps=false case), built from the release's
own metadata."""

from __future__ import annotations

import sys
import zipfile

import pytest
from packaging.specifiers import SpecifierSet

from conftest import REPO, WHEELHOUSE, wheel_059

sys.path.insert(0, str(REPO / "testbed"))
import stub_closure  # noqa: E402


@pytest.mark.parametrize("spec,version", [
    ("==2.9.1", "2.9.1"), (">=0.20.0", "0.20.0"), ("<0.2,>=0.1.5", "0.1.5"), ("", "1.0"), ("<1", "0.1"),
    ("~=3.1", "3.1"), ("==1.2.*", "1.2.0"),
])
def test_a_version_each_specifier_accepts(spec, version):
    assert stub_closure.version_for(SpecifierSet(spec)) == version


def test_the_releases_own_requirements_for_a_linux_x86_64_host():
    """0.5.9's Requires-Dist without an extra, markers evaluated: av is aarch64's only, torchcodec x86_64's."""
    names = {r.name for r in stub_closure.requirements(wheel_059(), "3.11")}
    assert {"torch", "transformers", "packaging", "torchcodec", "tqdm"} <= names
    assert "av" not in names and len(names) == 63, sorted(names)
    arm = {r.name for r in stub_closure.requirements(wheel_059(), "3.11", machine="aarch64")}
    assert "av" in arm and "torchcodec" not in arm


def test_the_closure_holds_one_wheel_per_requirement_and_a_stub_holds_no_module(tmp_path):
    """pip's resolve of it runs on a host: image-build's test_pips_resolver_installs_the_releases_whole_closure_or_nothing."""
    house = tmp_path / "house"
    chosen = stub_closure.build(wheel_059(), house, "3.11", WHEELHOUSE)
    assert chosen["torch"] == "2.9.1" and chosen["packaging"] == "24.2", chosen
    assert len(list(house.glob("*.whl"))) == len(chosen) + 1  # and the release's own wheel
    assert (house / "packaging-24.2-py3-none-any.whl").read_bytes() == (
        WHEELHOUSE / "packaging-24.2-py3-none-any.whl").read_bytes()
    with zipfile.ZipFile(next(house.glob("torch-*.whl"))) as zf:
        names = zf.namelist()
        assert names and all(n.startswith("torch-2.9.1.dist-info/") for n in names), names
        assert "Name: torch\nVersion: 2.9.1\n" in zf.read("torch-2.9.1.dist-info/METADATA").decode()
