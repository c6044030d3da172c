"""plugins/modules/sglang_probe.py on real release files, run as Ansible runs it.

Each test lays out one host: a fake venv from a real wheel (patched with the engine
where the scenario needs it), a draft config, a unit and an environment file, and the
fingerprint sglang_fingerprint records after a healthy start. ``systemctl`` is a stub
on PATH whose exit code says whether the service is active.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (COLLECTIONS_PATH, DRAFT_FIXTURE, MODULE_UTILS_DIR, MODULES, REPO, ROLE, USER_IDS, E, Host,
                      fake_systemctl, run_module, site_file)

LIBRARY = MODULES
MODULE = LIBRARY / "sglang_probe.py"
MODULE_UTILS = MODULE_UTILS_DIR
ANSIBLE = REPO / ".venv" / "bin" / "ansible"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"

def tree_snapshot(root: Path):
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def F(code: str, text: str):
    """A finding as the probe returns it (plugins/module_utils/_reasons.py)."""
    return {"code": code, "text": text}


def codes(res):
    return [r["code"] for r in res["reasons"]]


# ------------------------------------------------------------------------ tests


def test_module_is_python39_syntax():
    # Every module_utils file, the whole engine included: hosts run Debian's python3.
    for path in [MODULE] + sorted(MODULE_UTILS.glob("*.py")):
        ast.parse(path.read_text(), feature_version=(3, 9))


def test_patched_059_is_compliant_and_nothing_is_touched(host):
    h = host("0.5.9")
    before = tree_snapshot(h.tmp)
    res = h.probe(check_mode=True)
    assert res["compliant"] is True, res["reasons"]
    assert res["reasons"] == [] and res["restart_needed"] is False and res["active"] is True
    assert res["release"] == "0.5.9" and res["decision"] == "patch"
    assert res["draft_layer_ids"] == USER_IDS == res["draft_layer_ids_found"]
    assert res["eagle3"]["file_state_before"] == "ours" and res["eagle3"]["compliant"] is True
    assert res["eagle3"]["companion"]["template"] == "companion_cg_attr"
    assert res["fingerprint"]["current"] == res["fingerprint"]["recorded"]
    # Read-only: no file added, changed or even rewritten (the args file is the harness').
    after = tree_snapshot(h.tmp)
    after.pop(str(h.tmp / "args-sglang_probe.json"), None)
    before.pop(str(h.tmp / "args-sglang_probe.json"), None)
    assert after == before


def test_pristine_059_needs_the_patch_and_a_restart(host):
    h = host("0.5.9", patch=False)
    res = h.probe()
    assert res["compliant"] is False and res["restart_needed"] is True
    assert res["eagle3"]["file_state_before"] == "pristine"
    assert any(r["code"] == "source.unpatched" and r["text"].startswith("deepseek_v2.py pristine: patch needed")
               for r in res["reasons"]), res["reasons"]
    # The draft holds the ids already; only the file is the problem.
    assert "draft.ids_differ" not in codes(res)


def test_native_0514_with_translated_ids_is_compliant(host):
    h = host("0.5.14", patch=False)
    assert h.fix["decision"] == "native" and h.fix["draft_layer_ids"] == [0, 3, 31]
    res = h.probe()
    assert res["compliant"] is True, res["reasons"]
    assert res["decision"] == "native" and res["draft_layer_ids_found"] == [0, 3, 31]


def test_native_0514_with_the_users_ids_in_the_draft_is_not(host):
    h = host("0.5.14", patch=False)
    config = json.loads(h.draft.read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = USER_IDS
    h.draft.write_text(json.dumps(config, indent=2) + "\n")
    res = h.probe()
    assert res["compliant"] is False
    assert F("draft.ids_differ", "draft ids [-1, 2, 30] != [0, 3, 31]") in res["reasons"]
    # The draft config is a fingerprint component too.
    assert F("server.fingerprint_differs", "fingerprint differs (draft_config): restart needed") in res["reasons"]


def test_wrong_draft_ids_on_a_patched_release(host):
    h = host("0.5.9")
    config = json.loads(h.draft.read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    h.draft.write_text(json.dumps(config) + "\n")
    res = h.probe()
    assert F("draft.ids_differ", "draft ids [2, 30, 58] != [-1, 2, 30]") in res["reasons"]
    h.draft.unlink()
    res = h.probe()
    assert F("draft.missing", "draft config %s does not exist" % h.draft) in res["reasons"]


def test_version_mismatch(host):
    h = host("0.5.9")
    res = h.probe(expected_version="0.5.12.post1")
    assert res["compliant"] is False and res["release"] == "0.5.9"
    assert res["reasons"] == [F("release.not_pinned", "sglang 0.5.9 installed, 0.5.12.post1 pinned")]


def test_missing_venv(host, tmp_path):
    h = host("0.5.9")
    res = h.probe(venv=str(tmp_path / "nowhere"))
    assert res["compliant"] is False and res["release"] is None and res["restart_needed"] is True
    assert res["reasons"][0]["code"] == "release.not_installed"
    assert res["reasons"][0]["text"].startswith("sglang 0.5.9 not installed in %s" % (tmp_path / "nowhere"))


def test_unit_and_env_hash_mismatch(host):
    h = host("0.5.9")
    files = h.args()["files"]
    files["unit"]["sha256"] = hashlib.sha256(b"another rendering").hexdigest()
    res = h.probe(files=files)
    assert res["reasons"] == [F("unit.differs", "unit differs from the rendered one")]
    h.env.unlink()
    res = h.probe(files=files)
    assert F("environment.differs", "environment %s does not exist" % h.env) in res["reasons"]
    # The env content never appears in the result.
    assert "secret" not in json.dumps(res)


def test_fingerprint_mismatch(host):
    h = host("0.5.9")
    h.unit.write_text(h.unit.read_text() + "# edited\n")
    res = h.probe(files={})  # the rendered one matches what is on disk now; the server ran on the old
    assert res["reasons"] == [F("server.fingerprint_differs", "fingerprint differs (unit): restart needed")]
    assert res["restart_needed"]
    h.state_file.unlink()
    res = h.probe(files={})
    assert res["reasons"] == [F("server.not_recorded", "no healthy start recorded: restart needed")]


def test_fingerprint_follows_the_sglang_component(host):
    """A different command, or a pre-rendered sglang value, changes the fingerprint."""
    h = host("0.5.9")
    comps = dict(h.components, sglang="value:something else")
    assert h.probe(fingerprint_components=comps)["reasons"] == [
        F("server.fingerprint_differs", "fingerprint differs (sglang): restart needed")]
    comps = dict(h.components, sglang="value:" + h.fix["fingerprint"])
    assert h.probe(fingerprint_components=comps)["compliant"] is True


def test_service_inactive(host):
    h = host("0.5.9")
    res = h.probe(active=False)
    assert res["reasons"] == [F("server.inactive", "service sglang not active")]
    assert res["active"] is False and res["restart_needed"]
    # Without a managed service nothing about it is checked (golden images).
    res = h.probe(active=False, service_manage=False, files={"unit": {"path": "/nonexistent", "sha256": "0" * 64}})
    assert res["compliant"] is True and res["active"] is None


def test_bad_layer_ids_fail(host):
    h = host("0.5.9")
    rc, res = run_module(MODULE, h.tmp, h.args(layer_ids=[2, -1]))
    assert rc != 0 and res["failed"] and "ascending" in res["msg"]


def test_the_fingerprint_value_is_the_engines_and_prints_the_companion_as_python(engine):
    res = {"release": "0.5.9", "sha256_after": "ab" * 32,
           "companion": {"needed": True, "template": "companion_cg_attr", "files": ["x.py"]}}
    assert engine.fingerprint_value(res) == (
        "0.5.9 %s {'needed': True, 'template': 'companion_cg_attr', 'files': ['x.py']}" % ("ab" * 32))


def test_one_call_cost(host):
    """Per-call time of the module on an installed, compliant 0.5.9 (printed; loose bound)."""
    h = host("0.5.9")
    times, cpu = [], []
    for _ in range(5):
        start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        rc, res = run_module(MODULE, h.tmp, h.args())
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime)
        assert rc == 0 and res["compliant"] is True, res
    # Wall time depends on the machine's load; CPU time (user + sys) much less.
    print("\nsglang_probe per call (whole process): wall min %.3fs median %.3fs, cpu min %.3fs median %.3fs"
          % (min(times), sorted(times)[2], min(cpu), sorted(cpu)[2]))
    assert min(cpu) < 5


# ------------------------------------------------------------ through Ansible


def ansible_env(tmp: Path) -> dict:
    return dict(
        os.environ,
        PATH=fake_systemctl(tmp, True),
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-local"),
        ANSIBLE_REMOTE_TEMP=str(tmp / "ansible-remote"),
        ANSIBLE_HOME=str(tmp / "ansible-home"),
        # The test double that records as sglang_gate's record does (no server to gate here).
        ANSIBLE_LIBRARY=str(REPO / "tests" / "modules"),
    )


@pytest.mark.skipif(not ANSIBLE.exists(), reason="no ansible in .venv")
def test_through_ansible_adhoc(host):
    h = host("0.5.9")
    work = h.tmp / "adhoc"
    work.mkdir()
    start = time.perf_counter()
    proc = subprocess.run(
        [str(ANSIBLE), "localhost", "-c", "local", "-i", "localhost,", "-m", "fleetops.sglang.sglang_probe",
         "-a", json.dumps(h.args())],
        capture_output=True, text=True, env=ansible_env(h.tmp),
        cwd=str(work),  # no project ansible.cfg: its callbacks would print around the JSON
        timeout=180,
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    head, _, body = proc.stdout.partition(" => ")
    assert head.strip() == "localhost | SUCCESS", proc.stdout
    res = json.loads(body)
    assert res["compliant"] is True and res["changed"] is False, res["reasons"]
    print("\nansible localhost -m sglang_probe: %.2fs wall" % elapsed)


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files:
    - {vars_file}
  vars:
    sglang_service_name: sglang
    sglang_draft_model_path: {draft_dir}
    sglang_server_command: /opt/sglang/venv/bin/python -m sglang.launch_server
    sglang_state_dir: {state_dir}
    sglang_api_key: ""
    sglang_admin_api_key: ""
    _sglang_unit_path: {unit}
    _sglang_env_path: {env}
  tasks:
    - name: Patch as the role does
      fleetops.sglang.sglang_eagle3:
        venv: {venv}
        layer_ids: [-1, 2, 30]
        patches: "{{{{ patches }}}}"
        backup_dir: {backup}
      register: _sglang_fix

    - name: Record as the role's gate does, with the role's own sglang component
      record_fingerprint:
        components: "{{{{ _sglang_fp_components }}}}"
        state_file: "{{{{ _sglang_fingerprint_file }}}}"
      register: recorded

    # vars/main.yml's expression before the engine returned the value: a host
    # recorded by an older collection must hash the same, or the upgrade restarts it.
    - name: Compare with the sglang component as collections up to 1.0 rendered it
      fleetops.sglang.sglang_fingerprint:
        components: "{{{{ _sglang_fp_components | combine({{'sglang': _sglang_old_sglang}}) }}}}"
        state_file: "{{{{ _sglang_fingerprint_file }}}}"
        service: sglang
      vars:
        _sglang_old_sglang: >-
          value:{{{{ _sglang_fix.release | default('') }}}} {{{{ _sglang_fix.sha256_after | default('') }}}}
          {{{{ _sglang_fix.companion | default('') }}}}
      register: old

    - name: Probe, computing the sglang component itself
      fleetops.sglang.sglang_probe:
        venv: {venv}
        expected_version: "{version}"
        layer_ids: [-1, 2, 30]
        patches: "{{{{ patches }}}}"
        backup_dir: {backup}
        draft_config: "{{{{ sglang_draft_model_path }}}}/config.json"
        fingerprint_file: "{{{{ _sglang_fingerprint_file }}}}"
        fingerprint_components: "{{{{ _sglang_fp_components | dict2items | rejectattr('key', 'eq', 'sglang')
                                     | items2dict }}}}"
        service: sglang
      register: probe

    - name: The role's value, the old rendering and the probe's agree
      ansible.builtin.assert:
        that:
          - probe.compliant
          - probe.fingerprint.current == probe.fingerprint.recorded
          - old.current == recorded.current
          - old.reasons == []
        fail_msg: "{{{{ probe.reasons }}}}"
"""


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="no ansible-playbook in .venv")
@pytest.mark.parametrize("version", ["0.5.9", "0.5.12.post1", "0.5.14"])
def test_role_sglang_component_matches_the_probe_and_the_old_rendering(make_venv, patches, tmp_path, version):
    """vars/main.yml's _sglang_fp_components.sglang hashes like the probe's and like the Jinja
    expression it replaced (companion patch, no companion, native): upgrading restarts no host."""
    venv = make_venv(version)
    draft = tmp_path / "draft"
    draft.mkdir()
    shutil.copy(str(DRAFT_FIXTURE), str(draft / "config.json"))
    config = json.loads((draft / "config.json").read_text())
    draft_ids = E.run(E.Request(venv=str(venv), layer_ids=USER_IDS, patches=patches, state="audit"))["draft_layer_ids"]
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = draft_ids
    (draft / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (tmp_path / "unit").write_text("[Service]\n")
    (tmp_path / "env").write_text("A=1\n")
    work = tmp_path / "play"
    work.mkdir()
    (work / "patches.json").write_text(json.dumps({"patches": patches}))
    (work / "play.yml").write_text(PLAYBOOK.format(
        vars_file=ROLE / "vars" / "main.yml", draft_dir=draft, state_dir=tmp_path / "state",
        unit=tmp_path / "unit", env=tmp_path / "env", venv=venv, backup=tmp_path / "backup", version=version))
    env = ansible_env(tmp_path)
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.default"
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-c", "local", "-i", "localhost,", "-e", "@patches.json", "play.yml"],
        capture_output=True, text=True, env=env, cwd=str(work), timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------ sglang_extra_args


def with_server_args(h: Host) -> Host:
    """The release's own server_args.py (and 0.5.20+ field files) in the host's venv."""
    import sglang_wheels
    sglang_wheels.extract_server_args(h.version, next(h.venv.glob("lib/python3*/site-packages")))
    return h


@pytest.mark.parametrize("version", ["0.5.9", "0.5.14"])
def test_bad_extra_args_fail_the_probe_before_anything_is_touched(host, version):
    h = with_server_args(host(version))
    before = tree_snapshot(h.tmp)
    memo = h.tmp / "state" / "flags-memo.json"
    rc, res = run_module(MODULE, h.tmp, h.args(extra_args=["--log-level", "info", "--speculative-num-st", "2",
                                                           "--enable-two-batch-overlap", "--no-such-flag"],
                                               flags_memo_file=str(memo), memo_write=True))
    assert rc != 0 and res["failed"], res
    assert res["msg"].startswith("SGLang %s cannot run what the role would render: " % version)
    errors = res["server_flags"]["errors"]
    assert [e.split(" is ", 1)[0] for e in errors] == ["sglang_extra_args[2]", "sglang_extra_args[4]",
                                                       "sglang_extra_args[5]"]
    assert "set sglang_speculative_num_steps instead" in errors[0]
    assert "model_forward_maybe_tbo" in errors[1] and "does not accept" in errors[2]
    after = tree_snapshot(h.tmp)
    for snap in (before, after):
        snap.pop(str(h.tmp / "args-sglang_probe.json"), None)
    assert after == before  # no memo written for a refused host


def test_good_extra_args_keep_the_host_compliant_and_memoize_the_table(host):
    h = with_server_args(host("0.5.9"))
    memo = h.tmp / "state" / "flags-memo.json"
    extra = ["--log-level", "info", "--context-length=32768", "--enable-torch-compile"]
    res = h.probe(extra_args=extra, flags_memo_file=str(memo), memo_write=True)
    assert res["compliant"] is True, res["reasons"]
    assert res["server_flags"]["checked"] is True and res["server_flags"]["errors"] == []
    assert res["server_flags"]["memo"] == "miss" and memo.is_file()
    again = h.probe(extra_args=extra, flags_memo_file=str(memo), memo_write=True)
    assert again["server_flags"]["memo"] == "hit" and again["compliant"] is True
    # No extra args: nothing to judge, nothing read.
    plain = h.probe()
    assert plain["server_flags"]["checked"] is True and plain["server_flags"].get("options") == 0


def test_the_server_flags_module_checks_after_the_install(host, tmp_path):
    module = MODULES / "sglang_server_flags.py"
    h = with_server_args(host("0.5.23"))
    rc, res = run_module(module, tmp_path, dict(venv=str(h.venv), extra_args=["--tp", "4"], required=True))
    assert rc != 0 and "sglang_extra_args[0] is '--tp' (an abbreviation of --tp-size)" in res["msg"], res
    assert "set sglang_tp_size instead" in res["msg"]
    rc, res = run_module(module, tmp_path, dict(venv=str(h.venv), extra_args=["--log-level", "info"],
                                                expected_version="0.5.23"))
    assert rc == 0 and res["checked"] and res["errors"] == [] and res["allow_abbrev"] is True, res
    rc, res = run_module(module, tmp_path, dict(venv=str(h.venv), extra_args=["--bogus"],
                                                expected_version="0.5.9"))
    assert rc == 0 and not res["checked"] and "checked after the install" in res["reason"], res
    rc, res = run_module(module, tmp_path, dict(venv=str(tmp_path / "none"), extra_args=["--x"], required=True))
    assert rc != 0 and "no SGLang installed" in res["msg"]
# ------------------------------------------------------ inputs refused by the probe

TARGET_FIXTURE = REPO / "files" / "models" / "deepseek-v3" / "config.json"


def target_dir(tmp: Path, **changes) -> Path:
    """A target model directory holding the test bed's DeepSeek-V3 config, changed as asked."""
    target = tmp / "target"
    target.mkdir(exist_ok=True)
    config = json.loads(TARGET_FIXTURE.read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return target


def test_a_converged_host_whose_target_is_swapped_for_llama_is_refused(host):
    h = host("0.5.9")
    assert h.probe(target_model_path=str(target_dir(h.tmp)))["compliant"] is True
    llama = target_dir(h.tmp, architectures=["LlamaForCausalLM"], model_type="llama")
    rc, res = run_module(MODULE, h.tmp, h.args(target_model_path=str(llama)))
    assert rc != 0 and res["failed"], res
    assert "sglang_model_path=%s" % llama in res["msg"] and '["LlamaForCausalLM"]' in res["msg"], res["msg"]


@pytest.mark.parametrize("version,family", [("0.5.9", "L"), ("0.5.14", "C")])
def test_ids_the_release_never_captures_are_refused_on_the_fast_path(host, version, family):
    h = host(version, patch=version == "0.5.9")
    # 60 is the last decoder layer of a 61-layer target: its output is never captured.
    rc, res = run_module(MODULE, h.tmp, h.args(target_model_path=str(target_dir(h.tmp)),
                                               layer_ids=[-1, 2, 60]))
    assert rc != 0 and res["failed"], res
    assert "sglang_eagle3_layer_ids has [60]" in res["msg"], res["msg"]
    assert "sglang %s (forward family %s)" % (version, family) in res["msg"], res["msg"]
    assert "then 0..59" in res["msg"], res["msg"]


def test_a_compliant_host_says_when_another_run_holds_its_lease(host):
    # A compliant host ends at the probe and never reaches tasks/lease.yml: audits and
    # reruns must still hear that another run is working on it, without taking or waiting.
    h = host("0.5.9")
    lease = h.tmp / "state" / "lease.json"
    holder = {"run_id": "20261201T120000Z-4242", "controller": "ops-1", "user": "alice", "pid": 4242,
              "started": time.time() - 60, "taken_at": time.time() - 30}
    lease.write_text(json.dumps(holder))
    before = lease.read_bytes()
    res = h.probe(check_mode=True, lease_file=str(lease))
    assert res["compliant"] is True
    assert res["lease_holder"]["run_id"] == holder["run_id"]
    warning = json.dumps(res.get("warnings", []))  # str or dict items, by ansible-core version
    assert "another run holds this host's lease" in warning
    assert "run 20261201T120000Z-4242 by alice@ops-1" in warning
    assert lease.read_bytes() == before
    lease.unlink()
    res = h.probe(check_mode=True, lease_file=str(lease))
    assert res["lease_holder"] is None and not res.get("warnings")


def test_a_host_that_needs_work_leaves_the_lease_to_the_lease_task(host):
    h = host("0.5.9", patch=False)
    lease = h.tmp / "lease.json"
    lease.write_text(json.dumps({"run_id": "r1", "controller": "c", "user": "u", "pid": 1,
                                 "started": time.time(), "taken_at": time.time()}))
    res = h.probe(check_mode=True, lease_file=str(lease))
    assert res["compliant"] is False
    assert res["lease_holder"] is None and not res.get("warnings")
