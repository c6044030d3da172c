"""One converged host per suite run, made by the role itself, kept as an image.

Several Molecule scenarios (bad input, interrupted runs, live health, the fleet)
start from "a host the role has converged" and test what happens next; only
the scenarios that test the converge itself (default, check, upgrade,
image-build, collection, ssh) converge from scratch. Converging once, instead
of once per scenario and host, saves a venv install, a patch, a first start
and a dozen remote module runs each time.

``ensure_converged`` starts one systemd container from the base image, runs the
test bed's prepare playbook and then the default scenario's converge playbook
(the role, with the demo's variables) against it over the docker connection,
checks that a second converge changes nothing, stops the container cleanly and
commits it as ``local/sglang-testbed:<suite>-converged``. Nothing is edited in
the image by hand: the state directory, the fingerprint, the unit, the
environment file and the patched SGLang are what the role wrote. The one test
bed file reset is the test double's start log, so that a container of the image
counts its own first start (at boot, from the enabled unit, as a rebooted host
does) as start 1, as after a converge.

The image carries a label with the hash of everything that went into it (the
role, the collection's plugins, the files and the test double, the prepare and
converge playbooks, the demo variables, the wheel, the controller lock, the base
image's recipe): an up-to-date image is not rebuilt, a stale one is, and a
scenario that starts from it checks the label before it trusts it.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

import testbed

REPO = Path(__file__).resolve().parents[1]
LABEL = "io.sglang-remediation.converged"
# The release the demo variables pin, whose wheel the image holds.
VERSION = "0.5.9"
# What the converge reads, as paths relative to the repository (directories whole).
INPUTS: tuple[str, ...] = (
    "roles", "plugins", "files", "galaxy.yml", "meta/runtime.yml", "playbooks/testbed-prepare.yml",
    "playbooks/library", "molecule/default/converge.yml", "inventory/demo/group_vars", "requirements/controller.lock",
    "collections/.stamp", "testbed/converged.py",
)
PREPARE = REPO / "playbooks" / "testbed-prepare.yml"
CONVERGE = REPO / "molecule" / "default" / "converge.yml"
STATS_CALLBACK = REPO / "molecule" / "shared" / "callback_plugins"
START_LOG = "/var/lib/sglang/starts.log"


def tag(suite: str) -> str:
    return f"{testbed.IMAGE_REPO}:{suite}-converged"


def _files(paths: Iterable[Path]) -> List[Path]:
    out: List[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(p for p in path.rglob("*")
                          if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
        elif path.is_file():
            out.append(path)
    return out


def wheels(wheelhouse: Path, version: str = VERSION) -> List[Path]:
    return sorted(wheelhouse.glob(f"sglang-{version}-*.whl"))


def inputs_hash(suite: str, wheelhouse: Path, repo: Path = REPO) -> str:
    """sha256 over the base image's recipe and every file the converge reads."""
    h = hashlib.sha256()
    h.update(("recipe " + testbed.recipe_hash(suite) + "\n").encode())
    for path in _files(repo / rel for rel in INPUTS) + wheels(wheelhouse):
        h.update(str(path.relative_to(repo) if repo in path.parents else path.name).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]


def image_label(image: str, runner: testbed.Runner = testbed.run) -> Optional[str]:
    res = runner(["docker", "image", "inspect", "--format", "{{ index .Config.Labels \"%s\" }}" % LABEL, image],
                 check=False)
    return res.stdout.strip() or None if res.returncode == 0 else None


def _inventory(name: str, directory: Path) -> Path:
    path = directory / "hosts.yml"
    path.write_text(testbed.render_inventory([name], "sglang", {}))
    return path


def _ansible_cfg(directory: Path) -> Path:
    """What the Molecule base config gives its runs (collections, roles, explicit facts)."""
    path = directory / "ansible.cfg"
    path.write_text("\n".join([
        "[defaults]",
        f"collections_path = {REPO / 'collections'}",
        f"roles_path = {REPO / 'roles'}",
        f"callback_plugins = {STATS_CALLBACK}",
        "gathering = explicit",
        "interpreter_python = auto_silent",
        "retry_files_enabled = false",
        "[connection]",
        "pipelining = true",
        "",
    ]))
    return path


