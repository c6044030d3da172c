"""testbed/instances.py: every scenario's platforms become the docker run Molecule's driver would make."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import instances

REPO = Path(__file__).resolve().parents[1]
BASE = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())


def platforms(scenario: str):
    own = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text()) or {}
    return own.get("platforms", BASE["platforms"])


def test_a_systemd_platform_runs_with_exactly_its_flags():
    platform = dict(BASE["platforms"][0], name="h1", image="local/sglang-testbed:bookworm")
    argv = instances.run_args(platform, "default")
    assert argv[:7] == ["docker", "run", "-d", "--name", "h1", "--hostname", "h1"]
    assert argv[-2:] == ["local/sglang-testbed:bookworm", "/lib/systemd/systemd"]
    pairs = set(zip(argv, argv[1:]))
    for flag in (("--cap-add", "SYS_ADMIN"), ("--security-opt", "seccomp=unconfined"),
                 ("--security-opt", "apparmor=unconfined"), ("--cgroupns", "host"),
                 ("-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"), ("--tmpfs", "/run"), ("--tmpfs", "/run/lock"),
                 ("--stop-signal", "SIGRTMIN+3"), ("-p", "127.0.0.1::22"), ("--label", "owner=molecule"),
                 ("--label", "molecule.scenario=default")):
        assert flag in pairs, flag
    assert "--privileged" not in argv


@pytest.mark.parametrize("scenario", sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")))
def test_every_scenario_platform_is_mapped(scenario):
    """No scenario asks for a key the module would leave out (it refuses those by name)."""
    for platform in platforms(scenario):
        platform = {k: (v.replace("${MOLECULE_SCENARIO_NAME}", scenario) if isinstance(v, str) else v)
                    for k, v in platform.items()}
        argv = instances.run_args(platform, scenario)
        assert argv[argv.index("--name") + 1] == platform["name"]


def test_an_unmapped_key_or_a_platform_to_build_is_refused_by_name():
    platform = dict(BASE["platforms"][0], name="h1", image="x", privileged=True)
    with pytest.raises(instances.PlatformError, match="platform h1: key 'privileged' is not mapped"):
        instances.run_args(platform)
    with pytest.raises(instances.PlatformError, match="platform h1: pre_build_image must be true"):
        instances.run_args(dict(BASE["platforms"][0], name="h1", image="x", pre_build_image=False))



def test_a_platforms_env_comes_before_the_image():
    """docker run would read an -e after the image as the command's argument."""
    platform = dict(BASE["platforms"][0], name="h1", image="local/sglang-testbed:bookworm", env={"A": "b"})
    argv = instances.run_args(platform, "fleet")
    assert ("-e", "A=b") in set(zip(argv, argv[1:]))
    assert argv.index("-e") < argv.index("local/sglang-testbed:bookworm")


def test_a_node_joins_its_leaders_network_namespace_and_starts_after_it(monkeypatch):
    """The nodes of one test replica share a network namespace (docker run --network container:NAME), which
    docker refuses with --hostname and before NAME runs: the joining container starts in a second round."""
    lead = dict(BASE["platforms"][0], name="lead", image="img")
    lead.pop("published_ports")
    node = dict(lead, name="node", network_mode="container:lead")
    argv = instances.run_args(node)
    assert ("--network", "container:lead") in set(zip(argv, argv[1:]))
    assert "--hostname" not in argv
    with pytest.raises(instances.PlatformError, match="network_mode 'host': only container:<name> is mapped"):
        instances.run_args(dict(node, network_mode="host"))
    started = []

    class Proc:
        returncode = 0

        def __init__(self, argv, **_kw):
            started.append(argv[argv.index("--name") + 1])

        def communicate(self):
            return "", ""

    monkeypatch.setattr(instances, "existing", lambda names: [])
    monkeypatch.setattr(instances.testbed, "mark_flags", lambda: [])
    monkeypatch.setattr(instances.subprocess, "Popen", Proc)
    assert instances.create([node, lead]) == ["lead", "node"]
    assert started == ["lead", "node"]
