"""The collection as users get it: built, installed into an empty path, run by FQCN.

Nothing of the checkout is visible to these runs: no ansible.cfg, no roles_path, no
collections/ link. The working directory holds only an inventory for this host; the
collections path holds the installed tarball plus community.docker, which only the
test bed's docker connection needs (the collection itself depends on no collection).
The one exception is the verifiers' run_stats callback (molecule/shared), which only
writes the recap's counts to a file outside the working directory.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from scenario_helpers import PROJECT, Run, run_ansible, server_info, starts  # noqa: E402

# SGLANG_TESTBED_PREFIX keeps the containers of two checkouts tested side by side apart.
HOST = "%s-collection-%s" % (os.environ.get("SGLANG_TESTBED_PREFIX", "sglang"),
                             os.environ.get("MOLECULE_DISTRO", "bookworm"))
BIN = Path(sys.executable).parent


def clean_env(**extra: str) -> dict:
    """The environment of an operator's shell: none of Molecule's ANSIBLE_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", **extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the tarball, install it into an empty collections path, write the inventory."""
    root = tmp_path_factory.mktemp("artifact")
    build = subprocess.run([str(PROJECT / "scripts" / "build-collection"), str(root / "dist")],
                           capture_output=True, text=True, check=True, env=clean_env())
    tarball = Path(build.stdout.strip().splitlines()[-1])
    collections = root / "collections"
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", str(tarball), "-p", str(collections)],
                   capture_output=True, text=True, check=True, env=clean_env(ANSIBLE_HOME=str(root / "home")))
    for name in ("community/docker", "community/library_inventory_filtering_v1"):
        shutil.copytree(PROJECT / "collections" / "ansible_collections" / name,
                        collections / "ansible_collections" / name, symlinks=True)
    work = root / "work"
    work.mkdir()
    group_vars = yaml.safe_load((PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text())
    group_vars["sglang_wheelhouse"] = str(PROJECT / ".cache" / "wheelhouse")
    host_vars = {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3",
                 "ansible_become": False}
    (work / "inventory.yml").write_text(yaml.safe_dump(
        {"sglang": {"hosts": {HOST: host_vars}, "vars": group_vars}}, sort_keys=False))
    env = clean_env(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_HOME=str(root / "home"),
                    ANSIBLE_CALLBACKS_ENABLED="fleetops.sglang.sglang_report")
    return {"tarball": tarball, "collections": collections, "work": work, "env": env}


def playbook(installed, *args: str, timeout: int = 1200) -> Run:
    return run_ansible([str(BIN / "ansible-playbook"), "-i", "inventory.yml", *args], installed["env"],
                       cwd=installed["work"], timeout=timeout)


def report_row(installed) -> dict:
    doc = json.loads((installed["work"] / "reports" / "latest" / "fleet.json").read_text())
    rows = {r["host"]: r for r in doc["hosts"]}
    assert set(rows) == {HOST}, rows
    return rows[HOST]


def test_artifact_ships_the_collection_and_not_the_project(installed):
    with tarfile.open(installed["tarball"]) as tar:
        names = set(tar.getnames())
    for shipped in ("MANIFEST.json", "meta/runtime.yml", "plugins/modules/sglang_probe.py",
                    "plugins/module_utils/_eagle3.py", "plugins/module_utils/_patches.py", "plugins/filter/sglang.py",
                    "plugins/callback/sglang_report.py", "roles/sglang/tasks/main.yml",
                    "playbooks/remediate.yml", "playbooks/audit.yml", "playbooks/rollback.yml",
                    "playbooks/lease_break.yml",
                    "changelogs/changelog.yaml", "CHANGELOG.md"):
        assert shipped in names, shipped
    for left_out in ("molecule", "testbed", "bench", "scripts", "tests/conftest.py", "files", "inventory",
                     ".ci", ".config", "ansible.cfg", "playbooks/testbed-prepare.yml"):
        assert not any(n == left_out or n.startswith(left_out + "/") for n in names), left_out


def test_ansible_doc_reads_the_installed_modules(installed):
    proc = subprocess.run([str(BIN / "ansible-doc"), "-t", "module", "fleetops.sglang.sglang_probe"],
                          capture_output=True, text=True, env=installed["env"], cwd=str(installed["work"]))
    assert proc.returncode == 0, proc.stderr
    assert "fleetops.sglang.sglang_probe" in proc.stdout and "ATTRIBUTES" in proc.stdout


def test_remediate_by_fqcn_reaches_compliance_then_changes_nothing(host, installed):
    assert sorted(p.name for p in installed["work"].iterdir()) == ["inventory.yml"]
    first = playbook(installed, "fleetops.sglang.remediate")
    assert first.rc == 0, first.tail(120)
    assert first.recap[HOST]["changed"] > 0 and first.recap[HOST]["failed"] == 0, first.recap
    info = server_info(host)
    assert info["version"] == "0.5.9"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (15, 1, 16)
    assert starts(host) == 1
    row = report_row(installed)
    assert row["status"] == "changed" and row["compliant"] is True, row
    assert row["decision"] == "patch" and row["release"] == "0.5.9", row

    rerun = playbook(installed, "fleetops.sglang.remediate")
    assert rerun.rc == 0, rerun.tail(120)
    assert rerun.recap[HOST]["changed"] == 0, rerun.tail(120)
    assert starts(host) == 1
    row = report_row(installed)
    assert row["status"] == "ok" and row["compliant"] is True, row
    assert "SGLANG FLEET REPORT" in rerun.output, rerun.tail()


def test_audit_by_fqcn_finds_the_host_compliant(installed):
    audit = playbook(installed, "fleetops.sglang.audit")
    assert audit.rc == 0, audit.tail(120)
    assert audit.recap[HOST]["changed"] == 0, audit.recap
    assert report_row(installed)["compliant"] is True
