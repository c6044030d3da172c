"""The failure contract, proven by a fault at each step where a run can stop after a change.

One host per case (molecule.yml): faults-01..12 fresh (the base image: nothing installed,
nothing served), faults-15..28 converged (the converged image, serving 0.5.9 with 15/1/16),
each put in a state (a flag change, a draft-ids change, an upgrade to 0.5.12.post1, its
patch reset to pristine, an environment change) and given one fault. faults-13..14 are the
canary case. The tests run in file order and build on each other:

1. every host is read as it is (files with sha256, mode and owner; the server's
   /proc/<MainPID>/cmdline and environ; the unit's state), then one run of the role over
   all of them, each with its own fault (the host_vars of a generated inventory, plus what
   a case does to the host: a read-only mount, a broken interpreter), and a controller
   SIGKILLed during the gate for two of them;
2. each host is judged against the contract (docs/docsite/rst/guide_restart.rst, "When a run fails"): a host that
   served serves what it served, with the same files byte for byte and the same argv and
   environment; a fresh host serves nothing, its SGLang file pristine; a failed undrain
   hook or textfile keeps the gated change; the row is complete, the lease given back,
   the textfile says failed;
3. the faults are taken away and one run converges every host with exactly one restart;
4. one more run changes nothing;
5. the canary case: a rolling remediate.yml whose canary fails its first gate;
6. the documented switches the other way from their defaults, on hosts the tests above left
   converged: a failed run left in place and rolled back by the playbook, restarts turned off,
   no textfile, no adoption, an install from a package index; a host kept drained that leaves no
   room for the next batch; a failed soak that stops the rollout; a rollback plan refused.

Faults come from the test double's switches (files/sglang_test_double: exit at start,
health 503, other settings), the role's own variables (a gate threshold, a failing hook
file, a wheelhouse holding a corrupt wheel), and the host (a read-only bind mount, the
previous release's wheel removed from the host's wheelhouse, so that putting it back fails).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from operator_runs import Operator, main_pid, sh, starts  # noqa: E402
from scenario_helpers import PROJECT, STARTS_LOG, Run, wait_until  # noqa: E402

PREFIX = os.environ.get("SGLANG_TESTBED_PREFIX", "sglang")
DISTRO = os.environ.get("MOLECULE_DISTRO", "bookworm")
WORK = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "faults"
MOLECULE_INVENTORY = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "inventory"
MATRIX = PROJECT / "molecule" / "faults" / "files" / "matrix.yml"
FAIL_HOOK = PROJECT / "molecule" / "faults" / "files" / "fail-hook.yml"
REVERT_HOOK = PROJECT / "molecule" / "faults" / "files" / "revert-patch-hook.yml"
DRAIN_HOOK = PROJECT / "examples" / "hooks" / "tasks" / "drain.yml"
DRAIN_FLAG = "/var/lib/sglang/drained"
DEMO_VARS = PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml"
DEMO = yaml.safe_load(DEMO_VARS.read_text())
# The role's own default gate (the demo's is stricter): the mis-wiring cases are judged at it.
DEFAULT_ACCEPT_MIN = yaml.safe_load((PROJECT / "roles" / "sglang" / "defaults" / "main.yml").read_text())[
    "sglang_accept_length_min"]
SITE = "/opt/sglang/venv/lib/python3*/site-packages"
SOURCES = ("sglang/srt/models/deepseek_v2.py", "sglang/srt/model_executor/cuda_graph_runner.py",
           "sglang/srt/model_executor/model_runner.py")
CONFIGS = ("/etc/sglang/sglang.draft/config.json", "/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env",
           "/var/lib/sglang-remediation/running.json")
# Model storage: only ever read, whatever fails.
MODEL_FILES = ("/models/DeepSeek-V3-EAGLE3/config.json", "/models/DeepSeek-V3/config.json")
LEASE = "/var/lib/sglang-remediation/lease.json"
TEXTFILE = "/var/lib/prometheus/node-exporter/sglang_remediation.prom"
# What systemd sets anew for every start: not part of what the server was started with.
PER_START = ("INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MEMORY_PRESSURE_WATCH",
             "MEMORY_PRESSURE_WRITE", "NOTIFY_SOCKET", "MAINPID", "MANAGERPID")
GATE_FAILED = "Fail when the server does not run the installed release, the rendered settings and a good accept length"
NEVER_HEALTHY = "Fail when the server never became healthy"
INSTALL = "Install the pinned SGLang into the new release's virtualenv"
PATCH = "Remediate the EAGLE-3 embedding capture in the release this run deploys"
RELEASES = "/opt/sglang/releases"


def host(n: int) -> str:
    return "%s-faults-%02d-%s" % (PREFIX, n, DISTRO)


def env(**extra: str) -> Dict[str, str]:
    """The demo's server environment with the case's additions."""
    return dict(DEMO["sglang_environment"], **extra)


def ro_mount(path: str, create: bool = False) -> str:
    return "%sset -e; mount --bind %s %s; mount -o remount,bind,ro %s" % (
        "mkdir -p %s; " % path if create else "", path, path, path)


# The states a case starts from, as variables of both its faulted run and its recovery.
FLAGS = {"sglang_speculative_num_steps": 7, "sglang_speculative_num_draft_tokens": 8}
# A draft retrained on other layers: its ids, and the test double told what it was trained on.
DRAFT_IDS = {"sglang_eagle3_layer_ids": [-1, 3, 30],
             "sglang_environment": env(SGLANG_TEST_DOUBLE_TRAINED_LAYERS="embed,3,30")}
UPGRADE = {"sglang_version": "0.5.12.post1"}
ENV_CHANGE = {"sglang_environment": env(SGLANG_TEST_DOUBLE_EXTRA="1")}
# Flags other than FLAGS (topk 1: draft tokens = steps + 1, or SGLang rewrites them).
UNIT_CHANGE = {"sglang_speculative_num_steps": 6, "sglang_speculative_num_draft_tokens": 7}

@dataclass
class Case:
    n: int
    state: str
    step: str
    state_vars: Dict[str, Any]
    fault_vars: Dict[str, Any] = field(default_factory=dict)
    setup: Optional[str] = None       # shell on the host, as root, before the faulted run
    teardown: Optional[str] = None    # and what takes the fault away before the recovery
    failed_task: str = ""
    keeps: bool = False               # the gated change stands (undrain hook, textfile)
    restarts_on_fault: int = 0        # healthy starts of the server during the faulted run
    killed: bool = False
    rolled_back: bool = True          # the run had written something before it failed
    half: bool = False                # putting the change back fails too

    @property
    def restarted(self) -> bool:
        """The faulted run restarted the server (the undo then restarts it on what it put back)."""
        return self.step in ("start", "health", "accept_length", "live_settings", "undrain_after_undo",
                             "wiring_draft_ids", "wiring_file_reverted") or self.keeps

    @property
    def fresh(self) -> bool:
        return self.state == "fresh"

    def vars_for(self, faulted: bool) -> Dict[str, Any]:
        out = dict(self.state_vars)
        if faulted:
            out.update(self.fault_vars)
            # A fault's environment switch joins the state's environment.
            if "sglang_environment" in self.state_vars and "sglang_environment" in self.fault_vars:
                out["sglang_environment"] = dict(self.state_vars["sglang_environment"],
                                                 **self.fault_vars["sglang_environment"])
        return out


def _bad_wheelhouse() -> str:
    return str(WORK / "bad-wheelhouse")


CASES = [
    # --- fresh hosts: nothing installed, nothing served -----------------------------------------
    # The install into the new release fails: the unfinished release is removed by the undo.
    Case(1, "fresh", "install", {}, {"sglang_wheelhouse": "@bad-wheelhouse"}, failed_task=INSTALL),
    Case(2, "fresh", "patch", {}, setup="mkdir -p -m 0700 /var/lib/sglang-remediation/backup; "
         + ro_mount("/var/lib/sglang-remediation/backup"), teardown="umount /var/lib/sglang-remediation/backup",
         failed_task=PATCH),
    # The draft view cannot be written (its directory read-only); the draft itself is never written.
    Case(3, "fresh", "draft_config", {}, setup=ro_mount("/etc/sglang", create=True),
         teardown="umount /etc/sglang",
         failed_task="Write the draft's view with the layer ids this release needs"),
    Case(4, "fresh", "service_files", {}, setup=ro_mount("/etc/systemd/system"), teardown="umount /etc/systemd/system",
         failed_task="Configure the SGLang service unit"),
    Case(5, "fresh", "start", {}, {"sglang_environment": env(SGLANG_TEST_DOUBLE_EXIT_AT_START="1")},
         failed_task=NEVER_HEALTHY),
    Case(6, "fresh", "health", {}, {"sglang_environment": env(SGLANG_TEST_DOUBLE_FAIL_HEALTH="1")},
         failed_task=NEVER_HEALTHY),
    Case(7, "fresh", "accept_length", {}, {"sglang_accept_length_min": 8}, failed_task=GATE_FAILED,
         restarts_on_fault=1),
    Case(8, "fresh", "live_settings", {}, {"sglang_environment": env(
        SGLANG_TEST_DOUBLE_RUN_SETTINGS="speculative_num_steps=3,speculative_num_draft_tokens=4")},
        failed_task=GATE_FAILED, restarts_on_fault=1),
    Case(9, "fresh", "pre_hook", {}, {"sglang_pre_restart_tasks": str(FAIL_HOOK)},
         failed_task="Fail as a drain or undrain call that the load balancer refused would"),
    Case(10, "fresh", "post_hook", {}, {"sglang_post_restart_tasks": str(FAIL_HOOK)},
         failed_task="Fail as a drain or undrain call that the load balancer refused would", keeps=True,
         restarts_on_fault=1),
    Case(11, "fresh", "textfile", {}, setup=ro_mount("/var/lib/prometheus/node-exporter", create=True),
         teardown="umount /var/lib/prometheus/node-exporter", failed_task="Write the node_exporter textfile for this run",
         keeps=True, restarts_on_fault=1),
    Case(12, "fresh", "controller_killed", {}, {"sglang_environment": env(SGLANG_TEST_DOUBLE_STARTUP_DELAY="60")},
         killed=True),
    # --- converged hosts: serving 0.5.9, patched, 15/1/16 -----------------------------------------
    Case(15, "upgrade", "install", UPGRADE, {"sglang_wheelhouse": "@bad-wheelhouse"}, failed_task=INSTALL),
    # The release that serves edited by hand (its file reset to pristine): it is never patched in place, a
    # new release is built beside it, and its patch step fails (the pristine copies' directory unusable).
    Case(16, "patch_reset", "patch", {},
         setup="set -e; d=$(ls -d %s/sglang/srt/models); cp /var/lib/sglang-remediation/backup/sglang-0.5.9/%s "
               "$d/; mv /var/lib/sglang-remediation/backup /var/lib/sglang-remediation/backup.aside; "
               "touch /var/lib/sglang-remediation/backup" % (SITE, SOURCES[0]),
         teardown="rm /var/lib/sglang-remediation/backup; "
                  "mv /var/lib/sglang-remediation/backup.aside /var/lib/sglang-remediation/backup",
         failed_task=PATCH),
    Case(17, "draft_ids", "draft_config", DRAFT_IDS, setup=ro_mount("/etc/sglang/sglang.draft"),
         teardown="umount /etc/sglang/sglang.draft",
         failed_task="Write the draft's view with the layer ids this release needs", rolled_back=False),
    Case(18, "environment", "service_files", ENV_CHANGE, setup=ro_mount("/etc/sglang"), teardown="umount /etc/sglang",
         failed_task="Write the service environment (secrets live only here)", rolled_back=False),
    Case(19, "flags", "start", FLAGS, {"sglang_environment": env(SGLANG_TEST_DOUBLE_EXIT_AT_START="1")},
         failed_task=NEVER_HEALTHY, restarts_on_fault=1),
    Case(20, "upgrade", "health", UPGRADE, {"sglang_environment": env(SGLANG_TEST_DOUBLE_FAIL_HEALTH="1")},
         failed_task=NEVER_HEALTHY, restarts_on_fault=1),
    # At most the 8 draft tokens of its flags (the preflight refuses more), above the double's ~3.4.
    Case(21, "flags", "accept_length", FLAGS, {"sglang_accept_length_min": 8}, failed_task=GATE_FAILED,
         restarts_on_fault=2),
    Case(22, "draft_ids", "live_settings", DRAFT_IDS, {"sglang_environment": env(
        SGLANG_TEST_DOUBLE_RUN_SETTINGS="speculative_num_steps=3,speculative_num_draft_tokens=4")},
        failed_task=GATE_FAILED, restarts_on_fault=2),
    Case(23, "flags", "pre_hook", FLAGS, {"sglang_pre_restart_tasks": str(FAIL_HOOK)},
         failed_task="Fail as a drain or undrain call that the load balancer refused would"),
    Case(24, "flags", "post_hook", FLAGS, {"sglang_post_restart_tasks": str(FAIL_HOOK)},
         failed_task="Fail as a drain or undrain call that the load balancer refused would", keeps=True,
         restarts_on_fault=1),
    Case(25, "flags", "textfile", FLAGS, setup=ro_mount("/var/lib/prometheus/node-exporter"),
         teardown="umount /var/lib/prometheus/node-exporter", failed_task="Write the node_exporter textfile for this run",
         keeps=True, restarts_on_fault=1),
    Case(26, "flags", "controller_killed", FLAGS, {"sglang_environment": env(SGLANG_TEST_DOUBLE_STARTUP_DELAY="60")},
         killed=True),
    # --- putting the change back fails too: the release to switch back to no longer matches its seal ---
    # (A wheel gone from the host no longer fails a put-back: nothing is reinstalled.)
    Case(27, "upgrade", "undo", UPGRADE, {"sglang_environment": env(SGLANG_TEST_DOUBLE_FAIL_HEALTH="1")},
         setup="echo '# damaged' >> $(ls %s/%s)" % (SITE, SOURCES[0]), failed_task=NEVER_HEALTHY, half=True),
    # --- mis-wired, nothing forced: the test double judges the files the server read at its start ----
    # Valid draft ids, but not the layers the draft was trained on (the double's default, embed,2,30).
    Case(29, "flags", "wiring_draft_ids", FLAGS, {"sglang_eagle3_layer_ids": [-1, 3, 30],
                                                  "sglang_accept_length_min": DEFAULT_ACCEPT_MIN},
         failed_task=GATE_FAILED, restarts_on_fault=2),
    # The patched file put back to the release's original after the patch step, before the restart.
    Case(30, "fresh", "wiring_file_reverted", {}, {"sglang_pre_restart_tasks": str(REVERT_HOOK),
                                                   "sglang_accept_length_min": DEFAULT_ACCEPT_MIN},
         failed_task=NEVER_HEALTHY),
    # --- put back and healthy again, but its undrain fails: it stays out of rotation, said so -----
    Case(28, "flags", "undrain_after_undo", FLAGS, {
        "sglang_environment": env(SGLANG_TEST_DOUBLE_FAIL_HEALTH="1"),
        "sglang_pre_restart_tasks": str(DRAIN_HOOK), "sglang_post_restart_tasks": str(FAIL_HOOK)},
        failed_task=NEVER_HEALTHY, restarts_on_fault=1),
]
BY_HOST = {host(c.n): c for c in CASES}
# The cases whose server exits at its start, nothing forced but the double's own exit (its launch
# refused, or its warmup failing on the capture): systemd restarts it every RestartSec=10 s.
CRASH_STEPS = ("start", "wiring_file_reverted")
MATRIX_CASES = [c for c in CASES if not c.killed]
CANARY, SECOND = host(13), host(14)
_state: Dict[str, Any] = {}


# --------------------------------------------------------------------------- the host, read


READ = r"""
import glob, json, os, pwd, grp, subprocess
def stat(p):
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return None
    import hashlib
    return [hashlib.sha256(open(p, "rb").read()).hexdigest(), oct(st.st_mode & 0o7777),
            pwd.getpwuid(st.st_uid).pw_name + ":" + grp.getgrgid(st.st_gid).gr_name]
