# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Replicas: the nodes that serve one model together (SGLang's ``--nnodes N --node-rank R
--dist-init-addr HOST:PORT``), the rollout's unit.

The inventory names them: each node is an inventory host (its own connection, its own run of the
role) with

- ``sglang_replica``: the replica's name (unset: the host is a replica of one node, as before);
- ``sglang_node_rank``: its rank, 0 (the leader, which serves the API) to ``sglang_nnodes`` - 1;
- ``sglang_nnodes``: the replica's number of nodes, the same on each;
- ``sglang_node_addr`` (optional): the address the other nodes reach it at for the rendezvous,
  where that is not ``ansible_host`` (a fabric network); and ``sglang_dist_init_addr`` (optional):
  ``HOST:PORT`` of the rendezvous, by default the leader's address and ``sglang_dist_init_port``
  (default 5000). Its host must be the leader's.

Every other variable of the role must be the same on every node of a replica: the nodes run one
configuration (release, model paths, speculative settings, draft ids, tp/pp sizes, extra flags);
set it once, in the replica's group_vars. A run whose hosts hold only part of a replica (a
``--limit``, a job slice) is refused: a replica is rolled out whole or not at all.

Why several inventory hosts and not one host with its nodes as data: every node needs what a host
has (its connection and become settings, its facts, its lease, its row in the report, its change set),
and ``--limit`` patterns, ``host_vars`` and the audit read nodes by name. What that costs is job
slicing: AWX slices an inventory by host, so a slice may hold part of a replica; that slice refuses
it (naming the nodes) instead of splitting it.

Served by playbooks/remediate.yml (and read by audit.yml): tasks/replicas.yml reads the replicas
once per run, each node renders its multi-node flags from them (vars/main.yml, _sglang_node), the
plan and the window count units, and the transaction meets the other nodes at the window
strategy's joins (tasks/service.yml, tasks/transaction.yml). Elsewhere (the role's main entry
point, playbooks/rollback.yml) the variables are refused: those restart each node on its own.

Standard library only.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.fleetops.sglang.plugins.module_utils._inputs import REPLICA_NAMES, VARIABLES

REPLICA_VAR, RANK_VAR, NNODES_VAR, NODE_ADDR_VAR, DIST_ADDR_VAR, DIST_PORT_VAR = REPLICA_NAMES
DEFAULT_DIST_PORT = 5000
# What may differ from one node of a replica to the next, besides its connection: its rank, its
# rendezvous address, and where its own server listens (the stand-in health server of a rank >= 1).
NODE_OWN = frozenset((RANK_VAR, NODE_ADDR_VAR, "sglang_host", "sglang_port"))
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _vars(hostvars: Mapping[str, Any], host: str) -> Mapping[str, Any]:
    try:
        found = hostvars[host]
    except (KeyError, TypeError):
        return {}
    return found if isinstance(found, Mapping) else {}


def _get(variables: Mapping[str, Any], name: str) -> Any:
    try:
        return variables[name] if name in variables else None
    except Exception:  # an undefined template inside the variable: judged as unset
        return None


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def replica_of(host: str, hostvars: Mapping[str, Any]) -> str:
    """The replica ``host`` belongs to: its sglang_replica, or itself (a replica of one node)."""
    name = _get(_vars(hostvars, host), REPLICA_VAR)
    return str(name) if isinstance(name, str) and name.strip() else host


