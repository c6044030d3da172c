"""The production path: every run over SSH as `ops`, sudo to root, pipelining on.

prepare.yml wrote the SSH inventory (testbed.py ssh-setup): the three hosts on
their 127.0.0.1 ports, NOPASSWD sudo on the first two and a password read from
an uncommitted file on the third. The runs below go through the project's
ansible.cfg (report callback included) against that inventory; the hosts are
inspected with docker exec as root. The tests run in file order and build on
each other. None uses the testinfra ``host`` fixture, so each runs once.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from operator_runs import Operator, server_info, sh, starts  # noqa: E402
from scenario_helpers import PROJECT, read_stats  # noqa: E402

SSH_DIR = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "ssh"
INVENTORY = SSH_DIR / "inventory"
PASSWORD_FILE = PROJECT / ".cache" / "testbed" / "ssh" / "become-password"
CUT_HOOK = PROJECT / "molecule" / "ssh" / "files" / "cut-connection.yml"
DEEPSEEK = "/opt/sglang/venv/lib/python3*/site-packages/sglang/srt/models/deepseek_v2.py"
LEASE = "/var/lib/sglang-remediation/lease.json"
ALL_AT_ONCE = {"sglang_serial": ["100%"]}


def steps(n: int) -> Dict[str, int]:
    """A flag change the preflight accepts: with topk 1, num_steps + 1 draft tokens."""
    return {"sglang_speculative_num_steps": n, "sglang_speculative_num_draft_tokens": n + 1}
_state: Dict[str, Any] = {}


def hosts() -> List[str]:
    inv = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
    return sorted(inv["all"]["children"]["sglang"]["hosts"])


H1, H2, H3 = hosts() if (INVENTORY / "hosts.yml").exists() else ("h1", "h2", "h3")


OPERATOR = Operator(SSH_DIR, [INVENTORY], config=PROJECT / "ansible.cfg")


def run(name: str, playbook: str = "remediate.yml", extra_vars=None, args=()):
    """One operator run over SSH with the project's ansible.cfg (report callback included)."""
    return OPERATOR.run(name, PROJECT / "playbooks" / playbook, extra_vars or {}, args)


def command(name: str, playbook: str, extra_vars=None, args=()):
    return OPERATOR.command(name, PROJECT / "playbooks" / playbook, extra_vars or {}, args)


def stats_file(name: str) -> Path:
    return OPERATOR.stats_file(name)


def report(name: str) -> Dict[str, Any]:
    return OPERATOR.report(name)


def rows(name: str) -> Dict[str, Dict[str, Any]]:
    return OPERATOR.rows(name)


def plant_lease(name: str, **over: Any) -> None:
    holder = {"run_id": "20261201T090000Z-remediate-777", "controller": "elsewhere", "user": "alice",
              "pid": 777, "started": time.time() - 120, "taken_at": time.time() - 60}
    holder.update(over)
    subprocess.run(["docker", "exec", "-i", name, "sh", "-c", "mkdir -p -m 0700 /var/lib/sglang-remediation;"
                    " cat > %s" % LEASE], input=json.dumps(holder), text=True, check=True)


def owners_and_modes(name: str) -> str:
    paths = ["/etc/systemd/system/sglang.service", "/etc/sglang", "/etc/sglang/sglang.env", "/var/lib/sglang",
             "/var/lib/sglang-remediation", "/opt/sglang/venv", "/opt/sglang/releases", "/opt/sglang/venv/",
             DEEPSEEK, "/models/DeepSeek-V3-EAGLE3/config.json"]
    return sh(name, "stat -c '%%U:%%G %%a %%F %%n' %s" % " ".join(paths))


# --- 1. converge, idempotence, check, a flag change, audit, rollback ----------------