site = (glob.glob("/opt/sglang/venv/lib/python3*/site-packages") or [""])[0]
files = {p: stat(p) for p in %(configs)r + %(model_files)r}
files.update({rel: stat(os.path.join(site, rel)) for rel in %(sources)r} if site else {})
infos = glob.glob(site + "/sglang-*.dist-info") if site else []
show = subprocess.run(["systemctl", "show", "-p", "MainPID", "-p", "ActiveState", "-p", "UnitFileState", "sglang"],
                      capture_output=True, text=True).stdout
unit = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
pid = int(unit.get("MainPID") or 0)
cmdline = environ = None
if pid:
    try:
        cmdline = open("/proc/%%d/cmdline" %% pid, "rb").read().decode().split("\0")
        environ = sorted(e for e in open("/proc/%%d/environ" %% pid, "rb").read().decode().split("\0")
                         if e and e.split("=", 1)[0] not in %(per_start)r)
    except OSError:
        pass
starts = sum(1 for _ in open(%(starts)r)) if os.path.exists(%(starts)r) else 0
venv = os.path.realpath("/opt/sglang/venv") if os.path.lexists("/opt/sglang/venv") else None
releases = sorted(os.listdir(%(releases)r)) if os.path.isdir(%(releases)r) else []
print(json.dumps({"files": files, "release": [os.path.basename(i)[7:-10] for i in infos], "pid": pid,
                  "venv": venv, "releases": releases,
                  "active": unit.get("ActiveState"), "enabled": unit.get("UnitFileState"), "cmdline": cmdline,
                  "environ": environ, "starts": starts, "lease": os.path.exists(%(lease)r),
                  "textfile": open(%(textfile)r).read() if os.path.exists(%(textfile)r) else None}))
