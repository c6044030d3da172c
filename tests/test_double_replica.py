"""The test double across nodes (--nnodes, --node-rank, --dist-init-addr), as SGLang behaves there.

From the releases' own code (0.5.9 ``srt/entrypoints/engine.py`` line 1040, 0.5.12.post1 line 812,
0.5.14 line 823; ``launch_dummy_health_check_server`` in ``srt/utils/common.py``): every node starts
its schedulers, which meet at the leader's --dist-init-addr before the model load; a node of rank >= 1
runs no tokenizer and no API and, once its schedulers are ready, serves only /ping, /health and
/health_generate (always 200) and /metrics with --enable-metrics; when one rank ends, the others'
collectives fail. ``check_server_args`` refuses a tp_size * pp_size the nodes do not divide.

Each node here is a double on 127.0.0.1 with its own port, as the nodes of one test replica share
a network namespace in the test bed. All traffic goes to 127.0.0.1 only.
"""
from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any, Dict, Sequence

import pytest

from double_harness import companion_patch, free_port, http, make_models, make_site, patch_embedding_capture, \
    spec_flags

_names = itertools.count()


@pytest.fixture
def replica(tmp_path: Path, run_double: Any, real_059: Dict[str, str]) -> Any:
    """replica(rank, nnodes, addr, wiring="remediated", extra=()): one node of a replica, sharing its models."""
    target, draft = make_models(tmp_path, [-1, 2, 30])

    def node(rank: int, nnodes: int, addr: str, wiring: str = "remediated", extra: Sequence[str] = (),
             **env: str) -> Any:
        root = tmp_path / ("node-%d" % next(_names))
        root.mkdir()
        # "remediated": the role's patch and its CUDA-graph companion; "no companion": the patch alone, so
        # that the graphs capture the default layers (a capture that feeds the draft other states).
        graph = companion_patch(real_059["cuda_graph_runner"]) if wiring == "remediated" \
            else real_059["cuda_graph_runner"]
        site = make_site(root, "0.5.9", patch_embedding_capture(real_059["deepseek_v2"]), graph,
                         real_059["metadata"])
        flags = spec_flags(target, draft, 15, 1, 16) + [
            "--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", addr] + list(extra)
        return run_double(flags, site, **env)

    return node


def listening(double: Any) -> bool:
    try:
        http(double.port, "/ping")
        return True
    except OSError:
        return False


def exits(double: Any, timeout: float = 20) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if double.proc.poll() is not None:
            return double.proc.returncode
        time.sleep(0.1)
    raise AssertionError("still running:\n" + double.output())