def test_converge_over_ssh_and_sudo():
    run1 = run("converge", extra_vars=ALL_AT_ONCE, args=["-v"])
    assert run1.rc == 0, run1.tail(120)
    assert set(run1.recap) == {H1, H2, H3}
    r = rows("converge")
    assert set(r) == {H1, H2, H3}, r
    assert all(r[h]["status"] == "changed" and r[h]["restarted"] and r[h]["health"] == "ok" for h in r), r
    assert [starts(h) for h in (H1, H2, H3)] == [1, 1, 1]
    # The password of H3's sudo is in neither the output nor the report.
    password = PASSWORD_FILE.read_text().strip()
    assert password and password not in run1.output
    assert password not in (SSH_DIR / "reports" / "converge" / "latest" / "fleet.json").read_text()
    for h in (H1, H2, H3):
        # Pipelining under sudo: nothing is left in the operator's temporary directory.
        assert sh(h, "ls -A /home/ops/.ansible/tmp 2>/dev/null || true") == "", h
        # The same owners and modes as the docker path gives them; the server runs as sglang.
        # sglang_venv is the link to the release that serves, a root-owned directory beside it.
        assert owners_and_modes(h).splitlines() == [
            "root:root 644 regular file /etc/systemd/system/sglang.service", "root:sglang 710 directory /etc/sglang",
            "root:root 600 regular file /etc/sglang/sglang.env", "sglang:sglang 750 directory /var/lib/sglang",
            "root:root 700 directory /var/lib/sglang-remediation", "root:root 777 symbolic link /opt/sglang/venv",
            "root:root 755 directory /opt/sglang/releases", "root:root 755 directory /opt/sglang/venv/",
            "root:root 644 regular file " + sh(h, "ls %s" % DEEPSEEK),
            "root:root 644 regular file /models/DeepSeek-V3-EAGLE3/config.json"]
        assert sh(h, "ps -o user= -p $(systemctl show -p MainPID --value sglang)") == "sglang"
        # The lease was given back after the report.
        assert sh(h, "test -e %s && echo held || echo free" % LEASE) == "free"
    _state["patched"] = sh(H1, "sha256sum %s | cut -d' ' -f1" % DEEPSEEK)
    _state["unit"] = sh(H1, "sha256sum /etc/systemd/system/sglang.service | cut -d' ' -f1")


def test_rerun_over_ssh_changes_nothing():
    run2 = run("idempotence", extra_vars=ALL_AT_ONCE)
    assert run2.rc == 0 and run2.changed() == 0, run2.tail(80)
    assert [starts(h) for h in (H1, H2, H3)] == [1, 1, 1]


def test_check_diff_over_ssh_changes_nothing():
    before = sh(H1, "sha256sum /etc/systemd/system/sglang.service %s" % DEEPSEEK)
    check = run("check", extra_vars=steps(7), args=["--check", "--diff", "--limit", H1])
    assert check.rc == 0, check.tail(80)
    assert "--speculative-num-steps 7" in check.output  # the unit's diff
    assert rows("check")[H1]["status"] == "would change"
    assert sh(H1, "sha256sum /etc/systemd/system/sglang.service %s" % DEEPSEEK) == before and starts(H1) == 1


def test_a_flag_change_over_ssh_restarts_once():
    change = run("flags", extra_vars=steps(7), args=["--limit", H1])
    assert change.rc == 0, change.tail(80)
    assert starts(H1) == 2 and server_info(H1)["speculative_num_steps"] == 7


def test_an_audit_over_ssh_says_another_run_holds_the_host():
    plant_lease(H1)
    audit = run("audit", playbook="audit.yml", args=["--limit", H1])
    # The inventory's 15 steps against the 7 that run: a finding, read without waiting.
    assert audit.rc == 2, audit.tail(80)
    assert rows("audit")[H1]["status"] == "noncompliant"
    assert "another run holds this host's lease: run 20261201T090000Z-remediate-777 by alice@elsewhere" in audit.output
    assert json.loads(sh(H1, "cat %s" % LEASE))["run_id"] == "20261201T090000Z-remediate-777"  # untouched