""" % {"configs": CONFIGS, "model_files": MODEL_FILES, "sources": SOURCES, "per_start": PER_START, "starts": STARTS_LOG, "lease": LEASE,
       "releases": RELEASES,
       "textfile": TEXTFILE}


def read(name: str) -> Dict[str, Any]:
    """What the contract judges on a host, read on it as root."""
    return json.loads(sh(name, "python3 -c %s" % _quote(READ)))


def record_sha256(name: str, rel: str) -> str:
    """The sha256 pip recorded for ``rel`` (the pristine bytes of the installed release)."""
    script = ("import base64,glob,sys;rec=glob.glob('%s/sglang-*.dist-info/RECORD')[0];"
              "[print(base64.urlsafe_b64decode(h[7:]+'='*(-len(h[7:])%%4)).hex()) "
              "for p,h,_ in (l.rsplit(',',2) for l in open(rec) if l.count(',')>=2) if p==sys.argv[1]]" % SITE)
    return sh(name, "python3 -c %s %s" % (_quote(script), rel)).strip()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


# --------------------------------------------------------------------------- runs


def inventory(cases: List[Case], faulted: bool, extra_hosts: Optional[Dict[str, Dict[str, Any]]] = None) -> Path:
    """A second inventory source: the demo's group vars, each case's host vars."""
    inv = WORK / ("inventory-%s" % ("faulted" if faulted else "clean"))
    shutil.rmtree(inv, ignore_errors=True)
    (inv / "group_vars").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "group_vars" / "sglang.yml").write_text(DEMO_VARS.read_text())
    (inv / "hosts.yml").write_text("sglang:\n  hosts: {}\n")
    for case in cases:
        values = case.vars_for(faulted)
        if values.get("sglang_wheelhouse") == "@bad-wheelhouse":
            values["sglang_wheelhouse"] = _bad_wheelhouse()
        # A failed gate gives up after this long (the server never turns healthy here); the
        # killed runs' gate waits for their slow server, until the kill. A server that exits at its
        # start is given half an hour, which the gate must not wait out (it reads the unit). Without the
        # faults every server must come up: 28 of them restarting at once on 2 cores may take longer than 15 s.
        values.setdefault("sglang_health_timeout", 1800 if faulted and case.step in CRASH_STEPS
                          else 120 if case.killed or not faulted else 15)
        (inv / "host_vars" / ("%s.yml" % host(case.n))).write_text(yaml.safe_dump(values))
    for name, values in (extra_hosts or {}).items():
        (inv / "host_vars" / ("%s.yml" % name)).write_text(yaml.safe_dump(values))
    return inv


OPERATOR = Operator(WORK, [MOLECULE_INVENTORY],
                    callbacks="ansible.posix.profile_tasks,fleetops.sglang.sglang_report")


def run(name: str, playbook: Path, inv: Path, limit: List[str], args: List[str] = (), env_over=None) -> Run:
    """One run over the Molecule inventory plus ``inv`` (the demo's and the cases' variables)."""
    return OPERATOR.run(name, playbook, args=["-i", str(inv), "--limit", ",".join(limit), *args], env=env_over)


def rows(name: str) -> Dict[str, Dict[str, Any]]:
    return OPERATOR.rows(name)


# --------------------------------------------------------------------------- 1. the faulted run


def test_every_host_faulted_at_its_step_in_one_run():
    WORK.mkdir(parents=True, exist_ok=True)
    bad = Path(_bad_wheelhouse())
    bad.mkdir(exist_ok=True)
    for name in ("sglang-0.5.9-py3-none-any.whl", "sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.whl"):
        (bad / name).write_bytes(b"not a wheel: the faults scenario's corrupt download\n")
    # The state each run starts from is the host after its case's setup (a patch reset to pristine
    # is part of it; a read-only mount changes no file).
    for case in CASES:
        if case.setup:
            sh(host(case.n), case.setup)
    before = {name: read(name) for name in BY_HOST}
    assert all(before[host(c.n)]["active"] == ("inactive" if c.fresh else "active") for c in CASES), before
    _state["before"] = before
    inv = inventory(CASES, faulted=True)
    # The controller killed during the gate: a run of its own per host, SIGKILLed once that host's
    # server restarted (its start delay keeps the gate waiting), while the matrix's run goes on.
    killers = {host(c.n): OPERATOR.start("killed-%02d" % c.n, MATRIX, args=["-i", str(inv), "--limit", host(c.n)])
               for c in CASES if c.killed}
    matrix = OPERATOR.start("faulted", MATRIX, args=["-i", str(inv), "--limit", ",".join(host(c.n) for c in MATRIX_CASES)])
    try:
        # Each killer's run is watched: its server's restart (a new MainPID) starts the gate's wait
        # on the slow server (60 s), and the run is SIGKILLed then. A look every 2 s lands well inside
        # that wait; each look is a docker exec, and a tighter loop cost CPU the rest of the suite needs.
        pending, deadline = dict(killers), time.monotonic() + 900
        while pending and time.monotonic() < deadline:
            for name, proc in list(pending.items()):
                assert proc.poll() is None, "the run of %s ended before it could be killed" % name
                if main_pid(name) not in (before[name]["pid"], 0):
                    os.killpg(proc.pid, signal.SIGKILL)
                    del pending[name]
            time.sleep(2)
        assert not pending, "no restart seen in 900 s on %s" % sorted(pending)
        assert matrix.wait(timeout=1800) == 2, OPERATOR.log("faulted")[-6000:]
    finally:
        for proc in list(killers.values()) + [matrix]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for case in CASES:
        if case.teardown:
            sh(host(case.n), case.teardown)


def _case_ids():
    return ["%02d-%s-%s" % (c.n, c.state, c.step) for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=_case_ids())
def test_the_host_is_left_as_the_contract_says(case):
    name = host(case.n)
    before, after = _state["before"][name], read(name)
    # Whatever failed, and wherever: the model storage was only read.
    assert {p: after["files"][p] for p in MODEL_FILES} == {p: before["files"][p] for p in MODEL_FILES}, name
    if case.killed:
        # Killed during the gate: the transaction's own state, which the next run finishes.
        assert after["lease"], "a run killed mid-way cannot give its lease back"
        assert after["pid"] != before["pid"] and "--speculative-num-steps %d" % (
            case.state_vars.get("sglang_speculative_num_steps", 15)) in " ".join(after["cmdline"] or [])
        return
    row = rows("faulted")[name]
    assert row["status"] == "failed" and row["error"], row
    assert row["failed_task"] == case.failed_task, (row["failed_task"], row["error"])
    assert case.failed_task.split(":")[0] in row["error"] or row["error"].startswith(case.failed_task), row["error"]
    # Every column known when it failed.
    assert row["release"] and row["speculative_flags"], row
    if case.step not in ("install",):
        assert row["decision"] in ("patch", "native") and row["family"] and row["sha256_before"], row
        assert row["draft_layer_ids"], row
    assert not after["lease"], "the lease was not given back"
    if case.step == "textfile":
        # Its directory read-only: the write failed and the file is as it was before the run (none on
        # a fresh host, the converged run's on a converged one).
        assert after["textfile"] == before["textfile"], (before["textfile"], after["textfile"])
    else:
        # Every other failed run went past the probe: its end wrote the textfile, and it says failed.
        assert after["textfile"] is not None, "%s: no textfile at %s after a failed run" % (name, TEXTFILE)
        assert 'sglang_remediation_failure{class="error"} 1' in after["textfile"], after["textfile"]
        assert "sglang_remediation_compliant 0" in after["textfile"], after["textfile"]
    assert after["starts"] - before["starts"] == case.restarts_on_fault, (after["starts"], before["starts"])
    if case.keeps:
        # The undrain hook or the textfile failed after the gates passed: the gated change stands.
        assert row["rolled_back"] is False and row["rollback"] == [] and row["restarted"] is True, row
        assert after["active"] == "active" and after["enabled"] == "enabled"
        assert after["files"]["/var/lib/sglang-remediation/running.json"] is not None
        steps = case.state_vars.get("sglang_speculative_num_steps", 15)
        assert "--speculative-num-steps %d" % steps in " ".join(after["cmdline"]), after["cmdline"]
        return
    if case.half:
        # The release that served no longer matches its seal: it is not switched back to. The
        # configuration is put back, the link stays on the run's release, and the report says the
        # host may be half-changed, naming the damaged file, with what was put back and what was left.
        assert "putting this run's change back FAILED at Put back the files of the change set" in row["error"], row
        assert "the host may be half-changed" in row["error"], row["error"]
        assert "could not switch /opt/sglang/venv back to %s" % before["venv"] in row["error"], row["error"]
        assert "%s sha256 " % SOURCES[0] in row["error"], row["error"]
        assert row["left"] == ["/opt/sglang/venv -> %s (the release switched to by the failed run)" % after["venv"]], row
        assert os.path.basename(after["venv"]).startswith("0.5.12.post1-"), after["venv"]
        assert row["rolled_back"] is False and row["rollback"], row
        assert after["release"] == ["0.5.12.post1"]
        assert {p: after["files"][p] for p in CONFIGS} == {p: before["files"][p] for p in CONFIGS}
        # The server this run restarted was stopped before its files went back: the host, drained,
        # serves nothing until a person looks (the change set stays under the state dir).
        assert after["active"] in ("inactive", "failed"), after
        return
    changed = [p for p in before["files"] if before["files"][p] != after["files"].get(p)]
    if not case.fresh:
        # It served before: it serves exactly that release, from the same bytes, owners and modes, and
        # the releases this run built are gone.
        assert changed == [], [(p, before["files"][p], after["files"].get(p)) for p in changed]
        assert after["release"] == before["release"] == ["0.5.9"]
        assert after["venv"] == before["venv"] and after["releases"] == before["releases"], (before, after)
        assert (after["active"], after["enabled"]) == ("active", "enabled")
        assert after["cmdline"] == before["cmdline"] and after["environ"] == before["environ"]
        assert (after["pid"] != before["pid"]) is case.restarted, (after["pid"], before["pid"])
        assert row["restarted"] is case.restarted and row["restarts"] == (2 if case.restarted else 0), row
    else:
        # It served nothing: it serves nothing, its unit gone. A release that was switched to stays,
        # as it was left (the next run reuses it where it still matches its seal), and is said to be left;
        # one that was not (its build or patch failed) is removed.
        assert after["active"] in ("inactive", "failed") and after["enabled"] in ("", "not-found"), after
        for path in CONFIGS:
            assert after["files"][path] is None, (path, after["files"][path])
        if after["venv"]:
            assert after["releases"] == [os.path.basename(after["venv"])], after
            assert "/opt/sglang/venv -> %s (installed by this run: nothing served before it)" % after["venv"] \
                in row["left"], row["left"]
        else:
            assert after["releases"] == [] and after["release"] == [], after
        assert row["left"], row
    # What this run had written is put back, each line with the sha256 now in place (not shown for a file
    # other users may not read: the environment file, the keys').
    assert row["rolled_back"] is case.rolled_back and bool(row["rollback"]) is case.rolled_back, row
    for line in row["rollback"]:
        assert "restored to sha256" not in line or re.search(r"0[0-7][0-7][4-7] \S+\)$", line), line
        assert re.search(r" (restored to (sha256 [0-9a-f]{64}|its earlier content \(its sha256 is not shown: other "
                         r"users may not read it\)) \(0[0-7]{3} \S+\)|removed \(it did not exist"
                         r" before\)|switched back to %s/\S+ \(sglang [0-9.a-z]+\)|removed \(built by this run\))$"
                         % RELEASES, line), line
    if case.step in CRASH_STEPS:
        # Fail fast: the gate saw the unit leave its running state and stopped waiting within its
        # first attempt, well inside a few restart intervals, naming the exit and the journal's last lines.
        # Launch fails with exit status 1; a failed warm-up ends by SGLang's own SIGKILL of itself
        # (http_server._execute_server_warmup: kill_process_tree(os.getpid())), as the double does.
        died = "exited with status 1" if case.step == "start" else "killed by signal 9 (SIGKILL)"
        assert "the server %s before" % died in row["error"], row["error"]
        assert "without waiting out sglang_health_timeout=1800 s" in row["error"], row["error"]
        seen = re.search(r"seen ([0-9.]+) s into attempt (\d+) of the gate", row["error"])
        assert seen and int(seen.group(2)) == 1 and float(seen.group(1)) < 30, row["error"]
        assert ("exiting at once" if case.step == "start" else "model warmup failed") in row["error"], row["error"]
    if case.step == "undrain_after_undo":
        # The undo stands (the generic checks above); only the undrain failed, and the row says so.
        assert "it was put back and is healthy, but the post-restart hook (undrain) failed" in row["error"], row
        assert "it stays out of rotation" in row["error"], row
        assert sh(name, "test -e %s && echo drained" % DRAIN_FLAG).strip() == "drained"
    if case.step == "wiring_draft_ids":
        # Nothing forced: at the role's default threshold the gate refused what the server read at
        # its start; the row names the wiring (the ids) and the files are as this run remediated them.
        assert "below sglang_accept_length_min=%s" % DEFAULT_ACCEPT_MIN in row["error"], row["error"]
        assert "other hidden states than it was trained on" in row["error"], row["error"]
        assert row["draft_layer_ids"] == [-1, 3, 30], row
        assert "not the one this run remediated" not in row["error"], row["error"]
    if case.step == "wiring_file_reverted":
        # Nothing forced: the release's original capture crashes the server at its start (layer 0's
        # residual is None), and the audit after the refused gate names the file that changed under the run.
        assert "The embedding capture on disk is not the one this run remediated" in row["error"], row["error"]
        assert "not patched: sglang/srt/models/deepseek_v2.py" in row["error"], row["error"]
        assert "this run left %s" % row["sha256_after"] in row["error"], (row["sha256_after"], row["error"])
    if case.n == 20:
        # Rolled back by switching: no pip, no wheel, no index.
        assert "/opt/sglang/venv switched back to %s (sglang 0.5.9)" % before["venv"] in row["rollback"], row["rollback"]
        assert any(line.startswith(RELEASES + "/0.5.12.post1-") and line.endswith(" removed (built by this run)")
                   for line in row["rollback"]), row["rollback"]


# --------------------------------------------------------------------------- 2. recovery and rerun


def test_without_the_faults_every_host_converges_with_one_restart():
    before = {name: read(name) for name in BY_HOST}
    killed = [host(c.n) for c in CASES if c.killed]
    # A killed run's server turns healthy on its own (its start counts first).
    for name in killed:
        wait_until(lambda: starts(name) > _state["before"][name]["starts"], 120, "%s's server" % name, 2)
        before[name] = read(name)
    recovered = run("recovered", MATRIX, inventory(CASES, faulted=False), list(BY_HOST))
    assert recovered.rc == 0, recovered.tail(150)
    r = rows("recovered")
    for name, case in BY_HOST.items():
        after = read(name)
        # A host whose gated change stood (a failed undrain hook or textfile) had its one restart
        # in the faulted run: it is compliant as it is and ends at its probe, where its audit timer, which
        # that failed run left as it was (only a run that ends compliant with no error installs it), is
        # installed or brought to this run's spec: changed, without a restart.
        # A reset patch written again gives the bytes the server was started from: no restart.
        restarts, status = (0, "changed") if case.keeps or case.state == "patch_reset" else (1, "changed")
        assert r[name]["compliant"] is True and r[name]["status"] == status, (name, r[name])
        assert sh(name, "systemctl is-active sglang-audit.timer").strip() == "active", name
        assert after["starts"] - before[name]["starts"] == restarts, (name, before[name]["starts"], after["starts"])
        if restarts:
            # No drain hook here: out of rotation from the restart to healthy (and its live requests),
            # which covers the server's own start to healthy.
            out, healthy = r[name]["out_of_rotation_s"], r[name]["restart_to_healthy_s"]
            assert out is not None and healthy is not None and out >= healthy > 0, (name, out, healthy)
        assert (after["active"], after["enabled"]) == ("active", "enabled"), (name, after)
        assert not after["lease"]
        if case.killed:
            assert "took over the lease of run" in recovered.output
    _state["recovered"] = {name: read(name) for name in BY_HOST}


def test_a_run_after_that_changes_nothing():
    again = run("again", MATRIX, inventory(CASES, faulted=False), list(BY_HOST))
    assert again.rc == 0 and again.changed() == 0, again.tail(150)
    for name in BY_HOST:
        assert read(name)["starts"] == _state["recovered"][name]["starts"], name


# --------------------------------------------------------------------------- 3. the rollback playbook


ROLLBACK = PROJECT / "playbooks" / "rollback.yml"
PROJECT_CFG = {"ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg")}


def test_rolling_back_a_first_remediation_leaves_the_host_serving_nothing():
    """faults-01's last change set is its recovery, which found nothing served: it serves nothing again."""
    name = host(1)
    back = run("rollback-first", ROLLBACK, inventory(CASES, faulted=False), [name], env_over=PROJECT_CFG)
    assert back.rc == 0, back.tail(120)
    row, after = rows("rollback-first")[name], read(name)
    assert row["decision"] == "rollback" and row["rolled_back"] is True and row["restarts"] == 0, row
    assert any(line.startswith("/etc/systemd/system/sglang.service removed") for line in row["rollback"]), row
    assert after["active"] in ("inactive", "failed") and after["enabled"] in ("", "not-found"), after
    assert all(after["files"][p] is None for p in CONFIGS[1:]), after["files"]
    # Its release stays, as its first remediation sealed it, and is said to be left.
    assert "/opt/sglang/venv -> %s (installed by this run: nothing served before it)" % after["venv"] in row["left"], row
    assert after["releases"] == [os.path.basename(after["venv"])], after
    # Every change set of the host is put back now: nothing more to roll back.
    again = run("rollback-nothing", ROLLBACK, inventory(CASES, faulted=False), [name], env_over=PROJECT_CFG)
    assert again.rc == 0 and "no change set to roll back" in again.output, again.tail(80)
    assert rows("rollback-nothing")[name]["decision"] == "nothing to roll back"
    assert read(name)["files"] == after["files"]


