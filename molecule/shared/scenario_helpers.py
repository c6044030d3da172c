"""Helpers for Molecule verifiers that drive ansible-playbook runs themselves.

The check, upgrade, bad-input and interrupted scenarios prove things about whole
runs (rc, the recap's changed count, whether the host moved), which a single
Molecule action cannot express. Their testinfra files call ``run_playbook`` with
the scenario's own inventory and Ansible configuration (Molecule passes both to
the verifier through the environment) and compare ``snapshot`` before and after.

The counts come from ``callback_plugins/run_stats.py``, which writes the recap's
numbers per host as JSON beside the run's usual output: the stdout stays what an
operator sees, for the messages and diffs the tests look for.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

PROJECT = Path(__file__).resolve().parents[2]
CONVERGE = PROJECT / "molecule" / "default" / "converge.yml"
STARTS_LOG = "/var/lib/sglang/starts.log"
SITE = "/opt/sglang/venv/lib/python3*/site-packages"
DEEPSEEK_REL = "sglang/srt/models/deepseek_v2.py"
# The draft as it arrived from training (only ever read), and the view of it the server reads.
DRAFT_CONFIG = "/models/DeepSeek-V3-EAGLE3/config.json"
DRAFT_VIEW_CONFIG = "/etc/sglang/sglang.draft/config.json"
UNIT = "/etc/systemd/system/sglang.service"

# Everything the role may write, plus what the test bed placed. Listed with
# type, mode, owner, size and mtime, and hashed: a rewrite with equal bytes
# still shows as a change.
WATCHED = ("/opt", "/etc/systemd/system", "/etc/sglang", "/var/lib/sglang-remediation",
           "/var/lib/sglang", "/var/cache/sglang", "/models", "/usr/local/lib/sglang-test-double")

CALLBACK_PLUGINS = Path(__file__).resolve().parent / "callback_plugins"


@dataclass
class Run:
    """One ansible-playbook run as the verifier saw it: rc, stdout and stderr, and
    the recap's counts per host (empty when the run ended before its recap)."""

    rc: int
    output: str
    recap: Dict[str, Dict[str, int]]

    def changed(self) -> int:
        return sum(h["changed"] for h in self.recap.values())

    def failed(self) -> int:
        return sum(h["failed"] for h in self.recap.values())

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def stats_env(stats_file: Path, env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` with what makes run_stats write a run's counts to ``stats_file``.

    The callback directory goes before any that ``env`` already names; the run's
    ansible.cfg, its stdout callback and callbacks_enabled stay as they are.
    """
    paths = [str(CALLBACK_PLUGINS)] + [p for p in env.get("ANSIBLE_CALLBACK_PLUGINS", "").split(os.pathsep) if p]
    return dict(env, ANSIBLE_CALLBACK_PLUGINS=os.pathsep.join(paths), SGLANG_TEST_STATS_FILE=str(stats_file))


def read_stats(stats_file: Path) -> Dict[str, Dict[str, int]]:
    """The counts run_stats wrote; none for a run that never reached its end (killed, timed out)."""
    try:
        return json.loads(Path(stats_file).read_text())["hosts"]
    except FileNotFoundError:
        return {}


def run_ansible(argv: Sequence[str], env: Dict[str, str], cwd: Path = PROJECT, timeout: int = 1500) -> Run:
    """Run one ansible-playbook command line to its end; never raises on rc != 0.

    A run still going after ``timeout`` seconds is killed and comes back with rc -9 and
    what it printed so far, so that the failing assertion shows where it hung.
    """
    with tempfile.TemporaryDirectory(prefix="run-stats-") as tmp:
        stats_file = Path(tmp) / "stats.json"
        try:
            proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=stats_env(stats_file, env), cwd=str(cwd), timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else (exc.output or "")
            return Run(-9, out + "\n[killed after %ss]" % timeout, read_stats(stats_file))
        return Run(proc.returncode, proc.stdout, read_stats(stats_file))


def inventory() -> str:
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not ephemeral:
        raise RuntimeError("MOLECULE_EPHEMERAL_DIRECTORY is not set: run this through molecule verify")
    return os.path.join(ephemeral, "inventory")


def run_playbook(playbook: Path = CONVERGE, extra_vars: Optional[Dict[str, Any]] = None,
                 args: Sequence[str] = (), timeout: int = 1500, env: Optional[Dict[str, str]] = None) -> Run:
    """Run a playbook against the scenario's inventory; never raises on rc != 0.

    Extra vars travel as a JSON file so that types survive exactly: ``["2"]`` stays
    a list of strings and ``"0.5.9"`` a string. ``env`` adds to the environment
    (e.g. the report callback and its directory).
    """
    cmd: List[str] = ["ansible-playbook", "-i", inventory(), str(playbook), *args]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PY_COLORS="0", **(env or {}))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(extra_vars or {}, fh)
        vars_file = fh.name
    try:
        return run_ansible([*cmd, "-e", "@" + vars_file], env, timeout=timeout)
    finally:
        os.unlink(vars_file)


def assert_rerun_changes_nothing(host, extra_vars: Optional[Dict[str, Any]], starts_so_far: int) -> Run:
    """Converge again on ``extra_vars``: rc 0, changed 0 for every host, the host exactly as
    it was (snapshot) and no new start of the server."""
    before = snapshot(host)
    run = run_playbook(extra_vars=extra_vars)
    assert run.rc == 0 and run.changed() == 0, run.tail(120)
    diff = snapshot_diff(before, snapshot(host))
    assert diff == [], diff
    assert starts(host) == starts_so_far
    return run


SNAPSHOT_SCRIPT = (Path(__file__).resolve().parent / "snapshot_host.py").read_text()


def snapshot(host) -> Dict[str, str]:
    """What a run could have changed on the host, as comparable text, from one remote command
    (snapshot_host.py): the watched paths listed and hashed, the unit's state, the accounts."""
    return json.loads(host.check_output("python3 -c %s %s" % (_quote(SNAPSHOT_SCRIPT), " ".join(WATCHED))))


def snapshot_diff(before: Dict[str, str], after: Dict[str, str]) -> List[str]:
    """Lines that differ, prefixed - (before only) and + (after only)."""
    out: List[str] = []
    for key in before:
        old, new = set(before[key].splitlines()), set(after[key].splitlines())
        out += ["%s - %s" % (key, line) for line in sorted(old - new)]
        out += ["%s + %s" % (key, line) for line in sorted(new - old)]
    return out


def starts(host) -> int:
    """Healthy starts of the test double so far (one line each)."""
    res = host.run("cat %s 2>/dev/null | wc -l" % STARTS_LOG)
    return int(res.stdout.strip() or 0)


def deepseek_path(host) -> str:
    return host.check_output("ls -d %s/%s" % (SITE, DEEPSEEK_REL)).strip()


def record_sha256(host, rel: str = DEEPSEEK_REL) -> str:
    """The hex sha256 pip recorded for ``rel`` in the installed release's RECORD."""
    script = ("import base64,glob,sys;"
              "rec=glob.glob('%s/sglang-*.dist-info/RECORD');"
              "assert len(rec)==1,rec;"
              "[print(base64.urlsafe_b64decode(h[7:]+'='*(-len(h[7:])%%4)).hex()) "
              "for p,h,_ in (l.rsplit(',',2) for l in open(rec[0]) if l.count(',')>=2) if p==sys.argv[1]]"
              % SITE)
    return host.check_output("python3 -c %s %s" % (_quote(script), _quote(rel))).strip()


def sha256(host, path: str) -> str:
    return host.check_output("sha256sum %s" % _quote(path)).split()[0]


def draft_ids(host) -> Any:
    """The ids the server reads: its draft view's."""
    cfg = json.loads(host.file(DRAFT_VIEW_CONFIG).content_string)
    return cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]


def server_info(host) -> Dict[str, Any]:
    script = ("import urllib.request;"
              "print(urllib.request.urlopen('http://127.0.0.1:30000/get_server_info', timeout=30).read().decode())")
    return json.loads(host.check_output("python3 -c %s" % _quote(script)))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5) -> Any:
    """Poll ``predicate`` every ``interval`` seconds and return its first truthy result; an
    OSError or ValueError counts as not yet (a server not up, or answering 503 while it
    starts). After ``timeout`` seconds, fail naming ``what`` and the last value or error seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            result = predicate()
        except (OSError, ValueError) as exc:
            result, last = None, exc
        else:
            last = result
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError("%s: not within %ss; last seen: %r" % (what, timeout, last))
        time.sleep(interval)


def awx_slices(hosts: Sequence[str], count: int) -> List[List[str]]:
    """AWX's job slicing (awx/main/models/inventory.py, get_sliced_hosts; JobTemplate.get_effective_slice_ct):
    the inventory's hosts by name, slice n (from 1) of ``count`` holds hosts[n-1::count], and there are no more
    slices than hosts."""
    ordered = sorted(hosts)
    return [ordered[n - 1::count] for n in range(1, min(count, len(ordered)) + 1)]