def test_a_run_that_meets_a_held_lease_fails_naming_the_holder():
    held = run("held", extra_vars={"sglang_lock_timeout": 0}, args=["--limit", H1])
    assert held.rc == 2, held.tail(80)
    error = rows("held")[H1]["error"]
    assert rows("held")[H1]["status"] == "failed"
    for part in ("run 20261201T090000Z-remediate-777", "alice@elsewhere", "controller pid 777", "run started 20",
                 "lease taken 20", "sglang_lock_timeout"):
        assert part in error, error
    assert starts(H1) == 2 and server_info(H1)["speculative_num_steps"] == 7  # nothing was touched
    # A rollback that meets the held lease fails the same way, and its row says so (the lease is
    # taken inside the rollback's block, so its run end writes the row); nothing is put back.
    back = run("rollback-held", playbook="rollback.yml", extra_vars={"sglang_lock_timeout": 0}, args=["--limit", H1])
    assert back.rc == 2, back.tail(80)
    row = rows("rollback-held")[H1]
    assert row["status"] == "failed" and row["rolled_back"] is False and row["restarts"] == 0, row
    assert "run 20261201T090000Z-remediate-777" in row["error"] and "sglang_lock_timeout" in row["error"], row
    assert starts(H1) == 2 and server_info(H1)["speculative_num_steps"] == 7
    assert json.loads(sh(H1, "cat %s" % LEASE))["run_id"] == "20261201T090000Z-remediate-777"  # not taken over
    sh(H1, "rm -f %s" % LEASE)


def test_rollback_over_ssh():
    # The newest change set is the flag change's: 15 steps come back, the patch stays.
    back = run("rollback", playbook="rollback.yml", args=["--limit", H1])
    assert back.rc == 0, back.tail(80)
    # Its plan counts the hosts within --limit, not the whole pattern.
    assert "1 hosts need work" in back.output and "batches [1]" in back.output, back.tail(80)
    row = rows("rollback")[H1]
    assert row["status"] in ("changed", "ok") and row["error"] == "" and row["rolled_back"] is True, row
    assert starts(H1) == 3 and server_info(H1)["speculative_num_steps"] == 15
    assert sh(H1, "sha256sum %s | cut -d' ' -f1" % DEEPSEEK) == _state["patched"]
    # The one before it is the first remediation, of a host that served nothing: it serves nothing
    # again; its first release stays as it was sealed, said to be left (the next remediation finds it
    # built and restarts once).
    first = run("rollback-first", playbook="rollback.yml", args=["--limit", H1])
    assert first.rc == 0, first.tail(80)
    row = rows("rollback-first")[H1]
    assert row["rolled_back"] is True, row
    release = sh(H1, "readlink -f /opt/sglang/venv")
    assert "/opt/sglang/venv -> %s (installed by this run: nothing served before it)" % release in row["left"], row
    assert sh(H1, "systemctl is-active sglang || true") in ("inactive", "failed")
    assert starts(H1) == 3
    assert sh(H1, "test -e %s && echo held || echo free" % LEASE) == "free"


# --- 2. two runs at once on one host --------------------------------------------------


def test_two_runs_started_together_restart_once():
    procs = []
    for name in ("together-a", "together-b"):
        argv, env = command(name, "remediate.yml", {}, ["--limit", H1])
        log = open(SSH_DIR / ("%s.log" % name), "w")
        procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(PROJECT)),
                      log))
    outcomes = {}
    for name, proc, log in procs:
        outcomes[name] = proc.wait(timeout=1800)
        log.close()
    outputs = {n: (SSH_DIR / ("%s.log" % n)).read_text() for n in outcomes}
    # Exactly one restart in total: the run that waited found the work done.
    assert starts(H1) == 4, outputs
    for name, rc in outcomes.items():
        assert rc == 0 or "another run holds this host's lease" in outputs[name], outputs[name][-3000:]
    # The second waited for the first's lease (or, on a slow machine, probed only once the first had
    # finished and found nothing to do: then the lease was not needed).
    waited = [n for n, o in outputs.items() if "waiting up to 300s for the lease held by run" in o]
    untouched = [n for n in outcomes if read_stats(stats_file(n)).get(H1, {}).get("changed") == 0]
    assert len(waited) == 1 or len(untouched) == 1, (waited, untouched)
    # No interleaved writes: the host is exactly as the first converge left it.
    assert sh(H1, "sha256sum %s | cut -d' ' -f1" % DEEPSEEK) == _state["patched"]
    assert sh(H1, "sha256sum /etc/systemd/system/sglang.service | cut -d' ' -f1") == _state["unit"]
    assert server_info(H1)["speculative_num_steps"] == 15
    assert sh(H1, "test -e %s && echo held || echo free" % LEASE) == "free"