def test_a_rollback_whose_drain_fails_changes_nothing_and_the_next_one_goes_back():
    """faults-21 (recovered onto 7/8 steps): a failing drain hook stops the rollback before anything is put back."""
    name = host(21)
    before = read(name)
    # Twice: as the playbook runs it (the host fails in its post task, after the batch), and not
    # deferred (the role's rollback entry point fails the host itself).
    for run_name, defer in (("rollback-drain-fails", []),
                            ("rollback-drain-fails-now", ["-e", "sglang_defer_failure=false"])):
        failing = run(run_name, ROLLBACK, inventory(CASES, faulted=False), [name],
                      args=["-e", "sglang_pre_restart_tasks=%s" % FAIL_HOOK, *defer], env_over=PROJECT_CFG)
        assert failing.rc == 2, failing.tail(80)
        assert ("Fail the hosts whose rollback failed" if not defer else "Fail the host whose run failed") \
            in failing.output, failing.tail(80)
        row = rows(run_name)[name]
        assert row["status"] == "failed" and "load balancer refused" in row["error"] and row["rolled_back"] is False, row
        after = read(name)
        assert {k: after[k] for k in ("files", "pid", "cmdline", "environ", "starts", "lease")} == {
            k: before[k] for k in ("files", "pid", "cmdline", "environ", "starts", "lease")}
    back = run("rollback-converged", ROLLBACK, inventory(CASES, faulted=False), [name],
               args=["-e", "sglang_post_restart_tasks=%s" % (PROJECT / "examples" / "hooks" / "tasks" / "undrain.yml")],
               env_over=PROJECT_CFG)
    assert back.rc == 0, back.tail(80)
    row, after = rows("rollback-converged")[name], read(name)
    # Back to what the converged image served: 15 steps, restarted once behind the gate.
    assert row["restarted"] is True and row["health"] == "ok" and row["release"] == "0.5.9", row
    assert "--speculative-num-steps 15" in " ".join(after["cmdline"]) and after["starts"] == before["starts"] + 1


