"""Root runs no code from the venv: the commands that start the release's Python run sandboxed (_sandbox.py).

The systemd sandbox itself runs on a host (the default scenario: its tripwire, the transient services of the
converge's checks, and the sandbox reaching no network); here: the argv, who it runs as, setpriv for real (the
suite runs as root), and that every command the engine starts goes through it.
"""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest

from conftest import PATCHES, USER_IDS, E
from ansible_collections.fleetops.sglang.plugins.module_utils import _sandbox as S

NOBODY = pwd.getpwnam("nobody")


def run(argv):
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_the_systemd_sandbox_runs_as_the_service_user_without_network_capabilities_or_writes(monkeypatch):
    monkeypatch.setattr(S, "systemd_running", lambda: True)
    argv = S.prefix({"mode": "auto", "user": "nobody"})
    assert argv[:2] == ["systemd-run", "--quiet"] and "--wait" in argv and "--pipe" in argv and argv[-1] == "--"
    props = [a.split("=", 1)[1] for a in argv if a.startswith("--property=")]
    for wanted in ("User=nobody", "PrivateNetwork=yes", "IPAddressDeny=any", "RestrictAddressFamilies=AF_UNIX",
                   "NoNewPrivileges=yes", "CapabilityBoundingSet=", "ProtectSystem=strict", "ProtectHome=yes",
                   "PrivateDevices=yes"):
        assert wanted in props, (wanted, props)


def test_before_the_service_user_exists_the_checks_run_as_nobody_and_never_as_root():
    assert S.identity("no-such-user-here") == ("nobody", NOBODY.pw_uid, NOBODY.pw_gid)
    assert S.identity(None)[0] == "nobody"
    with pytest.raises(S.SandboxError, match="is root"):
        S.identity("root")


def test_without_systemd_setpriv_drops_to_the_user_with_no_new_privileges(monkeypatch):
    monkeypatch.setattr(S, "systemd_running", lambda: False)
    if os.getuid() != 0:
        pytest.skip("setpriv changes users only for root")
    runner = S.runner(run, {"mode": "auto", "user": "nobody"})
    rc, out, _err = runner(["sh", "-c", "id -u; id -g; grep NoNewPrivs /proc/self/status; echo $SGLANG_SECRET"])
    lines = out.split("\n")
    assert rc == 0 and lines[0] == str(NOBODY.pw_uid) and lines[1] == str(NOBODY.pw_gid), out
    assert lines[2].split() == ["NoNewPrivs:", "1"], out
    assert lines[3] == "", "the caller's environment reached the sandbox"


def test_off_runs_as_the_caller_and_an_unknown_mode_is_refused():
    assert S.runner(run, {"mode": "off"}) is run and S.runner(run, None) is run
    with pytest.raises(S.SandboxError, match="not one of"):
        S.prefix({"mode": "chroot"})


def test_every_command_the_engine_starts_goes_through_the_sandbox(make_venv, monkeypatch, tmp_path):
    """Compile and forward checks of a patch run with the sandbox's argv in front, the forward's request
    readable by it in /run (root's); without the sandbox the same commands start as the caller."""
    monkeypatch.setattr(S, "systemd_running", lambda: True)
    monkeypatch.setattr(S.Runner, "shared_dir", str(tmp_path))  # /run is root's; the suite may not be
    seen = []

    def record(argv):
        payload = argv[-1]
        seen.append((list(argv), oct(os.stat(payload).st_mode & 0o777) if payload.endswith(".json") else None))
        return 0, '{"executed": false, "reason": "no torch"}', ""

    venv = make_venv("0.5.9")
    python = tmp_path / "python"  # not the caller's: the compile check starts it too (nothing runs it here)
    python.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    python.chmod(0o755)
    res = E.run(E.Request(venv=str(venv), layer_ids=USER_IDS, patches=dict(PATCHES.PATCHES), state="present",
                          backup_dir=str(tmp_path / "backup"), python=str(python),
                          run_command=record, sandbox={"mode": "auto", "user": "nobody"}))
    assert not res["failed"] and res["changed"], res["msg"]
    assert seen, "the engine started no command"
    prefix = S.prefix({"mode": "auto", "user": "nobody"})
    for argv, mode in seen:
        assert argv[:len(prefix)] == prefix, argv[:3]
        assert argv[len(prefix)] == str(python) and argv[len(prefix) + 1] == "-c"
        if mode is not None:
            assert mode == "0o644" and argv[-1].startswith(str(tmp_path)), (mode, argv[-1])
    # The forward check's request and the compile checks: both went through it.
    assert any(m is not None for _a, m in seen) and any(m is None for _a, m in seen)