# --- 3. sshd down on one host of a rolling run -------------------------------------------

ROLLING = dict(steps(9), sglang_serial=[2, 1])


def test_a_host_whose_sshd_is_down_is_unreachable_and_the_rollout_does_not_start():
    # Stopping sshd leaves running sessions; killing the operator's ends ssh's control masters too.
    sh(H2, "systemctl stop ssh.service; pkill -KILL -u ops || true")
    before = [starts(h) for h in (H1, H2, H3)]
    down = run("unreachable", extra_vars=ROLLING)
    assert down.rc == 4, down.tail(80)
    r = rows("unreachable")
    # Lost in the fleet's probe pass (no batch yet): it counts against max-fail (0 %) as a
    # host of a batch would, so no host is changed.
    assert r[H2]["status"] == "unreachable" and r[H2]["batch"] is None, r[H2]
    assert "unreachable: " in r[H2]["error"] and "ssh" in r[H2]["error"].lower(), r[H2]
    assert r[H1]["status"] == "not reached" and r[H3]["status"] == "not reached", r
    assert "1 of 3 hosts of the probe pass failed or could not be reached" in down.output, down.tail(80)
    assert report("unreachable")["run"]["result"] == "aborted"
    md = (SSH_DIR / "reports" / "unreachable" / "latest" / "fleet.md").read_text()
    assert "- **%s** (unreachable): unreachable: " % H2 in md.split("## Hosts")[0]
    assert [starts(h) for h in (H1, H2, H3)] == before
    _state["rolling_before"] = before


def test_the_rerun_with_sshd_back_converges_every_host_with_one_restart():
    sh(H2, "systemctl start ssh.service")
    again = run("unreachable-rerun", extra_vars=ROLLING)
    assert again.rc == 0, again.tail(80)
    before = _state["rolling_before"]
    assert [starts(h) for h in (H1, H2, H3)] == [before[0] + 1, before[1] + 1, before[2] + 1]
    assert all(server_info(h)["speculative_num_steps"] == 9 for h in (H1, H2, H3))


def test_a_host_lost_in_the_first_batch_stops_the_rollout_after_that_batch():
    # The canary batch is H1 and H2 (both need work); H2's connection is cut in its
    # pre-restart hook, so the probe pass reached it and the batch loses it.
    before = [starts(h) for h in (H1, H2, H3)]
    lost = run("lost-in-batch", extra_vars=dict(ROLLING, **steps(10), sglang_pre_restart_tasks=str(CUT_HOOK),
                                                testbed_cut_host=H2))
    assert lost.rc == 4, lost.tail(80)
    r = rows("lost-in-batch")
    assert r[H2]["status"] == "unreachable" and r[H2]["batch"] == 1, r[H2]
    # The sibling of the batch finished; max-fail (0 %) kept the next batch from starting.
    assert r[H1]["status"] == "changed" and r[H3]["status"] == "not reached", r
    assert "1 of 2 hosts of this batch failed or could not be reached" in lost.output, lost.tail(80)
    assert [starts(h) for h in (H1, H2, H3)] == [before[0] + 1, before[1], before[2]]
    # Left for the next test's host: H2's cut run still holds its lease; a rerun takes it over.
    rerun = run("lost-in-batch-rerun", extra_vars=dict(steps(10), sglang_serial=["100%"]))
    assert rerun.rc == 0, rerun.tail(80)
    assert [starts(h) for h in (H1, H2, H3)] == [before[0] + 1, before[1] + 1, before[2] + 1]
    assert all(server_info(h)["speculative_num_steps"] == 10 for h in (H1, H2, H3))


