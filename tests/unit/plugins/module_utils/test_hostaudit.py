"""plugins/module_utils/_hostaudit.py: the host's own audit timer.

The bundle is run as the timer's service runs it (``python3 -I <zip> <spec>``, a Python without
Ansible) on a host laid out from a real release (tests/conftest.py's Host): it judges the host with
the probe's engine and writes the textfile (mode timer) and its own; a held lease makes it skip.
Installing is run against directories of the test's own, with ``systemctl`` recorded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import MODULE_UTILS_DIR, USER_IDS, clock_past, fake_systemctl, wait_running

from ansible_collections.fleetops.sglang.plugins.module_utils import _hostaudit as HA
from ansible_collections.fleetops.sglang.plugins.module_utils import _inputs

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def test_the_interval_repeats_on_the_clock_or_is_refused_by_name():
    assert HA.calendar(5) == "*-*-* *:*:00/5"
    assert HA.calendar(900) == "*-*-* *:00/15:00"
    assert HA.calendar(86400) == "*-*-* 00:00:00" and HA.calendar(7200) == "*-*-* 00/2:00:00"
    for bad in (7, 45, 4, 3600 * 5, 0):
        with pytest.raises(ValueError, match="sglang_audit_timer_interval=%d" % bad):
            HA.calendar(bad)
    errors = _inputs.variable_errors({"sglang_audit_timer_interval": 700, "sglang_audit_timer_jitter": 30})
    assert errors == ["sglang_audit_timer_interval=700 does not repeat on the clock (the timer's OnCalendar, which "
                      "Persistent= needs); accepted: %s." % HA.INTERVALS]
    errors = _inputs.variable_errors({"sglang_audit_timer_interval": 60, "sglang_audit_timer_jitter": 60})
    assert len(errors) == 1 and errors[0].startswith("sglang_audit_timer_jitter=60 is not from 0 to less than "
                                                     "sglang_audit_timer_interval=60"), errors


def test_the_bundle_is_the_collections_own_code_and_the_same_bytes_each_time():
    first, second = HA.bundle(), HA.bundle()
    assert first == second
    with zipfile.ZipFile(__import__("io").BytesIO(first)) as archive:
        names = archive.namelist()
        root = "ansible_collections/fleetops/sglang/plugins/module_utils/"
        shipped = {n[len(root):-3] for n in names if n.startswith(root) and not n.endswith("__init__.py")}
        # Everything the audit imports, and each file byte for byte as the collection has it.
        assert {"_hostaudit", "_probe", "_live", "_metrics", "_lease", "_eagle3", "_anchors_table"} <= shipped
        for name in shipped:
            assert archive.read(root + name + ".py") == (MODULE_UTILS_DIR / (name + ".py")).read_bytes(), name
        assert "__main__.py" in names
        # Nothing of Ansible's: a host runs it with its own python3 and no Ansible.
        assert not any(re.search(r"^\s*(from|import) ansible\b(?!_collections)", archive.read(n).decode(), re.M)
                       for n in names if n.endswith(".py"))


def _spec(h, tmp: Path, **over):
    """The spec the probe's action builds from this host's probe arguments (no files, no key)."""
    args = h.args(textfile={"path": str(tmp / "tf" / "sglang_remediation.prom"),
                            "state_file": str(tmp / "metrics-state.json"), "mode": "remediate"},
                  lease_file=str(tmp / "lease.json"), anchors={}, memo_file=None, flags_memo_file=None)
    args["files"]["api_keys"] = {"path": str(tmp / "keys.yaml")}
    args["secret_sha256"] = {"environment": "f" * 64}
    spec = HA.spec_of(args, {"interval": 5, "jitter": 2, "lease": {"ttl": 7200, "stale": 1800}})
    spec.update(over)
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec))
    return spec, path


def _run_bundle(tmp: Path, spec_path: Path, main_pid: int = 0):
    bundle = tmp / "audit.pyz"
    bundle.write_bytes(HA.bundle())
    env = {"PATH": fake_systemctl(tmp, True), "LANG": "C.UTF-8", "SGLANG_TEST_MAINPID": str(main_pid)}
    proc = subprocess.run([PYTHON, "-I", str(bundle), str(spec_path)], capture_output=True, text=True, env=env,
                          timeout=300)
    return proc


def _samples(path: Path):
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in path.read_text().splitlines() if line and not line.startswith("#")}


def test_the_spec_holds_no_key_and_no_hash_of_a_secret_file(host, tmp_path):
    h = host("0.5.9")
    args = h.args(live={"url": "http://127.0.0.1:30000", "api_key": "sk-never-here", "expected": {}})
    args["files"]["api_keys"] = {"path": "/etc/sglang/sglang.keys.yaml"}
    args["secret_sha256"] = {"environment": "e" * 64}
    spec = HA.spec_of(args, {"interval": 900, "jitter": 120})
    text = json.dumps(spec)
    assert "sk-never-here" not in text and "e" * 64 not in text and "files" not in spec
    assert spec["live"]["api_key_file"] == "/etc/sglang/sglang.keys.yaml"
    assert (spec["interval"], spec["jitter"]) == (900, 120)


@pytest.mark.parametrize("probe_writes", [True, False], ids=["this probe writes the textfile", "it writes none"])
def test_the_specs_textfile_is_where_the_role_keeps_it_whether_this_probe_writes_it_or_not(host, probe_writes):
    """sglang_fast_path or sglang_metrics_textfile off: the probe gets no textfile option, and the timer still
    writes the role's (from the timer's own textfile); the same spec either way, the run's mode label left out."""
    where = {"path": "/var/lib/prometheus/node-exporter/sglang_remediation.prom",
             "state_file": "/var/lib/sglang-remediation/metrics-state.json", "replica": "", "audit_timer": True}
    h = host("0.5.9")
    args = h.args(textfile=dict(where, mode="remediate")) if probe_writes else h.args()
    assert ("textfile" in args) is probe_writes
    spec = HA.spec_of(args, {"interval": 900, "jitter": 120, "textfile": dict(where)})
    assert spec["textfile"] == where
    assert HA.paths(spec["service"], spec["textfile"]["path"])["heartbeat"].endswith("sglang_remediation_audit_timer.prom")