def _playbook(playbook: Path, inventory: Path, cfg: Path, stats: Path, log: Path) -> dict:
    env = dict(os.environ, ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1", SGLANG_TEST_STATS_FILE=str(stats))
    for key in [k for k in env if k.startswith("MOLECULE_")]:
        del env[key]
    stats.unlink(missing_ok=True)
    with open(log, "a") as out:
        out.write("\n#### ansible-playbook %s\n" % playbook.name)
        out.flush()
        res = subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook)], cwd=str(REPO), env=env,
                             stdout=out, stderr=subprocess.STDOUT, check=False)
    if res.returncode != 0:
        raise SystemExit(f"testbed: {playbook.name} failed on the converged-image host (exit {res.returncode});"
                         f" see {log}")
    return json.loads(stats.read_text())["hosts"]


def build(suite: str, wheelhouse: Path, digest: str, prefix: str, runner: testbed.Runner = testbed.run,
          log_dir: Path = REPO / ".cache" / "testbed") -> None:
    """Converge one container with the role, check a rerun changes nothing, commit it."""
    name = f"{prefix}-converged-{suite}"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"converged-{suite}.log"
    log.write_text("")
    started = time.monotonic()
    runner(["docker", "rm", "-f", name], check=False)
    testbed.log(f"converging {name} with the role for {tag(suite)} (log: {log})")
    runner(["docker", "run", "-d", "--name", name, "--hostname", name, *testbed.container_flags(),
            testbed.image_tag(suite), "/lib/systemd/systemd"])
    try:
        testbed.wait_booted([name], runner)
        with tempfile.TemporaryDirectory(prefix="testbed-converged-") as tmp:
            work = Path(tmp)
            inventory, cfg, stats = _inventory(name, work), _ansible_cfg(work), work / "stats.json"
            _playbook(PREPARE, inventory, cfg, stats, log)
            first = _playbook(CONVERGE, inventory, cfg, stats, log)
            second = _playbook(CONVERGE, inventory, cfg, stats, log)
        if not first.get(name, {}).get("changed") or second.get(name, {}).get("changed") != 0:
            raise SystemExit(f"testbed: the converge of {name} is not idempotent (first run {first},"
                             f" second run {second}); see {log}")
        # The test double's own bookkeeping, not the role's: a container of the image counts its boot's start.
        runner(["docker", "exec", name, "sh", "-c", f": > {START_LOG}"])
        runner(["docker", "stop", "--time", "60", name])
        runner(["docker", "commit", "--change", f"LABEL {LABEL}={digest}",
                "--change", 'CMD ["/lib/systemd/systemd"]', name, tag(suite)])
    finally:
        runner(["docker", "rm", "-f", name], check=False)
    testbed.log(f"built {tag(suite)} ({digest}) in {time.monotonic() - started:.0f}s")


def ensure_converged(suites: Sequence[str], wheelhouse: Path, prefix: str,
                     runner: testbed.Runner = testbed.run) -> None:
    for suite in suites:
        if not wheels(wheelhouse):
            raise SystemExit(f"testbed: no sglang {VERSION} wheel in {wheelhouse}: run scripts/wheelhouse first")
        digest = inputs_hash(suite, wheelhouse)
        if image_label(tag(suite), runner) == digest:
            testbed.log(f"{tag(suite)} is up to date ({digest})")
            continue
        build(suite, wheelhouse, digest, prefix, runner)


def check_container(container: str, suite: str, wheelhouse: Path, runner: testbed.Runner = testbed.run) -> str:
    """The scenarios' guard: the container's image was made from what the checkout holds now."""
    res = runner(["docker", "inspect", "--format", "{{ index .Config.Labels \"%s\" }}" % LABEL, container],
                 check=False)
    have = res.stdout.strip() if res.returncode == 0 else ""
    want = inputs_hash(suite, wheelhouse)
    if have != want:
        raise SystemExit(f"testbed: {container} was created from a converged image made from other inputs"
                         f" ({have or 'none'}, the checkout gives {want}): run"
                         f" 'python testbed/testbed.py converged --suite {suite}' (scripts/test does), then"
                         " recreate the scenario")
    return want
