"""Release upgrades: 0.5.9 -> 0.5.12.post1 -> 0.5.14, one restart each, then nothing.

Molecule's converge installed 0.5.9. The tests run in file order; each bumps
sglang_version and checks the file against the release's RECORD (or the patched
state), the draft's ids and what the running server reports.

Each release is a directory of its own under /opt/sglang/releases, and /opt/sglang/venv a link
to the one that serves: the upgrade to 0.5.12.post1 is built while 0.5.9 serves (whose every file
is hashed at the drain, and again at the end), its controller is SIGKILLed between the build and
the switch (the host serves 0.5.9, and starts 0.5.9 again after a reboot), the rerun switches to
the release already built, and playbooks/rollback.yml switches back with no index or wheelhouse.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

from scenario_helpers import (  # noqa: E402
    CONVERGE, PROJECT, SITE, assert_rerun_changes_nothing, deepseek_path, draft_ids, inventory, record_sha256,
    run_playbook, server_info, sha256, starts, stats_env, wait_until,
)

VENV, RELEASES = "/opt/sglang/venv", "/opt/sglang/releases"
HOLD_HOOK = Path(__file__).resolve().parents[1] / "files" / "hold-at-drain.yml"
# Every file of a release, hashed: the same command as the hold hook's.
RELEASE_HASH = "cd %s && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1"
_state = {}

CUDA_GRAPH_REL = "sglang/srt/model_executor/cuda_graph_runner.py"
MODEL_RUNNER_REL = "sglang/srt/model_executor/model_runner.py"
# Pristine sglang/srt/models/deepseek_v2.py per release (sha256 of the file in each release's wheel),
# to catch a RECORD that lies.
PRISTINE = {
    "0.5.9": "4071b9a6a6ac71e1143204708df42f2ba5bd163a5d7a020579242df56e490a35",
    "0.5.12.post1": "3947d605e2ffeafb2d20baa2d87490d02a5671df0eb7bd0527ec60581580a49c",
    "0.5.14": "947fdc256101f538a668090f82e5eb5f888e2434f2bbbf69a99cdaa628cf902e",
}


def _path(host, rel: str) -> str:
    return host.check_output("ls -d %s/%s" % (SITE, rel)).strip()


def _assert_patched(host, version: str) -> None:
    path = deepseek_path(host)
    assert record_sha256(host) == PRISTINE[version]
    assert sha256(host, path) != PRISTINE[version]
    text = host.file(path).content_string
    assert "self.capture_embedding_for_eagle3 = False" in text
    assert "aux_hidden_states.append(hidden_states.clone())" in text
    assert host.run("/opt/sglang/venv/bin/python -m py_compile %s" % path).rc == 0
    # The pristine bytes were kept outside site-packages before the first write.
    backup = "/var/lib/sglang-remediation/backup/sglang-%s/sglang/srt/models/deepseek_v2.py" % version
    assert sha256(host, backup) == PRISTINE[version]


def _assert_pristine(host, rel: str) -> None:
    """As pip installed it, or absent (0.5.14 moved the CUDA-graph runner)."""
    found = host.run("ls -d %s/%s" % (SITE, rel))
    if found.rc != 0:
        assert record_sha256(host, rel) == "", rel
        return
    assert sha256(host, found.stdout.strip()) == record_sha256(host, rel), rel


def _assert_serving(host, version: str) -> None:
    info = server_info(host)
    assert info["version"] == version
    assert info["test_double"]["wiring_matches_training"], info["test_double"]
    assert info["test_double"]["decode_hidden_states"] == ["embed", "L2", "L30"]
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (15, 1, 16)


def _converge(host, version: str, expect_starts: int) -> None:
    run = run_playbook(extra_vars={"sglang_version": version})
    assert run.rc == 0 and run.failed() == 0, run.tail(120)
    assert starts(host) == expect_starts, run.tail(120)
    assert host.check_output("ls -d %s/sglang-*.dist-info" % SITE).count("dist-info") == 1


def test_059_is_patched_with_the_cuda_graph_companion(host):
    assert starts(host) == 1
    _assert_patched(host, "0.5.9")
    runner = host.file(_path(host, CUDA_GRAPH_REL)).content_string
    assert sha256(host, _path(host, CUDA_GRAPH_REL)) != record_sha256(host, CUDA_GRAPH_REL)
    assert "set_eagle3_layers_to_capture()" not in runner
    assert draft_ids(host) == [-1, 2, 30]
    _assert_serving(host, "0.5.9")


def _serving_dir(host) -> str:
    return host.check_output("readlink -f %s" % VENV).strip()


def _healthy(host) -> bool:
    return host.run("python3 -c \"import urllib.request;urllib.request.urlopen("
                    "'http://127.0.0.1:30000/health_generate', timeout=5)\"").rc == 0


def _row(run_name: str, extra_vars, playbook: Path = CONVERGE, args=()):
    reports = Path(tempfile.mkdtemp(prefix="upgrade-%s-" % run_name))
    run = run_playbook(playbook, extra_vars=extra_vars, args=args, env={
        "ANSIBLE_CALLBACKS_ENABLED": "fleetops.sglang.sglang_report", "SGLANG_REPORT_DIR": str(reports)})
    doc = json.loads((reports / "latest" / "fleet.json").read_text())
    return run, doc["hosts"][0]


def test_an_upgrade_killed_between_its_build_and_its_switch_leaves_the_old_release_serving(host):
    old = _serving_dir(host)
    assert os.path.dirname(old) == RELEASES and os.path.basename(old).startswith("0.5.9-"), old
    _state["old"], _state["old_hash"] = old, host.check_output(RELEASE_HASH % old).strip()
    pid = host.check_output("systemctl show -p MainPID --value sglang").strip()
    host.check_output("rm -f /run/sglang-at-drain.json /run/sglang-drain-go")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"sglang_version": "0.5.12.post1", "sglang_pre_restart_tasks": str(HOLD_HOOK)}, fh)
    log = open(tempfile.mktemp(prefix="upgrade-killed-", suffix=".log"), "w")
    controller = subprocess.Popen(["ansible-playbook", "-i", inventory(), str(CONVERGE), "-e", "@" + fh.name],
                                  cwd=str(PROJECT), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  env=stats_env(Path(tempfile.mktemp()), dict(os.environ, ANSIBLE_NOCOLOR="1")))
    try:
        wait_until(lambda: controller.poll() is not None or host.file("/run/sglang-at-drain.json").exists, 600,
                   "the upgrade's drain", 2)
        assert controller.poll() is None, open(log.name).read()[-4000:]
        at_drain = json.loads(host.file("/run/sglang-at-drain.json").content_string)
        # Built, patched, verified and sealed while 0.5.9 served, untouched: every file as before.
        assert at_drain == {"current": old, "hash": _state["old_hash"], "pid": pid, "building": at_drain["building"]}
        new = at_drain["building"]
        assert os.path.basename(new).startswith("0.5.12.post1-") and new != old, new
        marker = json.loads(host.file(new + "/.fleetops-release.json").content_string)
        assert marker["id"] == os.path.basename(new) and marker["version"] == "0.5.12.post1", marker
        assert starts(host) == 1
    finally:
        os.killpg(controller.pid, signal.SIGKILL)
        controller.wait()
        log.close()
    _state["new"] = new
    # Killed between the build and the switch: the host still serves 0.5.9 ...
    assert _serving_dir(host) == old and starts(host) == 1
    _assert_serving(host, "0.5.9")
    # ... and a reboot (the enabled unit started again) starts 0.5.9 too.
    host.check_output("systemctl restart sglang")
    wait_until(lambda: _healthy(host), 120, "the server after its restart", 1)
    assert starts(host) == 2
    _assert_serving(host, "0.5.9")


def test_the_rerun_switches_to_the_release_built_and_restarts_once(host):
    """The killed run's release is built and sealed: the rerun takes its lease over, switches to it
    (no pip) and restarts once. The release that served is never written, then or later."""
    run, row = _row("rerun", {"sglang_version": "0.5.12.post1"})
    assert run.rc == 0 and run.failed() == 0, run.tail(120)
    assert "release %s is built and sealed: switch to it" % os.path.basename(_state["new"]) in run.output, run.tail(80)
    assert "Install the pinned SGLang into the new release's virtualenv] ***\nskipping" in run.output, run.tail(80)
    assert starts(host) == 3 and _serving_dir(host) == _state["new"]
    _state["upgrade_out"] = row["out_of_rotation_s"]
    _assert_patched(host, "0.5.12.post1")
    _assert_pristine(host, CUDA_GRAPH_REL)
    _assert_pristine(host, MODEL_RUNNER_REL)
    assert draft_ids(host) == [-1, 2, 30]
    _assert_serving(host, "0.5.12.post1")
    assert host.check_output(RELEASE_HASH % _state["old"]).strip() == _state["old_hash"]


def test_a_rollback_switches_back_with_no_index_and_no_wheelhouse(host):
    """playbooks/rollback.yml puts the upgrade back by switching: the host's wheelhouse is gone and the
    only index named refuses connections, and the old release serves again after one restart, in
    about the time of the upgrade's own restart and gate (the ratio is printed and bounded)."""
    host.check_output("rm -rf /var/cache/sglang/wheelhouse")
    offline = {"sglang_install_source": "index", "sglang_pip_index_url": "http://127.0.0.1:9/simple",
               "sglang_version": "0.5.12.post1"}
    run, row = _row("rollback", offline, playbook=PROJECT / "playbooks" / "rollback.yml")
    assert run.rc == 0, run.tail(120)
    assert row["rolled_back"] is True and row["restarts"] == 1, row
    assert "%s switched back to %s (sglang 0.5.9)" % (VENV, _state["old"]) in row["rollback"], row["rollback"]
    assert _serving_dir(host) == _state["old"] and starts(host) == 4
    _assert_serving(host, "0.5.9")
    ratio = row["out_of_rotation_s"] / _state["upgrade_out"]
    # Kept for the tests guide and the closing note (the verifier's output hides prints).
    measured = PROJECT / ".cache" / "measured"
    measured.mkdir(parents=True, exist_ok=True)
    (measured / "upgrade-rollback.json").write_text(json.dumps({
        "rollback_out_of_rotation_s": row["out_of_rotation_s"], "rollback_restart_to_healthy_s":
        row["restart_to_healthy_s"], "upgrade_out_of_rotation_s": _state["upgrade_out"], "ratio": ratio}) + "\n")
    assert ratio < 1.5, (row["out_of_rotation_s"], _state["upgrade_out"])
    # The release rolled back from was switched to, not built, by that run: it is kept, and switched
    # to again with no wheel on the host.
    again = run_playbook(extra_vars={"sglang_version": "0.5.12.post1"})
    assert again.rc == 0 and starts(host) == 5 and _serving_dir(host) == _state["new"], again.tail(120)
    _assert_serving(host, "0.5.12.post1")
    assert host.check_output(RELEASE_HASH % _state["old"]).strip() == _state["old_hash"]