# --- 4. the connection cut between the patch and the restart --------------------------------


def test_a_connection_cut_before_the_restart_is_finished_by_the_rerun():
    before = starts(H1)
    cut = run("cut", extra_vars=dict(steps(11), sglang_pre_restart_tasks=str(CUT_HOOK), testbed_cut_host=H1),
              args=["--limit", H1])
    assert cut.rc == 4 and rows("cut")[H1]["status"] == "unreachable", cut.tail(80)
    assert "--speculative-num-steps 11" in sh(H1, "cat /etc/systemd/system/sglang.service")
    assert starts(H1) == before and server_info(H1)["speculative_num_steps"] == 10
    # The cut run could not give its lease back; its ansible-playbook is gone from this controller.
    assert sh(H1, "test -e %s && echo held || echo free" % LEASE) == "held"
    rerun = run("cut-rerun", extra_vars=steps(11), args=["--limit", H1])
    assert rerun.rc == 0, rerun.tail(80)
    assert "took over the lease of run" in rerun.output and "no longer exists on" in rerun.output
    assert starts(H1) == before + 1 and server_info(H1)["speculative_num_steps"] == 11
    assert rows("cut-rerun")[H1]["compliant"] is True
    assert sh(H1, "test -e %s && echo held || echo free" % LEASE) == "free"


# --- 5. the execution environment, run as AWX runs it -------------------------------------------

RUNNER = PROJECT / ".cache" / "ee-venv" / "bin" / "ansible-runner"
RUNNER_DIR = SSH_DIR / "runner"