# --------------------------------------------------------------------------- 4. the canary


def test_a_canary_that_fails_its_first_gate_serves_nothing_and_the_rollout_stops():
    inv = inventory([], faulted=True, extra_hosts={
        CANARY: {"sglang_environment": env(SGLANG_TEST_DOUBLE_FAIL_HEALTH="1"), "sglang_health_timeout": 15}})
    before = {name: read(name) for name in (CANARY, SECOND)}
    rollout = run("canary", PROJECT / "remediate.yml", inv, [CANARY, SECOND],
                  args=["-e", json.dumps({"sglang_serial": [1, "100%"]})],
                  env_over={"ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg")})
    assert rollout.rc == 2, rollout.tail(150)
    r = rows("canary")
    canary, after = r[CANARY], read(CANARY)
    assert canary["status"] == "failed" and canary["batch"] == 1 and canary["failed_task"] == NEVER_HEALTHY, canary
    # Every column known when it failed.
    assert (canary["release"], canary["decision"], canary["family"]) == ("0.5.9", "patch", "body_a_loop"), canary
    assert canary["sha256_before"] and canary["sha256_after"], canary
    assert canary["draft_layer_ids"] == [-1, 2, 30] and canary["restarted"] is True, canary
    assert canary["rolled_back"] is True and any("sglang.service removed" in x for x in canary["rollback"]), canary
    assert any(x.startswith("user sglang") for x in canary["left"]), canary["left"]
    # The canary serves nothing; the release it built stays, sealed, for the next run.
    assert after["active"] in ("inactive", "failed") and after["enabled"] in ("", "not-found"), after
    assert after["files"][SOURCES[0]][0] == canary["sha256_after"] != record_sha256(CANARY, SOURCES[0])
    assert any(x.startswith("/opt/sglang/venv -> %s/0.5.9-" % RELEASES) for x in canary["left"]), canary["left"]
    assert r[SECOND]["status"] == "not reached" and read(SECOND) == before[SECOND]
    fixed = run("canary-fixed", PROJECT / "remediate.yml", inventory([], faulted=False), [CANARY, SECOND],
                args=["-e", json.dumps({"sglang_serial": [1, "100%"]})],
                env_over={"ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg")})
    assert fixed.rc == 0, fixed.tail(150)
    assert [read(n)["starts"] - before[n]["starts"] for n in (CANARY, SECOND)] == [1, 1]
    again = run("canary-again", PROJECT / "remediate.yml", inventory([], faulted=False), [CANARY, SECOND],
                env_over={"ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg")})
    assert again.rc == 0 and again.changed() == 0, again.tail(150)