def units(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> Dict[str, str]:
    """Each host with its rollout unit (its replica's name, or itself)."""
    return {str(h): replica_of(str(h), hostvars) for h in hosts}


def split_addr(addr: Any) -> Optional[Tuple[str, int]]:
    """``HOST:PORT`` (``[v6]:PORT``) as SGLang parses --dist-init-addr; None when it is not one."""
    if not isinstance(addr, str):
        return None
    host, sep, port = addr.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def node_addr(host: str, hostvars: Mapping[str, Any]) -> str:
    variables = _vars(hostvars, host)
    for name in (NODE_ADDR_VAR, "ansible_host"):
        value = _get(variables, name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return host


def _show(value: Any) -> str:
    return "unset" if value is None else repr(value)


def replicas(fleet: Sequence[str], hostvars: Mapping[str, Any],
             run: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The replicas of ``fleet`` (the inventory's hosts, whatever the limit) and the errors that refuse
    a run over ``run`` (the run's hosts; default the fleet), each naming the variable, the hosts, the
    value and the fix.

    Returns ``replicas`` ({name: {nodes: [host by rank], leader, nnodes, dist_init_addr}}, multi-node
    ones only), ``nodes`` ({host: what the role renders and gates it with: replica, rank, nnodes,
    dist_init_addr, nodes, leader}, their nodes), ``units`` ({host: unit} over the fleet) and ``errors``."""
    fleet = [str(h) for h in fleet]
    in_run = set(str(h) for h in (fleet if run is None else run))
    members: Dict[str, List[str]] = {}
    errors: List[str] = []
    for host in fleet:
        variables = _vars(hostvars, host)
        name = _get(variables, REPLICA_VAR)
        if name is None or name == "":
            for var in (RANK_VAR, NNODES_VAR, DIST_ADDR_VAR):
                if _get(variables, var) is not None:
                    errors.append("%s: %s=%s is set but %s is not: a node of a multi-node replica names its "
                                  "replica; set %s (the replica's name) or remove %s"
                                  % (host, var, _show(_get(variables, var)), REPLICA_VAR, REPLICA_VAR, var))
            continue
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append("%s: %s=%s is not a replica name; accepted: letters, digits, '.', '_' and '-', starting "
                          "with a letter or a digit" % (host, REPLICA_VAR, _show(name)))
            continue
        members.setdefault(name, []).append(host)

    found: Dict[str, Any] = {}
    for name, hosts in members.items():
        problems, doc = _replica(name, hosts, hostvars, in_run)
        errors += problems
        if doc is not None:
            found[name] = doc
    nodes = {host: dict(doc, replica=name, rank=rank) for name, doc in found.items()
             for rank, host in enumerate(doc["nodes"])}
    return {"replicas": found, "nodes": nodes, "units": units(fleet, hostvars), "errors": errors}


def _replica(name: str, hosts: List[str], hostvars: Mapping[str, Any],
             in_run: set) -> Tuple[List[str], Optional[Dict[str, Any]]]:
    errors: List[str] = []
    nnodes = {h: _get(_vars(hostvars, h), NNODES_VAR) for h in hosts}
    counts = {_int(v) for v in nnodes.values()}
    if None in counts or len(counts) != 1 or min(c for c in counts if c is not None) < 2:
        bad = ", ".join("%s %s" % (h, _show(v)) for h, v in nnodes.items())
        errors.append("replica %s: %s must be the same whole number of nodes, at least 2, on each of its nodes; "
                      "got %s. Set it once, in the replica's group_vars" % (name, NNODES_VAR, bad))
        return errors, None
    count = counts.pop()
    ranks: Dict[int, List[str]] = {}
    for host in hosts:
        value = _get(_vars(hostvars, host), RANK_VAR)
        rank = _int(value)
        if rank is None or not 0 <= rank < count:
            errors.append("replica %s: %s has %s=%s; accepted: a whole number from 0 (the leader, which serves the "
                          "API) to %d" % (name, host, RANK_VAR, _show(value), count - 1))
            continue
        ranks.setdefault(rank, []).append(host)
    for rank, holders in sorted(ranks.items()):
        if len(holders) > 1:
            errors.append("replica %s: rank %d is given to %s (%s); each rank is one node: give each its own %s"
                          % (name, rank, " and ".join(holders), RANK_VAR, RANK_VAR))
    missing = [r for r in range(count) if r not in ranks]
    if missing:
        errors.append("replica %s: %s=%d but no host of the inventory has rank %s (it has %s); add the missing "
                      "node(s) with %s=%s and their %s, or correct %s. In a job slice: AWX slices by host, so a "
                      "slice may hold part of a replica; give each slice whole replicas (its own inventory or limit)"
                      % (name, NNODES_VAR, count, ", ".join(str(r) for r in missing),
                         ", ".join("%s %d" % (hs[0], r) for r, hs in sorted(ranks.items())) or "none",
                         REPLICA_VAR, name, RANK_VAR, NNODES_VAR))
    if errors:
        return errors, None
    nodes = [ranks[r][0] for r in range(count)]
    leader = nodes[0]
    out = [h for h in nodes if h not in in_run]
    if out and len(out) < len(nodes):
        errors.append("replica %s: this run holds %s but not %s (a --limit or a job slice); a replica is rolled out "
                      "whole: limit by the replica's nodes together (its group), or leave it out"
                      % (name, ", ".join(h for h in nodes if h in in_run), ", ".join(out)))
    # The rendezvous: the leader's address.
    addrs = {h: _get(_vars(hostvars, h), DIST_ADDR_VAR) for h in nodes}
    ports = {h: _get(_vars(hostvars, h), DIST_PORT_VAR) for h in nodes}
    leader_addr = node_addr(leader, hostvars)
    if len({repr(v) for v in addrs.values()}) > 1 or len({repr(v) for v in ports.values()}) > 1:
        errors.append("replica %s: %s and %s must be the same on each node; got %s" % (
            name, DIST_ADDR_VAR, DIST_PORT_VAR,
            ", ".join("%s %s/%s" % (h, _show(addrs[h]), _show(ports[h])) for h in nodes)))
        return errors, None
    given, port = addrs[leader], ports[leader]
    if given is not None:
        parsed = split_addr(given)
        if parsed is None:
            errors.append("replica %s: %s=%s is not HOST:PORT (SGLang's --dist-init-addr, e.g. 10.0.0.1:5000)"
                          % (name, DIST_ADDR_VAR, _show(given)))
        else:
            member = {node_addr(h, hostvars): h for h in nodes}
            owner = member.get(parsed[0]) or (parsed[0] if parsed[0] in nodes else None)
            if owner != leader:
                errors.append("replica %s: %s=%s is not the leader's address: the rendezvous listens on rank 0, %s "
                              "(%s)%s; give %s:PORT, or set %s on the node the address belongs to"
                              % (name, DIST_ADDR_VAR, _show(given), leader, leader_addr,
                                 "; %s is %s's, rank %s" % (parsed[0], owner, nodes.index(owner)) if owner else
                                 "; no node of the replica has that address (%s or ansible_host)" % NODE_ADDR_VAR,
                                 leader_addr, RANK_VAR))
        dist = str(given)
    else:
        number = DEFAULT_DIST_PORT if port is None else _int(port)
        if number is None or not 0 < number < 65536:
            errors.append("replica %s: %s=%s is not a port" % (name, DIST_PORT_VAR, _show(port)))
            number = DEFAULT_DIST_PORT
        dist = ("[%s]:%d" if ":" in leader_addr else "%s:%d") % (leader_addr, number)
    # One configuration: every other variable of the role alike (set or unset alike: unset is its default).
    for var in sorted(set(VARIABLES) - NODE_OWN):
        values = [(h, _get(_vars(hostvars, h), var)) for h in nodes]
        if len({repr(value) for host, value in values}) > 1:
            errors.append("replica %s: %s differs between its nodes (%s); its nodes run one configuration: set it "
                          "once, in the replica's group_vars" % (
                              name, var, ", ".join("%s %s" % (h, _show(v)) for h, v in values)))
    return errors, {"nodes": nodes, "leader": leader, "nnodes": count, "dist_init_addr": dist}
