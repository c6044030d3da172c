"""What the checkout ships never weakens a connection: SSH host keys are checked.

An operator runs ``ansible-playbook -i inventory/production remediate.yml`` from the
checkout, and becomes root on every GPU host over it: ansible.cfg, the shipped inventories,
playbooks, examples and scripts must leave host-key checking on. Read the way Ansible reads
it (``ansible-config dump`` from the checkout, with no ANSIBLE_* variable of this shell), and
in the files themselves for what the dump cannot see (inventory variables, environment
variables a script exports). The test bed's SSH inventories check host keys against their
own known_hosts (testbed/testbed.py ssh-setup); the docker connection has none.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO

ANSIBLE_CONFIG_BIN = str(Path(sys.executable).parent / "ansible-config")
# ssh options that accept a host key nobody checked.
WEAK_SSH = re.compile(r"StrictHostKeyChecking[= ]+[\"']?(no|off|false|accept-new)\b"
                      r"|(User|Global)KnownHostsFile[= ]+[\"']?/dev/null", re.I)
# A setting or variable that turns checking off, in any file format the project ships.
CHECKING_OFF = re.compile(r"(ANSIBLE_HOST_KEY_CHECKING|ANSIBLE_SSH_HOST_KEY_CHECKING|ansible_host_key_checking"
                          r"|ansible_ssh_host_key_checking|host_key_checking)[\"']?\s*[=:]\s*[\"']?"
                          r"(false|no|off|0)\b", re.I)
# What an operator runs or copies; the test bed (molecule/, testbed/, tests/) is not shipped.
SHIPPED = ["ansible.cfg", "remediate.yml", "execution-environment.yml", "galaxy.yml", "inventory", "playbooks",
           "roles", "examples", "scripts", "plugins", "meta", ".ci"]
SSH_ARGS = ("ssh_args", "ssh_common_args", "ssh_extra_args", "sftp_extra_args", "scp_extra_args")


def dump(cwd: Path, config: str = "") -> List[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    if config:
        env["ANSIBLE_CONFIG"] = config
    proc = subprocess.run([ANSIBLE_CONFIG_BIN, "dump", "-t", "all", "--format", "json"], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def weakened(entries: List[dict]) -> List[str]:
    """Every setting of a dump that turns host-key checking off or weakens ssh's own check."""
    found = []
    for entry in entries:
        if entry.get("name") == "HOST_KEY_CHECKING" and entry.get("value") is not True:
            found.append("HOST_KEY_CHECKING = %r (%s)" % (entry.get("value"), entry.get("origin")))
        for plugin in entry.get("CONNECTION_PLUGINS", []):
            for name, options in plugin.items():
                for option in options:
                    key, value, origin = option.get("name"), option.get("value"), option.get("origin")
                    if key == "host_key_checking" and value is not True:
                        found.append("%s: host_key_checking = %r (%s)" % (name, value, origin))
                    if key in SSH_ARGS and value and WEAK_SSH.search(str(value)):
                        found.append("%s: %s = %r (%s)" % (name, key, value, origin))
    return found


def shipped_files() -> Dict[Path, str]:
    out = {}
    for top in SHIPPED:
        path = REPO / top
        for f in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            if "__pycache__" in f.parts:
                continue
            try:
                out[f] = f.read_text()
            except UnicodeDecodeError:
                continue
    return out


def test_ansible_as_run_from_the_checkout_checks_host_keys():
    entries = dump(REPO)
    assert [e for e in entries if e.get("name") == "CONFIG_FILE"][0]["value"] == str(REPO / "ansible.cfg")
    assert weakened(entries) == []


@pytest.mark.parametrize("setting", ["[defaults]\nhost_key_checking = false\n",
                                     "[ssh_connection]\nssh_args = -o StrictHostKeyChecking=no\n",
                                     "[ssh_connection]\nhost_key_checking = False\n",
                                     "[ssh_connection]\nssh_extra_args = -o UserKnownHostsFile=/dev/null\n"])
def test_the_check_finds_a_weakening_setting(tmp_path, setting):
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(setting)
    assert weakened(dump(tmp_path, str(cfg))) != [], setting


def test_no_shipped_file_turns_checking_off():
    offenders = []
    for path, text in shipped_files().items():
        for pattern in (CHECKING_OFF, WEAK_SSH):
            for match in pattern.finditer(text):
                offenders.append("%s: %s" % (path.relative_to(REPO), match.group(0)))
    assert offenders == []
    # The patterns find what they are for.
    for bad in ("host_key_checking = false", "ansible_host_key_checking: false", "export ANSIBLE_HOST_KEY_CHECKING=False",
                "ansible_ssh_common_args: -o StrictHostKeyChecking=no", "-o UserKnownHostsFile=/dev/null",
                "ANSIBLE_HOST_KEY_CHECKING: '0'", "StrictHostKeyChecking accept-new"):
        assert CHECKING_OFF.search(bad) or WEAK_SSH.search(bad), bad
    for fine in ("ansible_host_key_checking: true", "-o UserKnownHostsFile=/etc/ssh/ssh_known_hosts",
                 "StrictHostKeyChecking=yes"):
        assert not (CHECKING_OFF.search(fine) or WEAK_SSH.search(fine)), fine