def test_the_timer_audits_with_the_probes_engine_and_writes_the_textfile_as_timer(host, tmp_path):
    h = host("0.5.9")
    _spec_, path = _spec(h, tmp_path)
    before = time.time()
    proc = _run_bundle(tmp_path, path)
    assert proc.returncode == 0 and "audited: compliant" in proc.stdout, proc
    s = _samples(tmp_path / "tf" / "sglang_remediation.prom")
    assert s["sglang_remediation_compliant"] == 1 and s["sglang_remediation_audit_timer"] == 1
    assert s['sglang_remediation_info{release="0.5.9",decision="patch",family="body_a_loop",draft_ids="-1,2,30",'
             'mode="timer"}'] == 1
    beat = _samples(tmp_path / "tf" / "sglang_remediation_audit_timer.prom")
    assert beat['sglang_audit_timer_outcome{outcome="audited"}'] == 1
    assert beat["sglang_audit_timer_last_run_timestamp_seconds"] >= before
    assert beat["sglang_audit_timer_interval_seconds"] == 5 and beat["sglang_audit_timer_jitter_seconds"] == 2
    assert 0 < beat["sglang_audit_timer_cpu_seconds"] < 30
    # A change by hand: the draft's ids. The next run says so, and changes nothing itself.
    config = json.loads(h.draft.read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 30, 58]
    h.draft.write_text(json.dumps(config) + "\n")
    proc = _run_bundle(tmp_path, path)
    assert proc.returncode == 0 and "audited: not compliant: draft ids [2, 30, 58] != [-1, 2, 30]" in proc.stdout, proc
    s = _samples(tmp_path / "tf" / "sglang_remediation.prom")
    assert s["sglang_remediation_compliant"] == 0 and s['sglang_remediation_failure{class="draft_config"}'] == 1
    assert json.loads(h.draft.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert USER_IDS == [-1, 2, 30]


def test_a_held_lease_makes_the_timer_skip_and_say_so(host, tmp_path):
    h = host("0.5.9")
    _s, path = _spec(h, tmp_path)
    now = time.time()
    (tmp_path / "lease.json").write_text(json.dumps({"run_id": "ctl-1234-1", "controller": "ctl", "user": "sre",
                                                     "pid": 1234, "started": now, "taken_at": now, "heartbeat": now}))
    proc = _run_bundle(tmp_path, path)
    assert proc.returncode == 0 and proc.stdout.startswith("skipped: a remediation run holds this host's lease"), proc
    assert "ctl-1234-1" in proc.stdout
    assert not (tmp_path / "tf" / "sglang_remediation.prom").exists()
    beat = _samples(tmp_path / "tf" / "sglang_remediation_audit_timer.prom")
    assert beat['sglang_audit_timer_outcome{outcome="skipped"}'] == 1
    # A lease whose holder went quiet long ago holds nothing: the timer audits.
    old = now - 7000
    (tmp_path / "lease.json").write_text(json.dumps({"run_id": "ctl-1234-1", "taken_at": old, "heartbeat": old}))
    proc = _run_bundle(tmp_path, path)
    assert proc.returncode == 0 and proc.stdout.startswith("audited: compliant"), proc


def test_an_audit_that_cannot_run_fails_the_service_and_says_so_in_its_own_textfile(host, tmp_path):
    h = host("0.5.9")
    _s, path = _spec(h, tmp_path, fingerprint_components=["not", "a", "mapping"])
    proc = _run_bundle(tmp_path, path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr, proc
    beat = _samples(tmp_path / "tf" / "sglang_remediation_audit_timer.prom")
    assert beat['sglang_audit_timer_outcome{outcome="failed"}'] == 1
    assert beat['sglang_audit_timer_outcome{outcome="audited"}'] == 0


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    for name in ("BUNDLE_DIR", "UNIT_DIR", "CONFIG_DIR"):
        directory = tmp_path / name.lower()
        directory.mkdir()
        monkeypatch.setattr(HA, name, str(directory))
    return tmp_path


def test_install_writes_each_file_once_and_starts_only_the_timer(host, dirs):
    h = host("0.5.9")
    spec, _path = _spec(h, dirs)
    calls = []
    enabled = {"on": False}

    def run(argv):
        calls.append(argv[1:])
        if argv[1] in ("is-enabled", "is-active"):
            return (0, "enabled", "") if enabled["on"] else (1, "disabled", "")
        if argv[1] in ("restart", "start"):
            enabled["on"] = True
        return 0, "", ""
    timer = {"state": "present", "spec": spec}
    assert HA.install(timer, check_mode=True, run_command=run)["changed"] is True
    assert not list((dirs / "unit_dir").iterdir()) and ["daemon-reload"] not in calls
    out = HA.install(timer, check_mode=False, run_command=run)
    assert out["changed"] is True and any("is missing" in c for c in out["changes"])
    units = sorted(p.name for p in (dirs / "unit_dir").iterdir())
    assert units == ["sglang-audit.service", "sglang-audit.timer"]
    assert oct((dirs / "config_dir" / "sglang.audit.json").stat().st_mode & 0o777) == "0o600"
    assert (dirs / "bundle_dir" / "sglang-audit.pyz").read_bytes() == HA.bundle()
    assert ["daemon-reload"] in calls and ["enable", "sglang-audit.timer"] in calls
    assert ["restart", "sglang-audit.timer"] in calls
    # Never the server, nor the audit service itself: the timer starts that.
    assert not any(c[-1] in ("sglang", "sglang.service", "sglang-audit.service") for c in calls if c[0] != "is-active")
    service = (dirs / "unit_dir" / "sglang-audit.service").read_text()
    assert "ReadWritePaths=%s" % (dirs / "tf") in service and "CapabilityBoundingSet=CAP_DAC_READ_SEARCH CAP_SYS_PTRACE" \
        in service and "NoNewPrivileges=yes" in service and "IPAddressDeny=any" in service
    assert "OnCalendar=*-*-* *:*:00/5" in (dirs / "unit_dir" / "sglang-audit.timer").read_text()
    calls.clear()
    assert HA.install(timer, check_mode=False, run_command=run) == {"changed": False, "changes": []}
    assert all(c[0] in ("is-enabled", "is-active") for c in calls)
    # Another interval: the timer restarts on its new schedule; the bundle stays.
    spec2 = dict(spec, interval=900, jitter=120)
    out = HA.install({"state": "present", "spec": spec2}, check_mode=False, run_command=run)
    assert out["changes"] == ["%s differs" % (dirs / "config_dir" / "sglang.audit.json"),
                              "%s differs" % (dirs / "unit_dir" / "sglang-audit.service"),
                              "%s differs" % (dirs / "unit_dir" / "sglang-audit.timer")]
    # Removed: the timer stopped, every file and the timer's textfile gone.
    (dirs / "tf" / "sglang_remediation_audit_timer.prom").write_text("x 1\n")
    out = HA.install({"state": "absent", "spec": spec2}, check_mode=False, run_command=run)
    assert out["changed"] is True and ["disable", "--now", "sglang-audit.timer"] in calls
    assert not list((dirs / "unit_dir").iterdir()) and not (dirs / "tf" / "sglang_remediation_audit_timer.prom").exists()
    assert HA.install({"state": "absent", "spec": spec2}, check_mode=False, run_command=run)["changed"] is False


def test_the_import_scan_finds_what_the_parser_finds_in_every_plugin_file():
    """The bundle's closure comes from a line scan (cheap enough for every probe); it must see every import a
    parse sees, in every form the collection writes them (grouped, aliased, inside functions)."""
    import ast

    def parsed(source):
        found = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == HA.PACKAGE:
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(HA.PACKAGE + "."):
                found.add(node.module[len(HA.PACKAGE) + 1:].split(".")[0])
        return found
    files = sorted(MODULE_UTILS_DIR.parent.glob("*/*.py"))
    assert len(files) > 40
    for path in files:
        source = path.read_text()
        assert set(HA._imports(source)) == parsed(source), path


def test_the_running_process_is_compared_with_what_the_unit_starts(host, tmp_path):
    """The running server's command line, its environment (the environment file's variables) and its start
    after every file it depends on: a process started otherwise is a finding of the timer's own."""
    h = host("0.5.9")
    clock_past(max(p.stat().st_ctime for p in (h.unit, h.env, h.draft)))  # a start after the files is after them
    argv = ["sleep", "300"]
    server = subprocess.Popen(argv, env={"HF_TOKEN": "secret", "PATH": os.environ["PATH"]})
    try:
        seen = wait_running(server, argv)
        _s, path = _spec(h, tmp_path, running={"argv": argv, "env_file": str(h.env), "paths": [str(h.draft)]})
        proc = _run_bundle(tmp_path, path, server.pid)
        assert proc.returncode == 0 and "audited: compliant" in proc.stdout, proc
        _s, path = _spec(h, tmp_path, running={"argv": argv + ["--speculative-num-steps", "3"], "env_file": str(h.env),
                                               "paths": [str(h.draft)]})
        proc = _run_bundle(tmp_path, path, server.pid)
        assert "not compliant: the running server is not what the unit starts: its command line differs" in proc.stdout
        s = _samples(tmp_path / "tf" / "sglang_remediation.prom")
        assert s['sglang_remediation_failure{class="running_server"}'] == 1
        # A file it depends on changed after it started: it runs what it read before.
        clock_past(seen)
        h.draft.write_text(h.draft.read_text())
        _s, path = _spec(h, tmp_path, running={"argv": argv, "env_file": str(h.env), "paths": [str(h.draft)]})
        proc = _run_bundle(tmp_path, path, server.pid)
        assert "it started before %s changed" % h.draft in proc.stdout, proc
        # The environment file names a value the process does not run with.
        h.env.write_text("HF_TOKEN=another\n")
        _s, path = _spec(h, tmp_path, running={"argv": argv, "env_file": str(h.env), "paths": []})
        proc = _run_bundle(tmp_path, path, server.pid)
        assert "its environment differs in HF_TOKEN" in proc.stdout and "another" not in proc.stdout, proc
    finally:
        server.kill()
        server.wait()


def test_no_secret_option_of_the_probe_reaches_the_spec(host):
    """The general rule, not the two options of today: every option of sglang_probe that is no_log (at any depth)
    is left out of the timer's spec, whatever its value."""
    from conftest import MODULES
    source = (MODULES / "sglang_probe.py").read_text()
    secret = set(re.findall(r"(\w+)=dict\([^()]*no_log=True", source))
    assert {"secret_sha256", "api_key"} <= secret, secret
    h = host("0.5.9")
    args = h.args(live={"url": "http://127.0.0.1:30000", "expected": {}})
    marks = {}
    for name in secret:
        marks[name] = "SECRET-%s" % name
        (args["live"] if name in ("api_key",) else args)[name] = marks[name]
    text = json.dumps(HA.spec_of(args, {"interval": 900, "jitter": 120}))
    assert not [name for name, mark in marks.items() if mark in text], text
