#!/usr/bin/env python3
"""A Molecule scenario's containers, created and destroyed all at once.

molecule-plugins' docker driver creates its instances with a playbook that loops over the
platforms several times on the controller (image discovery, Dockerfile checks, the CMD, then
``docker_container`` per platform): 2.5 minutes of a CPU for the faults scenario's 30 hosts,
and its destroy loops again, twice per ``molecule test``. Every platform here is a pre-built
systemd image, so a create is one ``docker run`` per platform, started together, and a destroy
one ``docker rm -f``. molecule/shared/create.yml and destroy.yml call this for every scenario
(.config/molecule/config.yml); Molecule still builds the inventory from the platforms and
reaches the containers over the docker connection, as with its own playbooks.

Only the platform keys the scenarios use are mapped; any other key is refused by name, so a
scenario cannot ask for something that would be silently left out.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Sequence

import testbed

# Keys that say nothing about ``docker run`` (Molecule's inventory reads groups; the image is
# pre-built, never pulled or built here).
IGNORED = {"groups", "pre_build_image", "children"}
# Molecule's own label, as its docker driver sets it (its status finds the instances by name).
LABELS = {"owner": "molecule"}


class PlatformError(ValueError):
    """A platform this module cannot create as Molecule would."""


def run_args(platform: Mapping[str, Any], scenario: str = "", extra: Sequence[str] = ()) -> List[str]:
    """The ``docker run`` argv of one platform (detached, named, hostname as its name), with
    ``extra`` flags before the image."""
    name = platform.get("name")
    if not name:
        raise PlatformError("a platform has no name: %r" % (platform,))
    if not platform.get("pre_build_image", False):
        raise PlatformError("platform %s: pre_build_image must be true (images are built by testbed/testbed.py,"
                            " never by Molecule)" % name)
    argv = ["docker", "run", "-d", "--name", name]
    network = platform.get("network_mode")
    if network is not None and not (isinstance(network, str) and network.startswith("container:")):
        raise PlatformError("platform %s: network_mode %r: only container:<name> is mapped (the nodes of one test "
                            "replica share a network namespace and talk over its loopback)" % (name, network))
    if network:
        # Docker refuses --hostname with another container's network namespace: it shares its name.
        argv += ["--network", network]
    else:
        argv += ["--hostname", str(platform.get("hostname", name))]
    labels = dict(LABELS, **({"molecule.scenario": scenario} if scenario else {}))
    for key, value in sorted(platform.items()):
        if key in IGNORED or key in ("name", "hostname", "image", "command", "network_mode"):
            continue
        if key == "capabilities":
            argv += [a for cap in value for a in ("--cap-add", cap)]
        elif key == "security_opts":
            argv += [a for opt in value for a in ("--security-opt", opt)]
        elif key == "volumes":
            argv += [a for vol in value for a in ("-v", vol)]
        elif key == "tmpfs":
            argv += [a for path in value for a in ("--tmpfs", path)]
        elif key == "published_ports":
            argv += [a for port in value for a in ("-p", port)]
        elif key == "cgroupns_mode":
            argv += ["--cgroupns", value]
        elif key == "stop_signal":
            argv += ["--stop-signal", value]
        elif key == "env":
            argv += [a for k, v in sorted(value.items()) for a in ("-e", "%s=%s" % (k, v))]
        elif key == "labels":
            labels.update(value)
        else:
            raise PlatformError("platform %s: key %r is not mapped by testbed/instances.py (mapped: capabilities,"
                                " security_opts, volumes, tmpfs, published_ports, cgroupns_mode, stop_signal, env,"
                                " labels, hostname, image, command, network_mode)" % (name, key))
    argv += [a for k, v in sorted(labels.items()) for a in ("--label", "%s=%s" % (k, v))]
    if not platform.get("image"):
        raise PlatformError("platform %s has no image" % name)
    argv += list(extra)
    argv.append(platform["image"])
    command = platform.get("command")
    if command:
        argv += shlex.split(command) if isinstance(command, str) else list(command)
    return argv


def existing(names: Sequence[str]) -> List[str]:
    """The containers of ``names`` that exist, running or not."""
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], check=True,
                         capture_output=True, text=True).stdout.split()
    return [n for n in names if n in set(out)]


def create(platforms: Sequence[Mapping[str, Any]], scenario: str = "") -> List[str]:
    """Start every platform's container together; a container of that name already there is kept
    (Molecule's create is idempotent too). Fails naming each container that did not start."""
    # Every test-bed container carries the test bed's mark (testbed.mark_flags).
    mark = testbed.mark_flags()
    argvs = {p["name"]: run_args(p, scenario, mark) for p in platforms}
    there = set(existing(list(argvs)))
    # A container that joins another's network namespace starts once that one runs: two rounds.
    joins = {p["name"] for p in platforms if p.get("network_mode")}
    started: List[str] = []
    for round_ in (set(argvs) - joins, joins):
        procs = {name: subprocess.Popen(argvs[name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for name in sorted(round_) if name not in there}
        failed = {}
        for name, proc in procs.items():
            _, err = proc.communicate()
            if proc.returncode:
                failed[name] = err.strip()
        if failed:
            raise RuntimeError("docker run failed: " + "; ".join("%s: %s" % kv for kv in sorted(failed.items())))
        started += procs
    return sorted(started)


def destroy(names: Sequence[str]) -> List[str]:
    """Remove the containers of ``names`` that exist (killed, with their anonymous volumes)."""
    found = existing(names)
    if found:
        subprocess.run(["docker", "rm", "-f", "-v", *found], check=True, stdout=subprocess.DEVNULL)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("action", choices=("create", "destroy"))
    parser.add_argument("platforms", help="the scenario's platforms as JSON (Molecule's molecule_yml.platforms)")
    parser.add_argument("--scenario", default="")
    args = parser.parse_args(argv)
    platforms: List[Dict[str, Any]] = json.loads(args.platforms)
    try:
        if args.action == "create":
            done = create(platforms, args.scenario)
        else:
            done = destroy([p["name"] for p in platforms])
    except (PlatformError, RuntimeError, subprocess.CalledProcessError) as err:
        print("testbed/instances.py: %s" % err, file=sys.stderr)
        return 1
    print(json.dumps({"changed": bool(done), args.action + "d": done}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