def accept_length(leader: Any) -> float:
    status, _ = http(leader.port, "/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 256}})
    assert status == 200
    return http(leader.port, "/get_server_info")[1]["internal_states"][0]["avg_spec_accept_length"]


def test_the_leader_serves_once_every_rank_joined_and_a_follower_only_the_stand_in_routes(replica: Any) -> None:
    addr = "127.0.0.1:%d" % free_port()
    leader = replica(0, 2, addr)
    # Alone, the leader never loads: it waits at the rendezvous for its peer, its port closed ...
    leader.wait_logged("rank 0 of 2: waiting for 1 rank(s) at %s" % addr)
    assert leader.proc.poll() is None and not listening(leader)
    follower = replica(1, 2, addr)
    leader.wait_healthy()
    follower.wait_healthy()
    # ... and loads only once the peer started after that has joined: its own log, in order (the line
    # follows the health it announces).
    out = leader.wait_logged("The server is fired up")
    assert out.index("waiting for 1 rank(s)") < out.index("rank 1 joined (2 of 2)") \
        < out.index("The server is fired up"), out
    for path in ("/ping", "/health", "/health_generate"):
        assert http(follower.port, path)[0] == 200
    # No API on a rank >= 1: no server info, no generation, no metrics without --enable-metrics.
    for path in ("/server_info", "/get_server_info", "/model_info", "/metrics"):
        assert http(follower.port, path)[0] == 404, path
    assert http(follower.port, "/generate", {"text": "x"})[0] == 404
    assert 3.2 <= accept_length(leader) <= 3.7
    assert "rank 1 joined (2 of 2)" in leader.output()
    assert leader.stop() == 0 and exits(follower) in (0, 1)


def test_a_follower_serves_nothing_before_its_schedulers_are_ready(replica: Any) -> None:
    addr = "127.0.0.1:%d" % free_port()
    follower = replica(1, 2, addr, extra=["--enable-metrics"])
    # At the rendezvous with no leader to meet: alive, and listening on nothing ...
    follower.wait_logged("rank 1 of 2: joining %s" % addr)
    assert follower.proc.poll() is None and not listening(follower)
    leader = replica(0, 2, addr, extra=["--enable-metrics"])
    follower.wait_healthy()
    assert http(follower.port, "/metrics")[0] == 200
    leader.wait_healthy()
    # ... and its stand-in routes served only after every rank joined: its own log, in order (the line
    # follows the routes it announces).
    out = follower.wait_logged("Dummy health check server started")
    assert out.index("joining") < out.index("all 2 ranks joined") \
        < out.index("Dummy health check server started"), out


@pytest.mark.parametrize("extra, named", [
    (["--speculative-num-steps", "7", "--speculative-num-draft-tokens", "8"], "speculative_num_steps 7"),
    (["--tp-size", "16"], "tp_size 16"),
])
def test_a_rank_with_other_settings_fails_the_whole_replica(replica: Any, extra: Sequence[str], named: str) -> None:
    addr = "127.0.0.1:%d" % free_port()
    leader = replica(0, 2, addr)
    follower = replica(1, 2, addr, extra=extra)
    assert exits(leader) == 1 and exits(follower) == 1
    assert "rank 1 runs other settings than rank 0" in leader.output() and named in leader.output()
    assert "the replica cannot start" in follower.output()


def test_a_rank_given_twice_fails_the_replica(replica: Any) -> None:
    addr = "127.0.0.1:%d" % free_port()
    extra = ["--tp-size", "12"]
    leader = replica(0, 3, addr, extra=extra)
    first = replica(1, 3, addr, extra=extra)
    leader.wait_logged("rank 1 joined (2 of 3)")  # the first is in before the second starts
    second = replica(1, 3, addr, extra=extra)
    assert exits(leader) == 1 and exits(first) == 1 and exits(second) == 1
    assert "rank 1 joined twice" in leader.output()


@pytest.mark.parametrize("which", ["follower", "leader"])
def test_when_one_rank_dies_the_others_exit(replica: Any, which: str) -> None:
    addr = "127.0.0.1:%d" % free_port()
    leader, follower = replica(0, 2, addr), replica(1, 2, addr)
    leader.wait_healthy()
    follower.wait_healthy()
    dead, other = (follower, leader) if which == "follower" else (leader, follower)
    dead.proc.kill()
    assert exits(other) == 1
    assert "a peer rank went away" in other.output()


def test_a_follower_whose_capture_feeds_other_states_degrades_the_replica(replica: Any) -> None:
    addr = "127.0.0.1:%d" % free_port()
    leader, follower = replica(0, 2, addr), replica(1, 2, addr, wiring="no companion")
    leader.wait_healthy()
    follower.wait_healthy()
    assert accept_length(leader) < 2.0


@pytest.mark.parametrize("nnodes, rank, extra, why", [
    (3, 0, [], "tp_size must be divisible by number of nodes"),
    (2, 2, [], "node_rank 2 is not a rank of 2 node(s)"),
    (2, 0, ["--dist-init-addr", "leader-without-port"], "please provide --dist-init-addr as host:port"),
])
def test_flags_sglang_refuses_at_start(replica: Any, nnodes: int, rank: int, extra: Sequence[str], why: str) -> None:
    node = replica(rank, nnodes, "127.0.0.1:%d" % free_port(), extra=extra)
    assert exits(node) == 1
    assert why in node.output()