# --------------------------------------------------------------------------- 5. the switches, the other way


UNDRAIN_HOOK = PROJECT / "examples" / "hooks" / "tasks" / "undrain.yml"
HOOKS = {"sglang_pre_restart_tasks": str(DRAIN_HOOK), "sglang_post_restart_tasks": str(UNDRAIN_HOOK)}
INDEX = "/srv/sglang-index"
# The index FROM_INDEX installs from: PEP 503 over HTTP on the host's loopback, behind basic auth, as
# a private mirror is. Each request it answers records whether the password was in any process's
# argv at that moment (pip's among them) and whether the request carried the credentials.
INDEX_USER, INDEX_PASSWORD = "mirror-bot", "idx-s3cret-7f1c2e"
INDEX_LOG = "/srv/index-requests.jsonl"
INDEX_SERVER = r"""
import base64, functools, http.server, json, os
secret = open('/srv/index-secret').read().strip()
user, password = secret.split(':', 1)
expected = 'Basic ' + base64.b64encode(secret.encode()).decode()
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        leaks = []
        for pid in filter(str.isdigit, os.listdir('/proc')):
            try:
                argv = open('/proc/%s/cmdline' % pid, 'rb').read()
            except OSError:
                continue
            if password.encode() in argv:
                leaks.append(argv.replace(b'\0', b' ').decode(errors='replace'))
        authorized = self.headers.get('Authorization') == expected
        with open('/srv/index-requests.jsonl', 'a') as fh:
            fh.write(json.dumps({'path': self.path, 'authorized': authorized, 'argv_leaks': leaks}) + '\n')
        if not authorized:
            self.send_response(401)
            self.send_header('WWW-Authenticate', 'Basic realm="mirror"')
            self.end_headers()
            return
        super().do_GET()
http.server.ThreadingHTTPServer(('127.0.0.1', 8081),
                                functools.partial(Handler, directory='/srv/sglang-index')).serve_forever()
"""
REMEDIATE = PROJECT / "remediate.yml"
# Converged hosts no other test uses after the recovery, at their case's clean state (FLAGS).
LEFT, NO_RESTART, NO_ADOPT, FROM_INDEX = host(23), host(24), host(25), host(28)
# The host's audit timer of the service "sglang" and what installing it writes besides the timer.
AUDIT_TIMER = "sglang-audit.timer"
AUDIT_TIMER_FILES = ("/etc/systemd/system/sglang-audit.timer", "/etc/systemd/system/sglang-audit.service",
                     "/etc/sglang/sglang.audit.json", "/usr/local/lib/fleetops-sglang/sglang-audit.pyz")


