"""playbooks/lease_break.yml names its hosts: never ``all`` or ``*``, and never more hosts than the
operator confirms (sglang_lease_break_hosts, default 1). The rule (plugins/plugin_utils/_rollout.py,
the patterns split into terms as Ansible splits them: plugins/plugin_utils/_hostpattern.py) on its
own, then the playbook over three local hosts: refused before any lease is touched, and run where
the count is confirmed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.fleetops.sglang.plugins.filter.sglang import lease_break_errors

REPO = Path(__file__).resolve().parents[1]
HOSTS = ["h1", "h2", "h3"]


@pytest.mark.parametrize("limit, target, hosts, confirmed, named", [
    ("all", "", HOSTS, 3, "--limit=all selects every host (all)"),
    ("h1,*", "", HOSTS, 3, "--limit=h1,* selects every host (*)"),
    ("gpu:&all", "", ["h1"], 1, "--limit=gpu:&all selects every host (&all)"),
    ("", "all", HOSTS, 3, "sglang_target_hosts=all selects every host"),
    ("", ["h1", "all"], HOSTS, 3, "sglang_target_hosts=['h1', 'all'] selects every host"),
    ("h1:h2,all", "", HOSTS, 3, "--limit=h1:h2,all selects every host (all)"),
    ("h1,h2", "", ["h1", "h2"], 1, "matches 2 hosts (h1, h2), more than sglang_lease_break_hosts=1 confirms"),
    ("gpu-*", "", ["gpu-%d" % i for i in range(7)], "2",
     "matches 7 hosts (gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, ...), more than sglang_lease_break_hosts=2"),
    ("h1", "", ["h1"], 0, "sglang_lease_break_hosts=0: the number of hosts"),
    ("h1", "", ["h1"], "10%", "sglang_lease_break_hosts='10%'"),
    ("h1", "", ["h1"], True, "sglang_lease_break_hosts=True"),
])
def test_every_host_or_more_than_confirmed_is_refused_naming_it(limit, target, hosts, confirmed, named):
    errors = lease_break_errors(hosts, limit, target, confirmed)
    assert len(errors) == 1 and named in errors[0], errors


@pytest.mark.parametrize("limit, target, hosts, confirmed", [
    ("h1", "", ["h1"], 1),
    ("h1,h2", "", ["h1", "h2"], "2"),
    ("gpu-1*", "", ["gpu-1", "gpu-10"], 5),       # a pattern, within the count
    ("allspark-01", "", ["allspark-01"], 1),      # a host whose name starts with "all"
    ("", ["h1", "h2"], ["h1", "h2"], 2),
])
def test_named_hosts_within_the_count_may_be_freed(limit, target, hosts, confirmed):
    assert lease_break_errors(hosts, limit, target, confirmed) == []


def _playbook(tmp_path, *args):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"sglang": {"hosts": {h: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "sglang_state_dir": str(tmp_path / h)} for h in HOSTS}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               SGLANG_REPORT_DIR=str(tmp_path / "reports"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                           str(REPO / "playbooks" / "lease_break.yml"), "-e", "sglang_lease_break_reason=INC-1",
                           *args], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)


def _leases(tmp_path):
    """A lease on every host, held by a run that is gone; the hosts whose lease is still there."""
    for h in HOSTS:
        (tmp_path / h).mkdir(mode=0o700, exist_ok=True)
        (tmp_path / h / "lease.json").write_text(json.dumps({
            "run_id": "20261204T000000Z-1", "controller": "awx-ee-gone", "user": "awx", "pid": 1,
            "started": 1796000000.0, "taken_at": 1796000000.0, "heartbeat": 1796000000.0}))


def _held(tmp_path):
    return sorted(h for h in HOSTS if (tmp_path / h / "lease.json").exists())


def _broken(tmp_path):
    return sorted(h for h in HOSTS if (tmp_path / h / "lease-breaks.jsonl").exists())


def test_the_playbook_refuses_all_and_an_unconfirmed_count_before_touching_a_host(tmp_path):
    _leases(tmp_path)
    every = _playbook(tmp_path, "--limit", "all", "-e", "sglang_lease_break_hosts=3")
    assert every.returncode == 2, every.stdout[-3000:]
    assert "--limit=all selects every host" in every.stdout and "no lease was broken" in every.stdout
    two = _playbook(tmp_path, "--limit", "h1,h2")
    assert two.returncode == 2, two.stdout[-3000:]
    assert ("matches 2 hosts (h1, h2), more than sglang_lease_break_hosts=1 confirms: narrow --limit, or confirm "
            "the count with -e sglang_lease_break_hosts=2") in two.stdout, two.stdout[-3000:]
    assert _broken(tmp_path) == [] and _held(tmp_path) == HOSTS


def test_the_playbook_breaks_the_leases_of_a_confirmed_count(tmp_path):
    _leases(tmp_path)
    run = _playbook(tmp_path, "--limit", "h1,h2", "-e", "sglang_lease_break_hosts=2")
    assert run.returncode == 0, run.stdout[-3000:]
    assert _broken(tmp_path) == ["h1", "h2"] and _held(tmp_path) == ["h3"]
    assert json.loads((tmp_path / "h1" / "lease-breaks.jsonl").read_text().splitlines()[-1])["reason"] == "INC-1"
