"""plugin_utils/_replicas.py: the replicas an inventory names, and the inventories it refuses."""
from __future__ import annotations

import importlib

import pytest

r = importlib.import_module("ansible_collections.fleetops.sglang.plugins.plugin_utils._replicas")


def fleet(**over):
    """Two replicas of two nodes (a: a0 a1, b: b0 b1) and one single-node host s, as an inventory would give them."""
    hv = {
        "a0": {"sglang_replica": "a", "sglang_node_rank": 0, "sglang_nnodes": 2, "ansible_host": "10.0.0.1"},
        "a1": {"sglang_replica": "a", "sglang_node_rank": 1, "sglang_nnodes": 2, "ansible_host": "10.0.0.2"},
        "b0": {"sglang_replica": "b", "sglang_node_rank": 0, "sglang_nnodes": 2, "ansible_host": "10.0.1.1",
               "sglang_node_addr": "192.168.7.1"},
        "b1": {"sglang_replica": "b", "sglang_node_rank": 1, "sglang_nnodes": 2, "ansible_host": "10.0.1.2"},
        "s": {"ansible_host": "10.0.2.1"},
    }
    for host, changes in over.items():
        for name, value in changes.items():
            if value is None:
                hv[host].pop(name, None)
            else:
                hv[host][name] = value
    return hv


HOSTS = ["a0", "a1", "b0", "b1", "s"]


def test_a_valid_inventory_gives_each_node_its_replica_and_the_leaders_rendezvous():
    doc = r.replicas(HOSTS, fleet())
    assert doc["errors"] == []
    assert doc["units"] == {"a0": "a", "a1": "a", "b0": "b", "b1": "b", "s": "s"}
    assert doc["replicas"]["a"] == {"nodes": ["a0", "a1"], "leader": "a0", "nnodes": 2,
                                    "dist_init_addr": "10.0.0.1:5000"}
    # The fabric address, where given, is the rendezvous's.
    assert doc["replicas"]["b"]["dist_init_addr"] == "192.168.7.1:5000"
    assert "s" not in doc["replicas"]


def test_ranks_given_in_any_order_and_as_strings_are_ranks():
    hv = fleet(a0={"sglang_node_rank": "1"}, a1={"sglang_node_rank": "0"})
    assert r.replicas(HOSTS, hv)["replicas"]["a"]["nodes"] == ["a1", "a0"]


@pytest.mark.parametrize("over, words", [
    ({"a1": {"sglang_node_rank": 0}}, ["replica a: rank 0 is given to a0 and a1", "sglang_node_rank"]),
    ({"a1": {"sglang_node_rank": 2}}, ["replica a: a1 has sglang_node_rank=2", "to 1"]),
    ({"a1": {"sglang_node_rank": None}}, ["a1 has sglang_node_rank=unset"]),
    ({"a1": {"sglang_nnodes": 3}}, ["sglang_nnodes must be the same", "a0 2, a1 3"]),
    ({"a0": {"sglang_nnodes": 1}, "a1": {"sglang_nnodes": 1}}, ["at least 2"]),
    ({"a1": {"sglang_replica": "a b"}}, ["a1: sglang_replica='a b' is not a replica name"]),
    ({"s": {"sglang_node_rank": 1}}, ["s: sglang_node_rank=1 is set but sglang_replica is not"]),
    ({"a0": {"sglang_tp_size": 16}, "a1": {"sglang_tp_size": 8}},
     ["replica a: sglang_tp_size differs between its nodes (a0 16, a1 8)", "group_vars"]),
    ({"a1": {"sglang_version": "0.5.12.post1"}}, ["sglang_version differs", "a0 unset, a1 '0.5.12.post1'"]),
    ({"b1": {"sglang_eagle3_layer_ids": [-1, 2, 29]}}, ["replica b: sglang_eagle3_layer_ids differs"]),
    ({"a0": {"sglang_dist_init_addr": "10.0.0.2:5000"}, "a1": {"sglang_dist_init_addr": "10.0.0.2:5000"}},
     ["not the leader's address", "10.0.0.2 is a1's, rank 1"]),
    ({"a0": {"sglang_dist_init_addr": "10.9.9.9:5000"}, "a1": {"sglang_dist_init_addr": "10.9.9.9:5000"}},
     ["no node of the replica has that address"]),
    ({"a0": {"sglang_dist_init_addr": "10.0.0.1"}, "a1": {"sglang_dist_init_addr": "10.0.0.1"}},
     ["is not HOST:PORT"]),
    ({"a0": {"sglang_dist_init_port": 6000}}, ["must be the same on each node"]),
])
def test_a_bad_inventory_is_refused_naming_the_variable_the_hosts_and_the_fix(over, words):
    errors = r.replicas(HOSTS, fleet(**over))["errors"]
    assert errors, over
    assert any(all(w in e for w in words) for e in errors), errors


def test_a_missing_node_is_refused_naming_the_rank_and_slicing():
    hv = fleet()
    errors = r.replicas(["a0", "b0", "b1", "s"], hv)["errors"]
    assert len(errors) == 1
    assert "replica a: sglang_nnodes=2 but no host of the inventory has rank 1 (it has a0 0)" in errors[0]
    assert "give each slice whole replicas" in errors[0]


def test_a_run_that_holds_part_of_a_replica_is_refused_and_one_that_leaves_it_out_is_not():
    hv = fleet()
    errors = r.replicas(HOSTS, hv, run=["a0", "b0", "b1"])["errors"]
    assert errors == ["replica a: this run holds a0 but not a1 (a --limit or a job slice); a replica is rolled "
                      "out whole: limit by the replica's nodes together (its group), or leave it out"]
    assert r.replicas(HOSTS, hv, run=["b0", "b1", "s"])["errors"] == []


def test_what_a_node_may_have_of_its_own():
    hv = fleet(a0={"sglang_port": 30000, "sglang_host": "0.0.0.0", "sglang_node_addr": "10.0.0.1"},
               a1={"sglang_port": 30001})
    assert r.replicas(HOSTS, hv)["errors"] == []


def test_an_ipv6_leader_gets_a_bracketed_rendezvous():
    hv = fleet(a0={"ansible_host": "fd00::1"})
    assert r.replicas(HOSTS, hv)["replicas"]["a"]["dist_init_addr"] == "[fd00::1]:5000"
    hv = fleet(a0={"ansible_host": "fd00::1", "sglang_dist_init_addr": "[fd00::1]:7000"},
               a1={"sglang_dist_init_addr": "[fd00::1]:7000"})
    assert r.replicas(HOSTS, hv)["errors"] == []