def test_documented_switches_the_other_way_do_what_the_guides_say():
    """One run, each host with one switch the other way from its default (guide_inputs.rst):
    sglang_rollback_on_failure=false, sglang_restart_on_change=false with
    sglang_metrics_textfile=false, sglang_adopt_running=false with sglang_audit_timer=false,
    sglang_install_source=index."""
    change = env(SGLANG_TEST_DOUBLE_EXTRA="switches")
    # No recorded healthy start: with sglang_adopt_running (the adopt scenario) the probe would adopt it.
    sh(NO_ADOPT, "rm /var/lib/sglang-remediation/running.json")
    # A package index of the host's own (PEP 503, file:), holding the release the host upgrades to.
    sh(FROM_INDEX, "mkdir -p %s/simple/sglang" % INDEX)
    wheels = sorted((PROJECT / ".cache" / "wheelhouse").glob("sglang-%s-*.whl" % UPGRADE["sglang_version"]))
    assert wheels, "no sglang %s wheel in .cache/wheelhouse" % UPGRADE["sglang_version"]
    for wheel in wheels:
        subprocess.run(["docker", "cp", str(wheel), "%s:%s/simple/sglang/" % (FROM_INDEX, INDEX)], check=True)
    sh(FROM_INDEX, "cd %s/simple/sglang && for w in *.whl; do echo \"<a href=\\\"$w\\\">$w</a>\"; done > index.html"
       % INDEX)
    # Served over HTTP with basic auth; the credentials are given only in sglang_pip_index_url.
    sh(FROM_INDEX, "printf '%%s' %s > /srv/index-secret && printf '%%s' %s > /srv/index-server.py && "
       "systemd-run --unit sglang-test-index python3 /srv/index-server.py"
       % (_quote("%s:%s" % (INDEX_USER, INDEX_PASSWORD)), _quote(INDEX_SERVER)))
    wait_until(lambda: sh(FROM_INDEX, "python3 -c %s" % _quote(
        "import urllib.request,urllib.error\ntry: urllib.request.urlopen('http://127.0.0.1:8081/simple/')\n"
        "except urllib.error.HTTPError as e: print(e.code)"), check=False) == "401", 30, "the index on FROM_INDEX")
    sh(FROM_INDEX, "rm -f %s" % INDEX_LOG)
    names = (LEFT, NO_RESTART, NO_ADOPT, FROM_INDEX)
    before = {name: read(name) for name in names}
    # The recovery installed every host's audit timer (test_without_the_faults_every_host_converges_with_one_restart).
    assert sh(NO_ADOPT, "systemctl is-active %s" % AUDIT_TIMER) == "active"
    hosts = {
        LEFT: dict(FLAGS, sglang_environment=change, sglang_accept_length_min=8, sglang_rollback_on_failure=False,
                   **HOOKS),
        # Other flags too: a unit change that no restart follows, which systemd must still load.
        NO_RESTART: dict(FLAGS, **UNIT_CHANGE, sglang_environment=change, sglang_restart_on_change=False,
                         sglang_metrics_textfile=False),
        NO_ADOPT: dict(FLAGS, sglang_adopt_running=False, sglang_audit_timer=False),
        FROM_INDEX: dict(FLAGS, sglang_install_source="index",
                         sglang_pip_index_url="http://%s:%s@127.0.0.1:8081/simple" % (INDEX_USER, INDEX_PASSWORD),
                         **UPGRADE),
    }
    for values in hosts.values():
        values["sglang_health_timeout"] = 15
    res = run("switches", MATRIX, inventory([], faulted=True, extra_hosts=hosts), list(names))
    assert res.rc == 2, res.tail(150)
    r = rows("switches")
    after = {name: read(name) for name in names}

    # sglang_rollback_on_failure=false: the failed gate's files and server stay, drained, for a person;
    # the change set is kept for playbooks/rollback.yml, which puts back this run and nothing older.
    row = r[LEFT]
    assert row["status"] == "failed" and row["failed_task"] == GATE_FAILED, row
    assert "not put back (sglang_rollback_on_failure=false)" in row["error"], row["error"]
    assert row["rolled_back"] is False and row["rollback"] == [] and row["restarted"] is True, row
    assert after[LEFT]["files"]["/etc/sglang/sglang.env"] != before[LEFT]["files"]["/etc/sglang/sglang.env"]
    assert "SGLANG_TEST_DOUBLE_EXTRA=switches" in after[LEFT]["environ"], after[LEFT]["environ"]
    assert after[LEFT]["active"] == "active" and not after[LEFT]["lease"]
    assert sh(LEFT, "test -e %s && echo drained" % DRAIN_FLAG) == "drained"
    kept = sh(LEFT, "python3 -c \"import json,glob; print(json.load(open(sorted(glob.glob("
                    "'/var/lib/sglang-remediation/changes/*/manifest.json'))[-1]))['state'])\"")
    assert kept == "kept", kept
    back = run("switches-rollback", ROLLBACK, inventory([], faulted=False, extra_hosts={LEFT: dict(FLAGS, **HOOKS)}),
               [LEFT], env_over=PROJECT_CFG)
    assert back.rc == 0, back.tail(80)
    restored = read(LEFT)
    assert restored["files"] == before[LEFT]["files"] and restored["environ"] == before[LEFT]["environ"], restored
    assert sh(LEFT, "test -e %s || echo undrained" % DRAIN_FLAG) == "undrained"

    # sglang_restart_on_change=false: the files are written, nothing restarts, the row says a restart
    # is needed and why; sglang_metrics_textfile=false: the textfile is not written.
    row = r[NO_RESTART]
    assert row["status"] == "noncompliant" and row["compliant"] is False, row
    assert row["restarted"] is False and row["restart_needed"] is True, row
    assert any("environment" in reason for reason in row["restart_reasons"]), row["restart_reasons"]
    assert after[NO_RESTART]["pid"] == before[NO_RESTART]["pid"], (after[NO_RESTART]["pid"], before[NO_RESTART]["pid"])
    assert after[NO_RESTART]["starts"] == before[NO_RESTART]["starts"]
    assert after[NO_RESTART]["files"]["/etc/sglang/sglang.env"] != before[NO_RESTART]["files"]["/etc/sglang/sglang.env"]
    # The unit was rewritten with the new flags and systemd loaded it (the next start, a reboot's or a
    # crash's, runs what the files say), while the server still runs what it ran.
    unit = "/etc/systemd/system/sglang.service"
    assert after[NO_RESTART]["files"][unit] != before[NO_RESTART]["files"][unit]
    assert "unit changed since the last healthy start" in row["restart_reasons"], row["restart_reasons"]
    assert sh(NO_RESTART, "systemctl show -p NeedDaemonReload --value sglang") == "no"
    loaded = sh(NO_RESTART, "systemctl show -p ExecStart --value sglang")
    assert "--speculative-num-steps %d " % UNIT_CHANGE["sglang_speculative_num_steps"] in loaded + " ", loaded
    assert after[NO_RESTART]["cmdline"] == before[NO_RESTART]["cmdline"], after[NO_RESTART]["cmdline"]
    # The file the recovery's probe wrote is there, untouched (a rewrite would change its last-run time).
    assert before[NO_RESTART]["textfile"] is not None, "no textfile on %s before the run" % NO_RESTART
    assert after[NO_RESTART]["textfile"] == before[NO_RESTART]["textfile"]

    # sglang_adopt_running=false: a server with no recorded healthy start is restarted, not adopted.
    row = r[NO_ADOPT]
    assert row["status"] == "changed" and row["restarted"] is True and row["compliant"] is True, row
    assert after[NO_ADOPT]["starts"] == before[NO_ADOPT]["starts"] + 1
    assert after[NO_ADOPT]["files"]["/var/lib/sglang-remediation/running.json"] is not None
    # sglang_audit_timer=false ("false removes it"): the run that left the host compliant stopped and disabled
    # the timer and removed its units, its spec and its bundle (plugins/module_utils/_hostaudit.py, paths).
    assert sh(NO_ADOPT, "systemctl is-active %s" % AUDIT_TIMER, check=False) == "inactive"
    assert sh(NO_ADOPT, "ls %s 2>/dev/null" % " ".join(AUDIT_TIMER_FILES), check=False) == ""

    # sglang_install_source=index: the release comes from the index; nothing is copied to the host's wheelhouse.
    row = r[FROM_INDEX]
    assert row["status"] == "changed" and row["compliant"] is True and row["release"] == "0.5.12.post1", row
    assert after[FROM_INDEX]["release"] == ["0.5.12.post1"]
    assert "0.5.12.post1" not in sh(FROM_INDEX, "ls /var/cache/sglang/wheelhouse")
    # ... through pip's configuration, never its argv: the index saw the credentials on its requests,
    # and at none of them was the password in any process's command line. It is in no output of the
    # run, in no file of the state directory but that 0600 configuration, and in no report.
    requests = [json.loads(line) for line in sh(FROM_INDEX, "cat %s" % INDEX_LOG).splitlines()]
    assert any(r["authorized"] and r["path"].endswith(".whl") for r in requests), requests
    assert all(r["argv_leaks"] == [] for r in requests), requests
    assert sh(FROM_INDEX, "stat -c '%a %U' /var/lib/sglang-remediation/pip.conf") == "600 root"
    assert INDEX_PASSWORD in sh(FROM_INDEX, "cat /var/lib/sglang-remediation/pip.conf")
    assert sh(FROM_INDEX, "grep -rl %s /var/lib/sglang-remediation /etc/sglang /etc/systemd/system || true"
              % INDEX_PASSWORD) == "/var/lib/sglang-remediation/pip.conf"
    assert INDEX_PASSWORD not in res.output and INDEX_PASSWORD not in json.dumps(r)


