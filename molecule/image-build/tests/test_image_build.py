"""Image-build mode: the patched release is baked in, and nothing about services exists."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from scenario_helpers import PROJECT, run_playbook  # noqa: E402

SITE = "/opt/sglang/venv/lib/python3.{minor}/site-packages/sglang/srt/models/deepseek_v2.py"


def test_patch_is_applied_and_compiles(host):
    minor = host.check_output("python3 -c 'import sys; print(sys.version_info.minor)'")
    path = SITE.format(minor=minor)
    text = host.file(path).content_string
    assert text.count("self.capture_embedding_for_eagle3 = False") >= 1
    assert "hidden_states.clone()" in text
    assert host.run("/opt/sglang/venv/bin/python -m py_compile %s" % path).rc == 0
    assert host.file("/var/lib/sglang-remediation/backup").is_directory


def test_draft_config_lists_the_trained_layers(host):
    """The image's server is to be started on the draft's view (the draft itself is only read)."""
    cfg = json.loads(host.file("/etc/sglang/sglang.draft/config.json").content_string)
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]


def test_no_service_user_unit_or_environment(host):
    assert not host.file("/etc/systemd/system/sglang.service").exists
    assert not host.file("/etc/sglang/sglang.env").exists
    assert not host.user("sglang").exists
    assert host.run("systemctl cat sglang").rc != 0


def test_the_install_was_hash_checked(host):
    """converge.yml pins the wheel's sha256: pip installed through the role's pinned requirement."""
    req = host.file("/var/lib/sglang-remediation/requirements.txt")
    assert req.exists and req.mode == 0o644 and req.user == "root"
    assert req.content_string.startswith("sglang==0.5.9 --hash=sha256:"), req.content_string


def test_a_rollback_in_image_build_mode_puts_the_release_back_and_touches_no_service(host):
    """playbooks/rollback.yml with sglang_service_manage=false (its last test: it undoes the build):
    the draft view goes back, and no unit, server or daemon reload is involved. The build's release
    stays, sealed and never written, and is said to be left (nothing served before it)."""
    demo = yaml.safe_load((PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text())
    minor = host.check_output("python3 -c 'import sys; print(sys.version_info.minor)'")
    back = run_playbook(PROJECT / "playbooks" / "rollback.yml", extra_vars=dict(demo, sglang_service_manage=False),
                        env={"ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg")})
    assert back.rc == 0, back.tail(80)
    release = host.check_output("readlink -f /opt/sglang/venv").strip()
    assert release.startswith("/opt/sglang/releases/0.5.9-"), release
    left = json.loads(host.check_output("cat $(ls -d /var/lib/sglang-remediation/changes/*/ | tail -1)manifest.json"))["left"]
    assert "/opt/sglang/venv -> %s (installed by this run: nothing served before it)" % release in left, left
    assert "hidden_states.clone()" in host.file(SITE.format(minor=minor)).content_string
    # The draft's config as it arrived from training, byte for byte (never written), and the view the
    # build made of it gone with its config.json.
    arrived = (PROJECT / "files" / "models" / "deepseek-v3-eagle3" / "config.json").read_text()
    assert host.file("/models/DeepSeek-V3-EAGLE3/config.json").content_string == arrived
    assert not host.file("/etc/sglang/sglang.draft/config.json").exists
    assert not host.file("/etc/systemd/system/sglang.service").exists
    assert host.run("systemctl cat sglang").rc != 0


# --------------------------------------------------------------------------- a lock of the whole closure

WHEELHOUSE = PROJECT / ".cache" / "wheelhouse"
CLOSURE = ("sglang-0.5.9-py3-none-any.whl", "packaging-24.2-py3-none-any.whl")


def _lock_run(tmp: Path, tamper: bool = False, note: str = ""):
    """Converge in image-build mode from a lock of a small closure of real wheels (sglang and
    packaging, with their sha256), out of a wheelhouse of just those; ``tamper`` appends a byte to
    packaging's wheel after its hash was taken, as a poisoned mirror would serve it."""
    house = tmp / "wheelhouse"
    house.mkdir()
    lines = ["# the release's closure (test bed: without sglang's own dependencies)%s" % note]
    for name in CLOSURE:
        data = (WHEELHOUSE / name).read_bytes()
        (house / name).write_bytes(data + (b"\0" if tamper and name.startswith("packaging") else b""))
        dist, version = name.split("-")[:2]
        lines.append("%s==%s \\\n    --hash=sha256:%s" % (dist, version, hashlib.sha256(data).hexdigest()))
    lock = tmp / "closure.lock"
    lock.write_text("\n".join(lines) + "\n")
    demo = yaml.safe_load((PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text())
    return run_playbook(PROJECT / "molecule" / "default" / "converge.yml", extra_vars=dict(
        demo, sglang_service_manage=False, sglang_pip_lock=str(lock), sglang_wheelhouse=str(house)))


def test_a_lock_of_the_closure_is_installed_as_one_unit_and_its_drift_is_reported(host, tmp_path):
    before = host.check_output("readlink -f /opt/sglang/venv").strip()
    run = _lock_run(tmp_path)
    assert run.rc == 0, run.tail(80)
    # Built, so verified in full: the forward-capture check ran on the host (no torch here).
    assert "forward: not executed (no torch)" in run.output, run.tail(80)
    release = host.check_output("readlink -f /opt/sglang/venv").strip()
    assert release != before and os.path.basename(release).startswith("0.5.9-"), release
    marker = json.loads(host.file(release + "/.fleetops-release.json").content_string)
    assert marker["closure"]["packaging"]["version"] == "24.2" and marker["closure"]["sglang"]["version"] == "0.5.9"
    # Hash-checked from the lock itself, binary wheels only, nothing resolved beyond it.
    assert host.file("/var/lib/sglang-remediation/requirements.txt").content_string.count("--hash=sha256:") == 2
    # A package of the closure changed after the seal (here: its RECORD, as a reinstall by hand rewrites
    # it) is drift, named by the audit; the next run builds a release beside it.
    host.check_output("f=$(ls %s/lib/python3*/site-packages/packaging-24.2.dist-info/RECORD) && "
                      "echo 'packaging/extra.py,,' >> \"$f\"" % release)
    demo = yaml.safe_load((PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text())
    audit = run_playbook(PROJECT / "playbooks" / "audit.yml", extra_vars=dict(
        demo, sglang_service_manage=False, sglang_pip_lock=str(tmp_path / "closure.lock")),
        env={"ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg")})
    assert audit.rc != 0 and "package packaging 24.2 reinstalled or changed (its RECORD differs)" in audit.output, \
        audit.tail(80)


def test_a_tampered_wheel_of_the_lock_is_refused_and_nothing_is_switched(host, tmp_path):
    before = host.check_output("readlink -f /opt/sglang/venv").strip()
    releases = host.check_output("ls /opt/sglang/releases")
    run = _lock_run(tmp_path, tamper=True, note=" (a new lock: a new release)")
    assert run.rc != 0, run.tail(80)
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in run.output, run.tail(80)
    # The release being built is removed by the undo; the link never moved.
    assert host.check_output("readlink -f /opt/sglang/venv").strip() == before
    assert host.check_output("ls /opt/sglang/releases") == releases


# --------------------------------------------------------------------------- pip's resolver (sglang_pip_no_deps=false)

sys.path.insert(0, str(PROJECT / "testbed"))
import stub_closure  # noqa: E402

RELEASE_WHEEL = WHEELHOUSE / "sglang-0.5.9-py3-none-any.whl"


def _deps_run(house: Path):
    """Converge in image-build mode with production's default: pip resolves sglang's requirements."""
    demo = yaml.safe_load((PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text())
    return run_playbook(PROJECT / "molecule" / "default" / "converge.yml", extra_vars=dict(
        demo, sglang_service_manage=False, sglang_pip_no_deps=False, sglang_wheelhouse=str(house)))


def test_pips_resolver_installs_the_releases_whole_closure_or_nothing(host, tmp_path):
    """sglang_pip_no_deps=false, production's default, on the closure of sglang 0.5.9's own requirements
    (testbed/stub_closure.py: a stub wheel per requirement, packaging real). First without one of them:
    pip's resolver fails, naming it, and nothing is switched; then the whole closure: every requirement
    installed at the version pip chose, in a release of its own, patched."""
    minor = host.check_output("python3 -c 'import sys; print(sys.version_info.minor)'")
    before = host.check_output("readlink -f /opt/sglang/venv").strip()
    releases = host.check_output("ls /opt/sglang/releases")
    chosen = stub_closure.build(RELEASE_WHEEL, tmp_path / "closure", "3.%s" % minor, WHEELHOUSE)
    assert len(chosen) > 50 and chosen["packaging"] == "24.2" and "torch" in chosen, chosen

    short = tmp_path / "short"
    shutil.copytree(tmp_path / "closure", short)
    (missing,) = list(short.glob("tqdm-*.whl"))
    missing.unlink()
    run = _deps_run(short)
    assert run.rc != 0, run.tail(80)
    assert "No matching distribution found for tqdm" in run.output, run.tail(80)
    assert host.check_output("readlink -f /opt/sglang/venv").strip() == before
    assert host.check_output("ls /opt/sglang/releases") == releases

    run = _deps_run(tmp_path / "closure")
    assert run.rc == 0, run.tail(80)
    release = host.check_output("readlink -f /opt/sglang/venv").strip()
    assert release != before and os.path.basename(release) not in releases.split(), (release, releases)
    # The whole wheelhouse went to the host, not only the sglang wheels.
    remote = host.check_output("ls /var/cache/sglang/wheelhouse").split()
    assert {p.name for p in (tmp_path / "closure").glob("*.whl")} <= set(remote), remote
    # Read with the system's Python (root never runs a release's own: the test bed's tripwire).
    installed = json.loads(host.check_output(
        "python3 -I -c 'import glob, importlib.metadata as m, json, re, sys; "
        "site = glob.glob(sys.argv[1] + \"/lib/python3*/site-packages\"); "
        "print(json.dumps({re.sub(r\"[-_.]+\", \"-\", d.metadata[\"Name\"]).lower(): d.version "
        "for d in m.distributions(path=site)}))' %s" % release))
    assert {name: installed.get(name) for name in chosen} == chosen, installed
    assert "hidden_states.clone()" in host.file(
        "%s/lib/python3.%s/site-packages/sglang/srt/models/deepseek_v2.py" % (release, minor)).content_string
