"""The suite's time table (testbed/timing.py) and the converged image's input hash (testbed/converged.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))
import converged  # noqa: E402
import timing  # noqa: E402


def test_a_step_records_its_wall_time_its_trees_cpu_and_its_exit_code(tmp_path):
    steps = tmp_path / "steps.jsonl"
    # A child that burns CPU in a grandchild: the tree's CPU counts it.
    burn = "import subprocess,sys; subprocess.run([sys.executable,'-c','sum(range(3*10**7))']); sys.exit(3)"
    rc = timing.run_step("burn", [sys.executable, "-c", burn], steps)
    assert rc == 3
    (record,) = timing.read_steps(steps)
    assert record["name"] == "burn" and record["rc"] == 3
    assert record["cpu"] > 0.2 and record["wall"] >= record["cpu"] * 0.5


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead: only its parent has yet to reap it.
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_step_running_at_the_stop_is_ended_with_its_whole_process_group(tmp_path):
    steps = tmp_path / "steps.jsonl"
    pid_file = tmp_path / "grandchild.pid"
    # A step whose child outlives it, in the background: the stop reaches it too (its process group).
    script = ("import subprocess,sys,time; p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(300)']);"
              "open(%r,'w').write(str(p.pid)); time.sleep(300)" % str(pid_file))
    t0 = time.monotonic()
    rc = timing.run_step("long", [sys.executable, "-c", script], steps, stop_at=time.time() + 2, grace=5)
    elapsed = time.monotonic() - t0
    assert rc == timing.STOPPED_RC
    (record,) = timing.read_steps(steps)
    assert record["stopped"] is True and record["rc"] == timing.STOPPED_RC
    assert 1.5 <= elapsed < 30, elapsed
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "the step's grandchild outlived the stop"


def test_a_step_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    steps = tmp_path / "steps.jsonl"
    ready = tmp_path / "ready"
    script = ("import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(%r,'w').close();"
              "time.sleep(300)" % str(ready))
    t0 = time.monotonic()
    rc = timing.run_step("stubborn", [sys.executable, "-c", script], steps, stop_at=time.time() + 2, grace=1)
    assert rc == timing.STOPPED_RC and ready.exists()
    assert time.monotonic() - t0 < 30


def test_a_step_whose_turn_comes_after_the_stop_never_starts(tmp_path):
    steps = tmp_path / "steps.jsonl"
    marker = tmp_path / "started"
    rc = timing.run_step("late", [sys.executable, "-c", "open(%r,'w').close()" % str(marker)], steps,
                         stop_at=time.time() - 1)
    assert rc == timing.STOPPED_RC and not marker.exists()
    (record,) = timing.read_steps(steps)
    assert record["stopped"] is True and record["wall"] == 0.0


def test_a_step_that_ends_before_the_stop_keeps_its_own_exit_code(tmp_path):
    steps = tmp_path / "steps.jsonl"
    rc = timing.run_step("quick", [sys.executable, "-c", "import sys; sys.exit(3)"], steps, stop_at=time.time() + 60)
    assert rc == 3
    (record,) = timing.read_steps(steps)
    assert "stopped" not in record and record["rc"] == 3


def test_the_table_and_verdict_name_the_stopped_steps():
    steps = [{"name": "lint", "started": 100.0, "wall": 10.0, "cpu": 8.0, "rc": 0},
             {"name": "molecule faults@bookworm", "started": 100.0, "wall": 4400.0, "cpu": 900.0, "rc": 124,
              "stopped": True}]
    assert "| molecule faults@bookworm | 0 | 4400 | 900 | 0 | 124 (stopped) |" in timing.table(steps, {}, "sglang")
    lines = timing.verdict(4500, steps)
    assert any(line.startswith("STOPPED") and "molecule faults@bookworm" in line and "lint" not in line
               for line in lines)
    assert not any(line.startswith("STOPPED") for line in timing.verdict(4500, steps[:1]))


def test_scripts_test_stops_at_its_limit_and_still_prints_its_table(tmp_path):
    """The suite's own script, in a copy of the two files it needs (a run here must not touch the
    checkout's .cache): with the limit already passed, its first step never starts, and the run
    exits non-zero with the table and the STOPPED line instead of being killed with nothing said."""
    repo = Path(__file__).resolve().parents[1]
    for rel in ("scripts/test", "testbed/timing.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, tmp_path / rel)
    env = dict(os.environ, SGLANG_TEST_STOP_AFTER="0")
    res = subprocess.run(["bash", str(tmp_path / "scripts/test")], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == timing.STOPPED_RC, out
    assert "| toolchain |" in out and "124 (stopped)" in out, out
    assert "STOPPED: the suite reached its time limit" in out, out
    assert not (tmp_path / ".venv").exists(), "the toolchain step ran after the stop"


def test_containers_are_attributed_to_their_scenario_by_name():
    containers = {"sglang-default-bookworm": 10.0, "sglang-default-trixie": 20.0, "sglang-fleet-1-bookworm": 1.0,
                  "sglang-fleet-2-bookworm": 2.0, "sglang-fleet-bookworm-extra": 100.0,
                  "sglang-converged-bookworm": 5.0, "other-default-bookworm": 50.0}
    assert timing.containers_of("molecule default@bookworm", containers, "sglang", {}) == 10.0
    assert timing.containers_of("molecule default@trixie", containers, "sglang", {}) == 20.0
    assert timing.containers_of("molecule fleet@bookworm", containers, "sglang", {}) == 3.0
    owners = {"sglang-converged-bookworm": "converged image"}
    assert timing.containers_of("converged image", containers, "sglang", owners) == 5.0
    assert timing.containers_of("lint", containers, "sglang", owners) == 0.0


def test_the_table_totals_and_lists_containers_no_step_owns():
    steps = [{"name": "lint", "started": 100.0, "wall": 10.0, "cpu": 8.0, "rc": 0},
             {"name": "molecule default@bookworm", "started": 110.0, "wall": 50.0, "cpu": 30.0, "rc": 0}]
    text = timing.table(steps, {"sglang-default-bookworm": 40.0, "stray": 2.0}, "sglang", total_wall=61.0)
    assert "| molecule default@bookworm | 10 | 50 | 30 | 40 | 0 |" in text
    assert "| (other containers) | | | | 2 | |" in text
    assert "| **total** | | **61** | **38** | **42** | |" in text


def test_the_verdict_warns_past_an_hour_only():
    assert not any("WARNING" in line for line in timing.verdict(59 * 60))
    assert any("WARNING" in line for line in timing.verdict(61 * 60))


def test_container_usage_is_read_from_cgroup_v1_and_v2_files(tmp_path):
    v1 = tmp_path / "cpuacct.usage"
    v1.write_text("2500000000\n")
    v2 = tmp_path / "cpu.stat"
    v2.write_text("usage_usec 1500000\nuser_usec 1000000\n")
    assert timing.read_usage(str(v1)) == 2.5
    assert timing.read_usage(str(v2)) == 1.5
    assert timing.read_usage(str(tmp_path / "missing")) is None


def test_containers_of_one_name_add_up(tmp_path):
    raw = {"sglang-default-bookworm 0123456789ab": 3.0, "sglang-default-bookworm ba9876543210": 4.0,
           timing.ENGINE_KEY: 5.0, timing.MACHINE_KEY: 20.0}
    path = tmp_path / "containers.json"
    path.write_text(json.dumps(raw))
    assert timing.read_containers(path) == {"sglang-default-bookworm": 7.0, timing.ENGINE_KEY: 5.0,
                                            timing.MACHINE_KEY: 20.0}
    text = timing.table([{"name": "lint", "started": 0.0, "wall": 10.0, "cpu": 8.0, "rc": 0}],
                        timing.read_containers(path), "sglang", total_wall=10.0)
    assert "| (the Docker engine: dockerd, containerd, shims) | | | 5 | | |" in text
    assert "(other containers) | | | | 7 |" in text and "busy 20 CPU-seconds" in text


def _fake_repo(root: Path) -> Path:
    for rel in converged.INPUTS:
        path = root / rel
        if "." in Path(rel).name:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rel)
        else:
            path.mkdir(parents=True, exist_ok=True)
            (path / "a.txt").write_text(rel)
    (root / "wheels").mkdir()
    (root / "wheels" / ("sglang-%s-py3-none-any.whl" % converged.VERSION)).write_bytes(b"wheel")
    return root


def test_the_converged_image_hash_changes_with_every_input(tmp_path):
    repo = _fake_repo(tmp_path / "repo")
    wheelhouse = repo / "wheels"
    first = converged.inputs_hash("bookworm", wheelhouse, repo)
    assert converged.inputs_hash("bookworm", wheelhouse, repo) == first
    assert converged.inputs_hash("trixie", wheelhouse, repo) != first  # the base image's recipe
    seen = {first}
    for rel in converged.INPUTS:
        path = repo / rel
        target = path if path.is_file() else path / "a.txt"
        old = target.read_bytes()
        target.write_bytes(old + b"\nchanged")
        digest = converged.inputs_hash("bookworm", wheelhouse, repo)
        assert digest not in seen, rel
        seen.add(digest)
        target.write_bytes(old)
    (wheelhouse / ("sglang-%s-py3-none-any.whl" % converged.VERSION)).write_bytes(b"another wheel")
    assert converged.inputs_hash("bookworm", wheelhouse, repo) not in seen
    # Compiled files and caches are not inputs.
    (repo / "plugins" / "__pycache__").mkdir()
    (repo / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    digest = converged.inputs_hash("bookworm", wheelhouse, repo)
    (repo / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"other cache")
    assert converged.inputs_hash("bookworm", wheelhouse, repo) == digest
