"""The production path on this distribution: the converged host, reached over SSH as `ops`.

Debian 12's ssh scenario proves the SSH path in full (three hosts, the lease, unreachable
hosts, cut connections); on Debian 13 what depends on the distribution is checked here, on
this scenario's converged host, instead of converging three more: sshd, sudo with a password,
pipelining under sudo while /tmp is a tmpfs, the role's writes and restarts over it, owners
and modes, and nothing left in the operator's temporary directory. conftest.py deselects
this file on Debian 12. It runs after test_default.py, which leaves the host rolled back onto
its converged state.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from operator_runs import Operator, server_info, sh, starts  # noqa: E402
from scenario_helpers import PROJECT  # noqa: E402

NAME = "%s-default-%s" % (os.environ.get("SGLANG_TESTBED_PREFIX", "sglang"), os.environ.get("MOLECULE_DISTRO", "bookworm"))
WORK = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "ssh"
INVENTORY = WORK / "inventory"
PASSWORD_FILE = PROJECT / ".cache" / "testbed" / "ssh" / "become-password"
DEEPSEEK = "/opt/sglang/venv/lib/python3*/site-packages/sglang/srt/models/deepseek_v2.py"
OPERATOR = Operator(WORK, [INVENTORY], config=PROJECT / "ansible.cfg")
ALL_AT_ONCE = {"sglang_serial": ["100%"]}


def remediate(name, extra_vars=None, args=()):
    return OPERATOR.run(name, PROJECT / "playbooks" / "remediate.yml", dict(ALL_AT_ONCE, **(extra_vars or {})), args)


def test_the_converged_host_reached_over_ssh_with_password_sudo_changes_nothing():
    # The test bed's own SSH setup: sshd published on 127.0.0.1, the operator's key, sudo with a
    # password (the one host is the last, which gets the password), and the SSH inventory.
    subprocess.run([sys.executable, str(PROJECT / "testbed" / "testbed.py"), "ssh-setup", NAME,
                    "--inventory", str(INVENTORY / "hosts.yml"), "--fleet-dir", str(WORK / "fleet"),
                    "--group", "sglang"], check=True, capture_output=True, text=True)
    (INVENTORY / "group_vars").mkdir(exist_ok=True)
    link = INVENTORY / "group_vars" / "sglang.yml"
    if not link.exists():
        link.symlink_to(PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml")
    before = starts(NAME)
    rerun = remediate("rerun", args=["-v"])
    assert rerun.rc == 0 and rerun.changed() == 0, rerun.tail(120)
    assert starts(NAME) == before
    password = PASSWORD_FILE.read_text().strip()
    assert password and password not in rerun.output
    assert sh(NAME, "ls -A /home/ops/.ansible/tmp 2>/dev/null || true") == ""


def test_check_diff_over_ssh_shows_a_flag_change_and_writes_nothing():
    before = sh(NAME, "sha256sum /etc/systemd/system/sglang.service %s" % DEEPSEEK)
    check = remediate("check", {"sglang_speculative_num_steps": 7, "sglang_speculative_num_draft_tokens": 8},
                      ["--check", "--diff"])
    assert check.rc == 0 and "--speculative-num-steps 7" in check.output, check.tail(80)
    assert OPERATOR.rows("check")[NAME]["status"] == "would change"
    assert sh(NAME, "sha256sum /etc/systemd/system/sglang.service %s" % DEEPSEEK) == before


def test_a_flag_change_and_its_rollback_over_ssh_restart_once_each():
    before = starts(NAME)
    change = remediate("flags", {"sglang_speculative_num_steps": 7, "sglang_speculative_num_draft_tokens": 8})
    assert change.rc == 0, change.tail(80)
    assert starts(NAME) == before + 1 and server_info(NAME)["speculative_num_steps"] == 7
    # The same owners and modes as the docker path gives them; the server runs as sglang.
    assert sh(NAME, "stat -c '%U:%G %a' /etc/systemd/system/sglang.service /etc/sglang/sglang.env "
                    "/var/lib/sglang-remediation").splitlines() == ["root:root 644", "root:root 600", "root:root 700"]
    assert sh(NAME, "ps -o user= -p $(systemctl show -p MainPID --value sglang)") == "sglang"
    back = OPERATOR.run("rollback", PROJECT / "playbooks" / "rollback.yml", ALL_AT_ONCE)
    assert back.rc == 0, back.tail(80)
    assert starts(NAME) == before + 2 and server_info(NAME)["speculative_num_steps"] == 15
    assert OPERATOR.rows("rollback")[NAME]["rolled_back"] is True
    assert sh(NAME, "ls -A /home/ops/.ansible/tmp 2>/dev/null || true") == ""
