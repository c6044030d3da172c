"""Multi-node replicas (--nnodes 2) rolled out as one unit by remediate.yml, on the test bed.

Two replicas of two nodes (r1, r2: a leader of rank 0 and a follower of rank 1 sharing its network
namespace) and one host of one node (solo), sglang_max_unavailable=1. Every node booted as a
converged host of one node; prepare.yml took the followers' own servers down. The test double
behaves as SGLang across nodes: the leader is healthy only once every rank joined its
--dist-init-addr with the same settings, a follower serves only the stand-in health routes, and a
rank whose peer goes away exits. The tests run in file order and build on each other:

1. an inventory with a rank given twice is refused before anything changes, and so is rollback.yml over a
   replica's nodes;
2. the first run makes each pair of nodes a replica: the canary is a replica, each node started once;
3. a follower that fails puts back its replica: r1's before any restart (it refuses to prepare), r2's after
   (it cannot start the change: a node-local fault, a drop-in outside the role), one replica out at a time;
4. a leader failing before the stop (r1: its drain hook) or at its gate (r2: accept length) puts back its replica,
   its follower learning of it where the nodes meet;
5. with the faults gone the rerun converges, a replica at a time, and the next rerun changes nothing;
6. every node's record of its healthy start taken away, the running replicas are adopted, not restarted;
7. the audit reads every node: compliant, and then against a change it reports and does not make (no node
   waits for the others, nothing is written or restarted).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from operator_runs import Operator, server_info, sh  # noqa: E402
from scenario_helpers import DEEPSEEK_REL, PROJECT, SITE, STARTS_LOG, UNIT, inventory, wait_until  # noqa: E402

PREFIX = os.environ.get("SGLANG_TESTBED_PREFIX", "sglang")
DISTRO = os.environ.get("MOLECULE_DISTRO", "bookworm")
WORK = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "replicas"


def node(name: str) -> str:
    return "%s-replicas-%s-%s" % (PREFIX, name, DISTRO)


R1, R2, SOLO = [node("r1-0"), node("r1-1")], [node("r2-0"), node("r2-1")], node("solo")
NODES = R1 + R2
HOSTS = NODES + [SOLO]
REMEDIATE = PROJECT / "remediate.yml"
AUDIT = PROJECT / "playbooks" / "audit.yml"
ROLLBACK = PROJECT / "playbooks" / "rollback.yml"
SCENARIO_INVENTORY = PROJECT / "molecule" / "replicas" / "inventory"
KNOBS = {"sglang_max_unavailable": 1}
# The change of runs 3 and 4, and the node-local fault of run 3: r2's follower cannot start it.
CHANGE = dict(KNOBS, sglang_mem_fraction_static=0.8)
DROP_IN = "/etc/systemd/system/sglang.service.d/cannot-start-the-change.conf"
FAULT = "[Service]\nExecStartPre=/bin/sh -c '! grep -q -- \"--mem-fraction-static 0.8\" %s'\n" % UNIT
# The second change (runs 4 and on), and the drain and undrain hooks of run 4.
CHANGE_2 = dict(KNOBS, sglang_mem_fraction_static=0.7)
HOOKS = PROJECT / "molecule" / "replicas" / "files"
RECORD = "/var/lib/sglang-remediation/running.json"
TEXTFILE = "/var/lib/prometheus/node-exporter/sglang_remediation.prom"
ARTIFACTS = PROJECT / ".cache" / "molecule-logs" / "replicas-artifacts"


def operator(*extra: Path) -> Operator:
    return Operator(WORK, [Path(inventory()), SCENARIO_INVENTORY, *extra],
                    callbacks="ansible.posix.profile_tasks,fleetops.sglang.sglang_report")


def start_lines() -> Dict[str, List[List[float]]]:
    """Each node's healthy starts: [start, healthy] per line of the double's start log."""
    out = {}
    for h in HOSTS:
        text = sh(h, "cat %s 2>/dev/null || true" % STARTS_LOG)
        out[h] = [[float(x) for x in line.split()[:2]] for line in text.splitlines() if line.strip()]
    return out


def new_starts(before):
    now = start_lines()
    return {h: now[h][len(before[h]):] for h in HOSTS}


def unit_sha(h: str) -> str:
    return sh(h, "sha256sum %s | cut -d' ' -f1" % UNIT)


def follower_health(h: str, port: int = 30001) -> int:
    return int(sh(h, "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:%d/health', "
                     "timeout=5).status)\" 2>/dev/null || echo 0" % port))


def answers_with(h: str, key: str, value) -> bool:
    """Whether the leader on ``h`` answers and reports ``key`` as ``value`` (not answering yet: not yet)."""
    try:
        info = server_info(h)
    except AssertionError:
        return False
    return key in info and info[key] == value


def slots(out: str):
    return [(h, what, int(n)) for h, what, n in re.findall(
        r"^window: (\S+) (leaves rotation|is back in rotation)[^(]*\((\d+) of", out, re.M)]


def keep(name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(WORK / ("%s.log" % name), ARTIFACTS / ("%s.log" % name))


def one_replica_at_a_time(starts) -> None:
    """The replicas' starts do not overlap: one was healthy on both nodes before the other's first start."""
    spans = {}
    for nodes in (R1, R2):
        lines = [line for h in nodes for line in starts[h]]
        if lines:
            spans[nodes[0]] = (min(s for s, _ in lines), max(h for _, h in lines))
    if len(spans) == 2:
        (a0, a1), (b0, b1) = sorted(spans.values())
        assert a1 <= b0, spans


def test_a_rank_given_twice_is_refused_before_anything_changes():
    twice = WORK / "rank-twice"
    twice.mkdir(parents=True, exist_ok=True)
    (twice / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {R1[1]: {"sglang_node_rank": 0}}}}))
    before, units = start_lines(), {h: unit_sha(h) for h in HOSTS}
    run = operator(twice).run("rank-twice", REMEDIATE, KNOBS)
    keep("rank-twice")
    assert run.rc != 0
    assert "replica r1: rank 0 is given to %s and %s (sglang_node_rank)" % (R1[0], R1[1]) in run.output, \
        run.tail(40)
    assert "replica r1: sglang_nnodes=2 but no host of the inventory has rank 1" in run.output
    assert all(not lines for lines in new_starts(before).values())
    assert {h: unit_sha(h) for h in HOSTS} == units
    # rollback.yml rolls hosts back one by one: it refuses a replica's node, naming it (its first batch, the
    # canary, is that node: the rollout stops there).
    run = operator().run("rollback-refused", ROLLBACK, KNOBS, args=["--limit", ",".join(R1)])
    keep("rollback-refused")
    assert run.rc != 0
    assert "%s is a node of the multi-node replica r1 (sglang_replica)" % R1[0] in run.output, run.tail(40)
    assert all(not lines for lines in new_starts(before).values())
    assert {h: unit_sha(h) for h in HOSTS} == units


def test_the_first_run_makes_each_pair_a_replica_and_the_canary_is_one():
    before = start_lines()
    run = operator().run("first", REMEDIATE, KNOBS)
    keep("first")
    assert run.rc == 0, run.tail(80)
    starts = new_starts(before)
    assert {h: len(starts[h]) for h in HOSTS} == {**{h: 1 for h in NODES}, SOLO: 0}, starts
    assert re.search(r"canaries %s, %s;" % (R1[0], R1[1]), run.output), run.tail(80)
    for nodes in (R1, R2):
        for rank, h in enumerate(nodes):
            unit = sh(h, "cat %s" % UNIT)
            assert "--nnodes 2" in unit and "--node-rank %d" % rank in unit and "--dist-init-addr 127.0.0.1:5000" \
                in unit, unit
        assert follower_health(nodes[1]) == 200
        assert server_info(nodes[0])["nnodes"] == 2
    rows = operator().rows("first")
    assert set(rows) == set(HOSTS)
    assert rows[SOLO]["status"] == "ok" and not rows[SOLO]["restarted"] and rows[SOLO]["replica"] is None
    assert all(rows[h]["restarted"] and rows[h]["replica"] == ("r1" if h in R1 else "r2") for h in NODES), rows
    # A line per replica in fleet.md; each node's textfile names its replica.
    md = (WORK / "reports" / "first" / "latest" / "fleet.md").read_text()
    assert "- replica r1 (%s, %s): **%s**" % (R1[0], R1[1], rows[R1[0]]["status"]) in md, md
    for h in NODES:
        assert 'replica="%s"' % rows[h]["replica"] in sh(h, "cat %s" % TEXTFILE)
    assert "replica=" not in sh(SOLO, "cat %s" % TEXTFILE)


def test_a_node_that_fails_puts_back_its_replica_before_or_after_the_restart():
    """No canary (a later stage's run) and every failure tolerated, so that both replicas are tried. r1's follower
    refuses to prepare (its deepseek_v2.py edited by hand): its leader, waiting for it, restarts nothing. r2's
    follower cannot start the change (a drop-in outside the role fails its start): its leader, healthy only once
    every rank joined, fails too, and both are put back, started together. One replica out of rotation at a time."""
    sh(R1[1], "f=$(ls -d %s/%s) && cp -p \"$f\" /root/deepseek_v2.py.orig && echo '# local hotfix' >> \"$f\""
       % (SITE, DEEPSEEK_REL))
    sh(R2[1], "mkdir -p %s && printf '%%s' %s > %s" % (os.path.dirname(DROP_IN), _q(FAULT), DROP_IN))
    before, units = start_lines(), {h: unit_sha(h) for h in NODES}
    served = server_info(R2[0])["mem_fraction_static"]  # what r2's leader serves before the run, and after it
    run = operator().run("nodes-fail", REMEDIATE, dict(CHANGE, sglang_rollout_stage="after_canaries",
                                                       sglang_max_fail_percentage=100))
    keep("nodes-fail")
    assert run.rc != 0
    starts = new_starts(before)
    rows = operator().rows("nodes-fail")
    # r1: the follower refused before any restart, the leader learnt it where the nodes meet: nothing restarted.
    assert "matches neither RECORD" in rows[R1[1]]["error"], rows[R1[1]]
    assert "r1: %s did not get ready (failed or unreachable before any restart)" % R1[1] in rows[R1[0]]["error"], \
        rows[R1[0]]
    assert not starts[R1[0]] and not starts[R1[1]], starts
    # r2: the follower failed its start; the leader says so; both put back together and healthy again.
    assert "Restart the server: Unable to start service sglang" in rows[R2[1]]["error"], rows[R2[1]]
    assert "did not answer 200 within sglang_health_timeout" in rows[R2[0]]["error"], rows[R2[0]]
    assert "Replica r2: its other node(s) failed meanwhile: %s: Restart the server" % R2[1] in rows[R2[0]]["error"]
    assert all(rows[h]["rolled_back"] for h in R2), rows
    assert re.search(r"^window: (%s and %s|%s and %s) meet at put back$" % (R2[0], R2[1], R2[1], R2[0]),
                     run.output, re.M), run.tail(80)
    assert {h: unit_sha(h) for h in NODES} == units
    assert "--mem-fraction-static 0.8" not in sh(R2[0], "cat %s" % UNIT)
    wait_until(lambda: follower_health(R2[1]) == 200, 90, "r2's follower back on what was put back")
    wait_until(lambda: answers_with(R2[0], "mem_fraction_static", served), 90, "r2's leader on what was put back")
    assert all(n <= 1 for _, what, n in slots(run.output) if what == "leaves rotation"), slots(run.output)
    one_replica_at_a_time(starts)
    # The host of one node went on (every failure tolerated): it took the change.
    assert len(starts[SOLO]) == 1 and rows[SOLO]["status"] == "changed", rows[SOLO]
    sh(R1[1], "cp -p /root/deepseek_v2.py.orig $(ls -d %s/%s)" % (SITE, DEEPSEEK_REL))
    sh(R2[1], "rm -f %s && systemctl daemon-reload" % DROP_IN)


def test_a_leader_that_fails_puts_back_its_replica_whether_before_the_stop_or_at_its_gate():
    """No canary (a later stage's run) and every failure tolerated, so that both replicas are tried: r1's leader
    fails its drain hook (its follower, waiting to stop, stops nothing: no node of r1 restarts); r2's leader fails
    its gate (an accept length minimum no server reaches), its follower passes its own (health) and learns at the
    replica's verdict that the leader failed: both are put back, started together."""
    before, units = start_lines(), {h: unit_sha(h) for h in HOSTS}
    served = server_info(R2[0])["mem_fraction_static"]
    run = operator().run("leaders-fail", REMEDIATE, dict(
        CHANGE_2, sglang_rollout_stage="after_canaries", sglang_max_fail_percentage=100, sglang_accept_length_min=9,
        sglang_pre_restart_tasks=str(HOOKS / "drain.yml"), sglang_post_restart_tasks=str(HOOKS / "undrain.yml"),
        replicas_drain_fails=[R1[0]]))
    keep("leaders-fail")
    assert run.rc != 0
    rows = operator().rows("leaders-fail")
    starts = new_starts(before)
    # r1: the leader's drain failed; nothing restarted, every file put back.
    assert "the load balancer refused to drain %s" % R1[0] in rows[R1[0]]["error"], rows[R1[0]]
    assert "r1: %s failed before every node could stop" % R1[0] in rows[R1[1]]["error"], rows[R1[1]]
    assert not starts[R1[0]] and not starts[R1[1]], starts
    # r2: the leader's gate failed, its follower passed its own and failed at the verdict; both put back.
    assert "accept length" in rows[R2[0]]["error"], rows[R2[0]]
    assert "r2: %s did not pass its gate (failed or unreachable), while %s passed its own" % (R2[0], R2[1]) in \
        rows[R2[1]]["error"], rows[R2[1]]
    assert re.search(r"^window: %s meet at gated; not there: %s$" % (R2[1], R2[0]), run.output, re.M), run.tail(80)
    assert all(rows[h]["rolled_back"] for h in R2) and all(len(starts[h]) == 2 for h in R2), (rows, starts)
    assert {h: unit_sha(h) for h in HOSTS} == units
    wait_until(lambda: follower_health(R2[1]) == 200, 90, "r2's follower back on what was put back")
    wait_until(lambda: answers_with(R2[0], "mem_fraction_static", served), 90, "r2's leader on what was put back")
    # The hooks ran on the leaders only (and on the host of one node).
    for h in (R1[1], R2[1]):
        assert sh(h, "cat /var/lib/sglang/drains.log /var/lib/sglang/undrains.log 2>/dev/null | wc -l") == "0"
    assert sh(R2[0], "wc -l < /var/lib/sglang/drains.log") == "1"
    assert "- replica r2 (%s, %s): **failed** (%s, %s)" % (R2[0], R2[1], R2[0], R2[1]) in \
        (WORK / "reports" / "leaders-fail" / "latest" / "fleet.md").read_text()


def test_with_the_faults_gone_the_rerun_converges_a_replica_at_a_time():
    sh(R2[0], "rm -f %s && systemctl daemon-reload" % DROP_IN)
    before = start_lines()
    run = operator().run("converges", REMEDIATE, CHANGE_2)
    keep("converges")
    assert run.rc == 0, run.tail(80)
    starts = new_starts(before)
    # Every host failed or was put back in run 4 (the host of one node at its gate): each starts once.
    assert {h: len(starts[h]) for h in HOSTS} == {h: 1 for h in HOSTS}, starts
    assert all(n <= 1 for _, what, n in slots(run.output) if what == "leaves rotation"), slots(run.output)
    one_replica_at_a_time(starts)
    assert "--mem-fraction-static 0.7" in sh(R2[1], "cat %s" % UNIT)
    before = start_lines()
    run = operator().run("rerun", REMEDIATE, CHANGE_2)
    keep("rerun")
    assert run.rc == 0 and run.changed() == 0, run.tail(60)
    assert all(not lines for lines in new_starts(before).values())


def test_a_running_replica_whose_starts_were_never_recorded_is_adopted_without_a_restart():
    """As a fleet converged by hand or by another tool: every node runs what its unit would start, none recorded it.
    The leader is adopted on its live reading, a follower on its stand-in health: nothing restarts."""
    for h in NODES:
        sh(h, "rm %s" % RECORD)
    before = start_lines()
    run = operator().run("adopt", REMEDIATE, CHANGE_2)
    keep("adopt")
    assert run.rc == 0, run.tail(60)
    rows = operator().rows("adopt")
    assert all(rows[h]["status"] == "adopted" and rows[h]["adopted"] for h in NODES), rows
    assert all(not lines for lines in new_starts(before).values())
    assert all(sh(h, "test -s %s && echo yes" % RECORD) == "yes" for h in NODES)


def test_the_audit_reads_every_node():
    run = operator().run("audit", AUDIT, CHANGE_2)
    keep("audit")
    assert run.rc == 0, run.tail(60)
    rows = operator().rows("audit")
    assert set(rows) == set(HOSTS) and all(rows[h]["compliant"] for h in HOSTS), rows
    # The leader's live reading is the replica's; a follower has none to read (no API).
    for leader, follower in (R1, R2):
        assert rows[leader]["live_source"] == "probe" and 3.2 <= rows[leader]["live_accept_length"] <= 3.7, \
            rows[leader]
        assert rows[follower]["live_source"] == "not read", rows[follower]


def test_an_audit_against_a_change_reports_every_node_and_touches_none():
    """The nodes that need work go through the audit's full pass: none meets the others (an audit restarts nothing),
    none is written to or restarted, and every node is reported not compliant."""
    before, shas = start_lines(), {h: unit_sha(h) for h in HOSTS}
    run = operator().run("audit-drift", AUDIT, CHANGE)
    keep("audit-drift")
    assert run.rc != 0, run.tail(60)
    rows = operator().rows("audit-drift")
    assert set(rows) == set(HOSTS) and not any(rows[h]["compliant"] for h in HOSTS), rows
    # join.yml's tasks: the include is skipped, so they never show.
    assert "Go on only with every node of the replica there" not in run.output, run.tail(60)
    assert all(not lines for lines in new_starts(before).values())
    assert {h: unit_sha(h) for h in HOSTS} == shas


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