def test_upgrade_to_0514_needs_no_patch_and_shifts_the_ids(host):
    _converge(host, "0.5.14", expect_starts=6)
    path = deepseek_path(host)
    assert sha256(host, path) == record_sha256(host) == PRISTINE["0.5.14"]
    assert "capture_embedding_for_eagle3" not in host.file(path).content_string
    _assert_pristine(host, CUDA_GRAPH_REL)
    _assert_pristine(host, MODEL_RUNNER_REL)
    assert draft_ids(host) == [0, 3, 31]
    _assert_serving(host, "0.5.14")


@pytest.mark.parametrize("version", ["0.5.14"])
def test_rerun_changes_nothing_and_does_not_restart(host, version):
    assert_rerun_changes_nothing(host, {"sglang_version": version}, starts_so_far=6)
    _assert_serving(host, version)


def test_a_new_export_of_the_draft_is_rolled_out_once_and_the_draft_only_read(host):
    """A new export lands in the draft's own directory (a file added, a key of its config.json changed):
    the next run makes the view again (the new key, the ids the release needs, a link to the new file)
    and restarts the server once; the run after changes nothing."""
    draft = "/models/DeepSeek-V3-EAGLE3"
    host.check_output(
        "cd %s && printf '{}\\n' > special_tokens_map.json && python3 -c 'import json; p=\"config.json\";"
        " c=json.load(open(p)); c[\"rope_theta\"]=12345.0; json.dump(c, open(p, \"w\"), indent=2)'" % draft)
    exported = sha256(host, draft + "/config.json")
    run = run_playbook(extra_vars={"sglang_version": "0.5.14"})
    assert run.rc == 0, run.tail(120)
    assert starts(host) == 7
    assert sha256(host, draft + "/config.json") == exported  # read, never written
    link = host.file("/etc/sglang/sglang.draft/special_tokens_map.json")
    assert link.is_symlink and link.linked_to == draft + "/special_tokens_map.json"
    view = json.loads(host.file("/etc/sglang/sglang.draft/config.json").content_string)
    assert view["rope_theta"] == 12345.0 and draft_ids(host) == [0, 3, 31]
    _assert_serving(host, "0.5.14")
    assert_rerun_changes_nothing(host, {"sglang_version": "0.5.14"}, starts_so_far=7)