def test_a_host_kept_drained_leaves_no_room_and_the_rollout_stops():
    """Batches (sglang_serial=[1, 2]), sglang_keep_failed_drained=true, sglang_max_unavailable=2: after the
    canary, a batch of two
    where one host fails and is put back, healthy but kept out of rotation. The next batch of two
    would take 3 hosts out at once, so the rollout stops there, within its failure limit (a batch
    that fails whole ends the play in Ansible itself, before this rule is asked)."""
    third, fourth = host(19), host(20)
    change = env(SGLANG_TEST_DOUBLE_EXTRA="room")
    names = (CANARY, SECOND, third, fourth)
    before = {name: read(name) for name in names}
    inv = inventory([], faulted=True, extra_hosts={
        CANARY: {"sglang_environment": change},
        SECOND: {"sglang_environment": dict(change, SGLANG_TEST_DOUBLE_FAIL_HEALTH="1"), "sglang_health_timeout": 15},
        third: dict(FLAGS, sglang_environment=change),
        fourth: dict(FLAGS, sglang_environment=change, **UPGRADE)})
    rollout = run("no-room", REMEDIATE, inv, list(names),
                  args=["-e", json.dumps(dict(HOOKS, sglang_max_unavailable=2, sglang_max_fail_percentage=50,
                                              sglang_keep_failed_drained=True, sglang_serial=[1, 2]))],
                  env_over=PROJECT_CFG)
    assert rollout.rc == 2, rollout.tail(150)
    assert ("%s: 1 hosts of this rollout are out of rotation (failed, kept drained); with the next batch of up to 2"
            " that would be more than sglang_max_unavailable allows (2)." % SECOND) in rollout.output, rollout.tail(150)
    r = rows("no-room")
    assert [r[name]["batch"] for name in (CANARY, SECOND, third)] == [1, 2, 2], r
    assert r[CANARY]["status"] == r[third]["status"] == "changed", r
    row, after = r[SECOND], read(SECOND)
    assert row["status"] == "failed" and row["rolled_back"] is True, row
    assert "stays out of rotation for a person to look at (sglang_keep_failed_drained=true)" in row["error"], row
    assert after["active"] == "active" and after["cmdline"] == before[SECOND]["cmdline"]
    assert after["environ"] == before[SECOND]["environ"]
    assert sh(SECOND, "test -e %s && echo drained" % DRAIN_FLAG) == "drained"
    # The others passed their gates and were put back into rotation.
    for name in (CANARY, third):
        assert sh(name, "test -e %s || echo undrained" % DRAIN_FLAG) == "undrained", name
    assert r[fourth]["status"] == "not reached" and read(fourth) == before[fourth]


@pytest.mark.parametrize("mode", ["batches", "window"])
def test_a_failed_soak_stops_the_rollout_and_keeps_the_change_by_default(mode):
    """sglang_on_soak_failure at its default (stop), in batches (the step's soak) and under the
    sliding window (the host's own soak): the canary's gate passes, its soak fails (its double
    degrades once the gate's requests are served); the change stands, the rest is not reached."""
    change = env(SGLANG_TEST_DOUBLE_EXTRA="soak-" + mode)
    before = {name: read(name) for name in (CANARY, SECOND)}
    inv = inventory([], faulted=True, extra_hosts={
        CANARY: {"sglang_environment": dict(change, SGLANG_TEST_DOUBLE_DEGRADE_AFTER="3")},
        SECOND: {"sglang_environment": change}})
    name = "soak-stop-" + mode
    rollout = run(name, REMEDIATE, inv, [CANARY, SECOND],
                  args=["-e", json.dumps(dict({"sglang_soak_seconds": 1},
                                              **({"sglang_serial": [1, "100%"]} if mode == "batches" else {})))],
                  env_over=PROJECT_CFG)
    assert rollout.rc == 2, rollout.tail(150)
    report = OPERATOR.report(name)
    soaks = report["run"]["soaks"]
    assert len(soaks) == 1 and soaks[0]["passed"] is False and soaks[0]["action"] == "stopped", soaks
    r = rows(name)
    after = read(CANARY)
    assert r[CANARY]["soak"].startswith("after %s: failed" % ("batch 1" if mode == "batches" else "its gate")), r
    if mode == "window":
        # The canary's batch failed whole: Ansible starts no other (the window had stopped anyway).
        assert report["run"]["window"]["stopped"] == "the soak of %s failed" % CANARY, report["run"]
    assert r[CANARY]["rolled_back"] is False and r[CANARY]["restarted"] is True, r[CANARY]
    assert "SGLANG_TEST_DOUBLE_EXTRA=soak-" + mode in after["environ"]
    assert after["starts"] == before[CANARY]["starts"] + 1
    assert r[SECOND]["status"] == "not reached" and read(SECOND) == before[SECOND]


def test_rollback_refuses_a_plan_over_the_capacity_budget_before_touching_a_host():
    before = {name: read(name) for name in (CANARY, SECOND)}
    refused = run("rollback-refused", ROLLBACK, inventory([], faulted=False), [CANARY, SECOND],
                  args=["-e", json.dumps({"sglang_serial": [2], "sglang_max_unavailable": 1})], env_over=PROJECT_CFG)
    assert refused.rc != 0, refused.tail(80)
    assert "sglang_serial=[2] would take 2 hosts out of rotation at once" in refused.output, refused.tail(80)
    assert {name: read(name) for name in (CANARY, SECOND)} == before
