"""Every form of sglang_target_hosts reaches exactly the hosts Ansible gives for it, less the known-out.

The fleet playbooks build their host pattern in one place (playbooks/vars/fleet.yml, the filter
fleetops.sglang.fleet_pattern, plugins/plugin_utils/_hostpattern.py). Gluing ``:!sglang_maintenance``
onto a comma list once turned its last host into ``gpu-6:!sglang_maintenance``, which matches nothing:
a host dropped with a warning, and an audit that passed without it. Here each form Ansible accepts
(a comma list, a colon list, an intersection, an exclusion, a subscript range, a regex, a YAML
list, a mix) is given to
``ansible --list-hosts`` and to ``ansible-playbook --list-hosts`` of remediate, audit and rollback; each
play that targets the fleet must list exactly Ansible's hosts less the group sglang_maintenance and
sglang_skip_hosts.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HOSTS = ["gpu-%d" % i for i in range(1, 7)]
MAINTENANCE = ["gpu-5"]
# The plays whose hosts are the fleet pattern: (playbook, play number).
FLEET_PLAYS = [("remediate.yml", 1), ("audit.yml", 1), ("audit.yml", 3), ("rollback.yml", 1)]
FORMS = [
    ("comma list", "gpu-1,gpu-3,gpu-6", []),
    ("comma list, spaced", "gpu-1, gpu-6", []),
    ("colon list", "gpu-1:gpu-3:gpu-6", []),
    ("intersection", "sglang:&rack_a", []),
    ("exclusion", "sglang:!rack_a", []),
    ("subscript range", "sglang[1:3]", ["gpu-3"]),
    ("regex and wildcard", "~gpu-[12]:gpu-6*", []),
    ("comma list with & and !", "rack_a,rack_b,&sglang,!gpu-2", ["gpu-6"]),
    ("YAML list", ["gpu-2", "rack_b"], []),
    ("YAML list of patterns", ["gpu-1", "rack_b:!gpu-6"], ["gpu-4"]),
]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    path = tmp_path_factory.mktemp("patterns") / "inventory.json"
    path.write_text(json.dumps({
        "sglang": {"hosts": {h: {} for h in HOSTS}},
        "rack_a": {"hosts": {h: {} for h in HOSTS[:3]}},
        "rack_b": {"hosts": {h: {} for h in HOSTS[3:]}},
        "sglang_maintenance": {"hosts": {h: {} for h in MAINTENANCE}},
    }))
    return path


def _env(tmp):
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                SGLANG_REPORT_DIR=str(tmp / "reports"), ANSIBLE_LOCAL_TEMP=str(tmp / "tmp"))


def _ansible_hosts(inventory, pattern, tmp=None):
    """What `ansible PATTERN --list-hosts` gives: the CLI's own call, InventoryManager.list_hosts, in this
    process (a YAML list: each item's hosts, as Ansible unions them). One case runs the CLI itself
    (test_the_cli_gives_the_same_hosts), so that this stays the CLI's answer."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    manager = InventoryManager(loader=DataLoader(), sources=[str(inventory)])
    items = pattern if isinstance(pattern, list) else [pattern]
    return {h.name for item in items for h in manager.list_hosts(item)}


def _cli_hosts(inventory, pattern, tmp):
    out = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), pattern, "--list-hosts"], cwd=str(tmp),
                         env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return {line.strip() for line in out.stdout.splitlines()[1:] if line.strip()}


def _playbook_hosts(inventory, pattern, skip, tmp):
    """{(playbook, play number): hosts} from one `ansible-playbook --list-hosts` of the three playbooks."""
    extra = {"sglang_target_hosts": pattern, "sglang_skip_hosts": skip}
    out = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "--list-hosts", "-e", json.dumps(extra)]
                         + [str(REPO / "playbooks" / p) for p in ("remediate.yml", "audit.yml", "rollback.yml")],
                         cwd=str(tmp), env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Could not match supplied host pattern" not in out.stdout + out.stderr, out.stdout + out.stderr
    plays, book, current = {}, None, None
    for line in out.stdout.splitlines():
        m = re.match(r"^playbook: (.*)$", line)
        if m:
            book = Path(m.group(1)).name
            continue
        m = re.match(r"^\s+play #(\d+) ", line)
        if m:
            current = plays.setdefault((book, int(m.group(1))), set())
            continue
        if current is not None and re.match(r"^\s{6}\S+$", line):
            current.add(line.strip())
    return plays


@pytest.mark.parametrize("form, pattern, skip", FORMS, ids=[f[0] for f in FORMS])
def test_each_form_reaches_exactly_ansibles_hosts_less_the_known_out(inventory, tmp_path, form, pattern, skip):
    plays = _playbook_hosts(inventory, pattern, skip, tmp_path)
    want = _ansible_hosts(inventory, pattern) - set(MAINTENANCE) - set(skip)
    assert want, "the case must leave some hosts to reach"
    for key in FLEET_PLAYS:
        assert plays.get(key) == want, (form, key, plays.get(key), want)


@pytest.mark.parametrize("pattern", ["rack_a,rack_b,&sglang,!gpu-2", "sglang[1:3]:~gpu-[12]"])
def test_the_cli_gives_the_same_hosts(inventory, tmp_path, pattern):
    assert _cli_hosts(inventory, pattern, tmp_path) == _ansible_hosts(inventory, pattern)


def test_the_rollback_plan_counts_the_same_hosts(inventory, tmp_path):
    """rollback.yml plans over query('inventory_hostnames', the same pattern): a comma list with a
    known-out host leaves it out of the plan as it does out of the play."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible_collections.fleetops.sglang.plugins.filter.sglang import fleet_pattern
    manager = InventoryManager(loader=DataLoader(), sources=[str(inventory)])
    hosts = [h.name for h in manager.get_hosts(fleet_pattern("gpu-1,gpu-5,gpu-6", ["gpu-6"]))]
    assert hosts == ["gpu-1"]