def ee_image() -> str:
    """scripts/build-ee's image (the suite built it before the scenarios; up to date, this takes seconds)."""
    proc = subprocess.run([str(PROJECT / "scripts" / "build-ee")], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def private_data_dir(image: str) -> Path:
    """ansible-runner's private data dir as AWX lays it out for a job: project/ (a project that runs the
    collection's playbooks from the image), inventory/, env/{settings,extravars,ssh_key}. The SSH
    inventory's files (known_hosts, the sudo password) are copied in: the container sees /runner only."""
    pdd = RUNNER_DIR
    for sub in ("project", "inventory/group_vars", "env", "secrets", "wheelhouse"):
        (pdd / sub).mkdir(parents=True, exist_ok=True)
    for book in ("remediate", "audit"):
        (pdd / "project" / ("%s.yml" % book)).write_text(
            "---\n- name: The collection's %s, from the execution environment\n"
            "  ansible.builtin.import_playbook: fleetops.sglang.%s\n" % (book, book))
    (pdd / "project" / "ansible.cfg").write_text(
        "[defaults]\ncallbacks_enabled = fleetops.sglang.sglang_report\ninterpreter_python = auto_silent\n"
        "[ssh_connection]\npipelining = True\n")
    inv = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
    group = inv["all"]["children"]["sglang"]
    shutil_copy(SSH_DIR / "fleet" / "known_hosts", pdd / "inventory" / "known_hosts")
    shutil_copy(PASSWORD_FILE, pdd / "secrets" / "become-password")
    for values in group["hosts"].values():
        if "ansible_become_password" in (values or {}):
            values["ansible_become_password"] = "{{ lookup('ansible.builtin.file', '/runner/secrets/become-password') }}"
    key = Path(group["vars"].pop("ansible_ssh_private_key_file"))
    group["vars"]["ansible_ssh_common_args"] = "-o UserKnownHostsFile=/runner/inventory/known_hosts"
    group["vars"]["ansible_control_path_dir"] = "/tmp/cp"
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inv))
    demo = yaml.safe_load((PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text())
    for wheel in (PROJECT / ".cache" / "wheelhouse").glob("sglang-%s-*.whl" % demo["sglang_version"]):
        shutil_copy(wheel, pdd / "wheelhouse" / wheel.name)
    demo["sglang_wheelhouse"] = "/runner/wheelhouse"
    (pdd / "inventory" / "group_vars" / "sglang.yml").write_text(yaml.safe_dump(demo))
    # The machine credential, as AWX hands it to ansible-runner (an ssh-agent in the container holds it).
    shutil_copy(key, pdd / "env" / "ssh_key")
    (pdd / "env" / "settings").write_text(yaml.safe_dump({
        "process_isolation": True, "process_isolation_executable": "docker", "container_image": image,
        # sshd is published on the controller's loopback: the job's container shares its network.
        "container_options": ["--network=host"], "suppress_ansible_output": True}))
    return pdd


def shutil_copy(src: Path, dst: Path) -> None:
    dst.write_bytes(Path(src).read_bytes())
    os.chmod(dst, 0o600)


def runner_job(ident: str, playbook: str, extra_vars: Dict[str, Any]) -> Dict[str, Any]:
    """One ansible-runner job in the image: its rc, its status, the recap's changed counts (job events) and the
    fleet report it left in its artifacts."""
    (RUNNER_DIR / "env" / "extravars").write_text(yaml.safe_dump(extra_vars))
    proc = subprocess.run([str(RUNNER), "run", str(RUNNER_DIR), "-p", playbook, "--ident", ident],
                          capture_output=True, text=True, timeout=1200)
    artifacts = RUNNER_DIR / "artifacts" / ident
    stdout = (artifacts / "stdout").read_text() if (artifacts / "stdout").exists() else proc.stdout
    events = [json.loads(p.read_text()) for p in (artifacts / "job_events").glob("*.json")]
    stats = [e for e in events if e.get("event") == "playbook_on_stats"]
    report_file = artifacts / "sglang" / "latest" / "fleet.json"
    return {"rc": proc.returncode, "status": (artifacts / "status").read_text().strip(), "stdout": stdout,
            "changed": stats[0]["event_data"].get("changed", {}) if stats else None,
            "report": json.loads(report_file.read_text()) if report_file.exists() else None,
            "events": len(events)}


def test_the_execution_environment_remediates_and_audits_over_ssh_as_awx_runs_it():
    if RUNNER_DIR.exists():
        subprocess.run(["rm", "-rf", str(RUNNER_DIR)], check=True)
    pdd = private_data_dir(ee_image())
    before = [starts(h) for h in (H1, H2, H3)]
    first = runner_job("remediate", "remediate.yml", dict(steps(12), sglang_serial=["100%"]))
    assert first["rc"] == 0 and first["status"] == "successful", first["stdout"][-4000:]
    assert [starts(h) for h in (H1, H2, H3)] == [b + 1 for b in before]
    assert all(server_info(h)["speculative_num_steps"] == 12 for h in (H1, H2, H3))
    # The fleet report and the job events came out under the runner's artifacts.
    assert first["events"] > 10 and first["report"] is not None, sorted(p.name for p in pdd.rglob("*"))[:50]
    assert {r["status"] for r in first["report"]["hosts"]} == {"changed"}
    assert all(r["compliant"] is True for r in first["report"]["hosts"])
    again = runner_job("remediate-again", "remediate.yml", dict(steps(12), sglang_serial=["100%"]))
    # The recap's changed counts, from the job's events (a host with none is not listed).
    assert again["rc"] == 0 and again["changed"] is not None, again["stdout"][-4000:]
    assert sum(again["changed"].values()) == 0, again["changed"]
    assert [starts(h) for h in (H1, H2, H3)] == [b + 1 for b in before]
    audit = runner_job("audit", "audit.yml", steps(12))
    assert audit["rc"] == 0 and audit["status"] == "successful", audit["stdout"][-4000:]
    assert {r["status"] for r in audit["report"]["hosts"]} == {"ok"}
