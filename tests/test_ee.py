"""The execution environment (execution-environment.yml) as scripts/build-ee builds it, offline:
built once (or found up to date), then run with no network to check what it holds: the pinned
ansible-core and ansible-runner, fleetops.sglang installed from its tarball and ansible.posix,
the collection's modules documented, Python 3.12+.

Like the test bed's images it needs the Docker engine, which scripts/build-ee starts when it is
not running (testbed/testbed.py ee-base); nothing here is skipped.
"""
from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO

BUILD_EE = REPO / "scripts" / "build-ee"
VERSION = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
TAG = f"sglang-remediation-ee:{VERSION}"
COLLECTION_PATH = "/usr/share/ansible/collections/ansible_collections/fleetops/sglang"


def pin(lock: Path, name: str) -> str:
    for line in lock.read_text().splitlines():
        if line.startswith(name + "=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{name} is not pinned in {lock}")


CORE = pin(REPO / "requirements" / "controller.lock", "ansible-core")
RUNNER = pin(REPO / "requirements" / "ee-tools.lock", "ansible-runner")
POSIX = yaml.safe_load((REPO / "requirements" / "ee" / "collections.yml").read_text())["collections"][0]["version"]


def build() -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([str(BUILD_EE)], cwd=str(REPO), capture_output=True, text=True, timeout=1800)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-1000:]
    return proc, elapsed


@pytest.fixture(scope="module")
def ee() -> dict:
    """The image built (or found up to date), then scripts/build-ee once more."""
    first, first_s = build()
    second, second_s = build()
    return {"first": first, "first_s": first_s, "second": second, "second_s": second_s}


def run_in(*cmd: str) -> subprocess.CompletedProcess:
    """A command in a throwaway container of the image, with no network."""
    return subprocess.run(["docker", "run", "--rm", "--network", "none", TAG, *cmd],
                          capture_output=True, text=True, timeout=300)


def test_build_prints_the_tag_and_a_second_build_is_up_to_date_and_quick(ee):
    assert ee["first"].stdout.strip().splitlines()[-1] == TAG
    assert ee["second"].stdout.strip().splitlines()[-1] == TAG
    assert f"up to date: {TAG}" in ee["second"].stderr, ee["second"].stderr
    assert ee["second_s"] < 10, f"an up-to-date scripts/build-ee took {ee['second_s']:.1f}s:\n{ee['second'].stderr}"
    # The base image too is built only when missing or stale (testbed/testbed.py ee-base).
    if not os.environ.get("SGLANG_EE_BASE_IMAGE"):
        assert "[testbed] local/sglang-ee-base:trixie up to date" in ee["second"].stderr
    # Timing per step and the image's size are reported.
    assert "ansible-builder" in ee["second"].stderr and " MB, " in ee["second"].stderr


def test_image_is_labelled_and_tagged_latest(ee):
    labels = json.loads(subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", TAG],
                                       capture_output=True, text=True, check=True).stdout)
    assert labels.get("ansible-execution-environment") == "true"
    assert len(labels.get("io.sglang-remediation.ee-inputs", "")) == 64
    ids = {subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", t], capture_output=True, text=True,
                          check=True).stdout.strip() for t in (TAG, "sglang-remediation-ee:latest")}
    assert len(ids) == 1


def test_ansible_core_is_the_controllers_pin(ee):
    proc = run_in("ansible", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"ansible [core {CORE}]", proc.stdout


def test_ansible_runner_is_pinned_in_the_image_and_on_the_controller(ee):
    proc = run_in("ansible-runner", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == RUNNER
    controller = subprocess.run([str(REPO / ".cache" / "ee-venv" / "bin" / "ansible-runner"), "--version"],
                                capture_output=True, text=True, timeout=60)
    assert controller.stdout.strip() == RUNNER, controller.stderr


def test_collections_are_installed(ee):
    proc = run_in("ansible-galaxy", "collection", "list", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    found = {name: info["version"] for path in json.loads(proc.stdout).values() for name, info in path.items()}
    assert found.get("fleetops.sglang") == VERSION, found
    assert found.get("ansible.posix") == POSIX, found


def test_module_docs_resolve(ee):
    proc = run_in("ansible-doc", "-t", "module", "fleetops.sglang.sglang_probe")
    assert proc.returncode == 0, proc.stderr
    assert "fleetops.sglang.sglang_probe" in proc.stdout


def test_python_is_3_12_or_newer(ee):
    proc = run_in("python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
    assert proc.returncode == 0, proc.stderr
    assert tuple(int(p) for p in proc.stdout.strip().split(".")) >= (3, 12), proc.stdout


def test_collection_comes_from_the_tarball_not_the_checkout(ee):
    """What ships (galaxy.yml's build_ignore) and nothing of the project around it: the
    installed MANIFEST.json is the tarball's, and no checkout-only path is there."""
    tarball = REPO / ".cache" / "ee" / "collections" / f"fleetops-sglang-{VERSION}.tar.gz"
    with tarfile.open(tarball) as tf:
        manifest = json.load(tf.extractfile("MANIFEST.json"))
    proc = run_in("sh", "-c", f"cat {COLLECTION_PATH}/MANIFEST.json; echo; echo ---; cd {COLLECTION_PATH} && "
                  "for p in .git .cache .venv molecule testbed scripts collections requirements "
                  "execution-environment.yml ansible.cfg; do [ ! -e \"$p\" ] || echo \"PRESENT $p\"; done; "
                  "find tests -type f 2>/dev/null | sed 's/^/PRESENT /'")
    assert proc.returncode == 0, proc.stderr
    installed, _, rest = proc.stdout.partition("\n---\n")
    assert json.loads(installed) == manifest
    assert "PRESENT" not in rest, rest
