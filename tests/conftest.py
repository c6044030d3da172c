"""Shared fixtures and helpers: real SGLang release files in throwaway venvs, rendered
templates, and the one harness that runs a module as Ansible runs it (run_module)."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import pytest

REPO = Path(__file__).resolve().parents[1]
# The test bed's helpers (testbed/): this checkout as a collection, the patch
# templates rendered, real SGLang releases as throwaway venvs. The release scripts
# use them too, and import nothing of tests/.
sys.path.insert(0, str(REPO / "testbed"))
import checkout  # noqa: E402
import parser_venv  # noqa: E402
import sglang_wheels  # noqa: E402
from zygote import Zygote  # noqa: E402

ROLE = REPO / "roles" / "sglang"
MODULES = REPO / "plugins" / "modules"
MODULE_UTILS_DIR = REPO / "plugins" / "module_utils"
MODULE_UTILS = MODULE_UTILS_DIR / "_eagle3.py"
LIBRARY = MODULES / "sglang_eagle3.py"
COLLECTION = "fleetops.sglang"
# The checkout is the collection fleetops.sglang; modules import their module_utils by
# the collection's name, from this collections path.
COLLECTIONS_PATH = checkout.importable()

# The test bed's mark (plugins/module_utils/_testbed.py) under a root of the session's own: this
# machine is no test-bed container, and the double (SGLANG_TEST_DOUBLE_MARK_ROOT) and the modules
# run by run_module (the launcher sets _testbed.ROOT from the same variable) look there. A test of
# an unmarked host passes another root (unmarked_root).
import testbed  # noqa: E402
TESTBED_MARK = testbed.mark_rule()


def marked_root(root: Path) -> Path:
    """A directory that is a marked test-bed container's root, as the rule reads it."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / ".dockerenv").write_text("")
    (root / TESTBED_MARK.MARK_PATH.lstrip("/")).write_text(TESTBED_MARK.MARK_TEXT)
    return root


MARK_ROOT = marked_root(Path(tempfile.mkdtemp(prefix="sglang-test-mark-")))
atexit.register(shutil.rmtree, str(MARK_ROOT), True)
os.environ["SGLANG_TEST_DOUBLE_MARK_ROOT"] = str(MARK_ROOT)

# Run a module file as __main__ the way AnsiballZ does on a host: its
# ansible_collections.fleetops.sglang.plugins.module_utils imports resolve from
# the collections path given as argv[1].
LAUNCHER = """
import os, runpy, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.fleetops.sglang.plugins.module_utils import _testbed
_testbed.ROOT = os.environ.get("SGLANG_TEST_DOUBLE_MARK_ROOT") or _testbed.ROOT
module = sys.argv[2]
sys.argv = [module, sys.argv[3]]
runpy.run_path(module, run_name="__main__")
"""
DRAFT_FIXTURE = REPO / "files" / "models" / "deepseek-v3-eagle3" / "config.json"
USER_IDS = [-1, 2, 30]


def fake_systemctl(root: Path, active: bool) -> str:
    """A PATH whose systemctl answers is-active with 0 (active) or 3 (inactive), and ``show -p MainPID
    --value`` with $SGLANG_TEST_MAINPID (0 when unset: no main process)."""
    bin_dir = root / ("bin-active" if active else "bin-inactive")
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "systemctl"
    if not stub.exists():
        stub.write_text('#!/bin/sh\nif [ "$1" = show ]; then echo "${SGLANG_TEST_MAINPID:-0}"; exit 0; fi\n'
                        "exit %d\n" % (0 if active else 3))
        stub.chmod(0o755)
    return "%s:%s" % (bin_dir, os.environ.get("PATH", ""))


def run_module(module: Union[str, Path], tmp: Path, args: Dict[str, Any], active: bool = True,
               check_mode: bool = False, diff: bool = False, timeout: int = 600,
               env: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, Any]]:
    """Run a module file as Ansible runs it on a host; return (exit status, the JSON it printed).

    A separate process reads its arguments from a file (AnsiballZ's ANSIBLE_MODULE_ARGS) and
    imports its module_utils by the collection's name from COLLECTIONS_PATH, so exit_json and
    fail_json behave as on a host. ``systemctl`` on its PATH is a stub whose is-active answers
    ``active``: no module test reaches this machine's services. ``check_mode`` and ``diff``
    set _ansible_check_mode and _ansible_diff, unless ``args`` sets them itself. ``env`` adds to
    its environment (SGLANG_TEST_DOUBLE_MARK_ROOT: the root the test bed's mark is read under).
    """
    module = Path(module)
    payload = dict(args)
    if check_mode:
        payload.setdefault("_ansible_check_mode", True)
    if diff:
        payload.setdefault("_ansible_diff", True)
    args_file = tmp / ("args-%s.json" % module.stem)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": payload}))
    env = dict(os.environ, **(env or {}), PATH=fake_systemctl(tmp, active))
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, str(COLLECTIONS_PATH), str(module), str(args_file)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("module printed no JSON:\n%s\n%s" % (proc.stdout, proc.stderr))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from double_harness import PRISTINE_059_SHA256, WHEEL_CACHE, Double  # noqa: E402


# The engine, one module per concern, imported by the collection's name as a
# module on a host imports it.
from ansible_collections.fleetops.sglang.plugins.module_utils import _distribution as DIST  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _testbed as _COLLECTION_MARK  # noqa: E402
# In-process callers of the engine (the live reading's pure tests) look under the session's marked root too.
_COLLECTION_MARK.ROOT = str(MARK_ROOT)
from ansible_collections.fleetops.sglang.plugins.module_utils import _eagle3 as E  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _fileio as FILEIO  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _hunks as HUNKS  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _memo as MEMO  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _patches as PATCHES  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _fingerprint as RUNSTATE  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _families as SHAPES  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import _verify as VERIFY  # noqa: E402


@pytest.fixture(scope="session")
def engine():
    return E


@pytest.fixture(scope="session")
def patches() -> Dict[str, str]:
    """The hunks the engine ships, as a caller that passes them explicitly would."""
    return dict(PATCHES.PATCHES)


@pytest.fixture(scope="session")
def release_tree(tmp_path_factory) -> Callable[[str], Path]:
    """One pristine extracted venv per release per session (copied for each test)."""
    cache: Dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in cache:
            cache[version] = sglang_wheels.make_venv(version, tmp_path_factory.mktemp("pristine-" + version))
        return cache[version]

    return get


@pytest.fixture
def make_venv(release_tree, tmp_path) -> Callable[[str], Path]:
    """A private, writable copy of a release's venv for one test."""

    def make(version: str) -> Path:
        dest = tmp_path / ("venv-" + version)
        shutil.copytree(release_tree(version), dest)
        return dest

    return make


@pytest.fixture(scope="session")
def promtool() -> Callable[..., subprocess.CompletedProcess]:
    """Debian's promtool; extracted by testbed/testbed.py when missing, so these tests never skip."""
    import testbed  # noqa: E402 (the test bed's own helper, not a test dependency)

    path = testbed.ensure_promtool()

    def run(*args: str, stdin: str = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
        return subprocess.run([str(path), *args], input=stdin, capture_output=True, text=True,
                              timeout=120, cwd=str(cwd))

    return run


def sha(path: Union[str, Path]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Host:
    """One host's files, laid out as the role leaves them after a healthy start: a venv
    from a real wheel (patched unless ``patch`` is false), a draft config, a unit, an
    environment file and the fingerprint sglang_fingerprint records. ``probe`` runs
    sglang_probe on it."""

    def __init__(self, tmp: Path, venv: Path, version: str, patches, patch: bool = True):
        self.tmp, self.venv, self.version, self.patches = tmp, venv, version, patches
        self.backup = tmp / "backup"
        fix = E.run(E.Request(venv=str(venv), layer_ids=USER_IDS, patches=patches,
                              state="present" if patch else "audit", backup_dir=str(self.backup)))
        assert not fix["failed"], fix["msg"]
        self.fix = fix
        self.draft = tmp / "draft" / "config.json"
        self.draft.parent.mkdir()
        config = json.loads(DRAFT_FIXTURE.read_text())
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = fix["draft_layer_ids"]
        self.draft.write_text(json.dumps(config, indent=2) + "\n")
        self.unit = tmp / "sglang.service"
        self.unit.write_text("[Service]\nExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server\n")
        self.env = tmp / "sglang.env"
        self.env.write_text("HF_TOKEN=secret\n")
        self.env.chmod(0o600)
        self.state_file = tmp / "state" / "running.json"
        self.components = {
            "draft_config": str(self.draft),
            "unit": str(self.unit),
            "environment": str(self.env),
            "command": "value:/opt/sglang/venv/bin/python -m sglang.launch_server",
        }
        # What the role records after the gates, with the sglang component the *present*
        # result carries; the probe takes it from its audit.
        recorded = dict(self.components, sglang="value:" + fix["fingerprint"])
        assert RUNSTATE.record(str(self.state_file), recorded)  # as sglang_gate's record writes it
        fake_systemctl(tmp, True)  # the module runs' PATH, made before any snapshot of the tree

    def args(self, **over):
        args = dict(
            venv=str(self.venv), expected_version=self.version, layer_ids=USER_IDS, patches=self.patches,
            pipeline_parallel_size=1, backup_dir=str(self.backup), draft_config=str(self.draft),
            fingerprint_file=str(self.state_file), fingerprint_components=dict(self.components),
            service="sglang", service_manage=True,
        )
        if "files" not in over:
            args["files"] = {"unit": {"path": str(self.unit), "sha256": sha(self.unit)},
                             "environment": {"path": str(self.env), "sha256": sha(self.env)}}
        args.update(over)
        return args

    def probe(self, active=True, check_mode=False, **over):
        rc, res = run_module(MODULES / "sglang_probe.py", self.tmp, self.args(**over), active=active,
                             check_mode=check_mode)
        assert rc == 0, res
        assert res["changed"] is False
        return res


@pytest.fixture
def host(make_venv, patches, tmp_path) -> Callable[..., Host]:
    """host(version, patch=True): a Host of that release in this test's tmp_path."""
    def make(version: str, patch: bool = True) -> Host:
        return Host(tmp_path, make_venv(version), version, patches, patch=patch)
    return make


def site_file(venv: Path, rel: str) -> Path:
    return next(venv.glob("lib/python3*/site-packages")) / rel


# The GPU-less test double (tests/double_harness.py) and the real files it judges.


# Where scripts/wheelhouse puts the wheels the scenarios install (scripts/test fills it before the
# unit tests run).
WHEELHOUSE = REPO / ".cache" / "wheelhouse"


def wheel_059() -> Path:
    """SGLang 0.5.9's wheel: the wheelhouse's, else the download cache's, else downloaded into that cache.

    A download that fails fails the test (no skip: a CI run must not lose these tests quietly),
    saying what to fetch and how.
    """
    name = "sglang-0.5.9-py3-none-any.whl"
    for wheel in (WHEELHOUSE / name, WHEEL_CACHE / name):
        if wheel.is_file():
            return wheel
    wheel = WHEEL_CACHE / name
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "sglang==0.5.9", "-d", str(WHEEL_CACHE)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        error = "" if proc.returncode == 0 and wheel.is_file() else (
            proc.stderr[-500:] or "exit status %d, no %s" % (proc.returncode, wheel))
    except (OSError, subprocess.TimeoutExpired) as exc:
        error = str(exc)
    if error:
        pytest.fail("cannot fetch the sglang 0.5.9 wheel (%s), and neither %s nor %s holds it: fetch it where "
                    "the package index can be reached with\n  %s\n(or: scripts/wheelhouse %s 0.5.9), then rerun. "
                    "pip said:\n%s" % (name, WHEELHOUSE, WHEEL_CACHE,
                                       " ".join(shlex.quote(c) for c in cmd), WHEELHOUSE, error), pytrace=False)
    return wheel


@pytest.fixture(scope="session")
def real_059() -> Dict[str, str]:
    """Pristine SGLang 0.5.9 files from the released wheel (wheelhouse, cache, or downloaded once)."""
    wheel = wheel_059()
    with zipfile.ZipFile(wheel) as zf:
        files = {
            "deepseek_v2": zf.read("sglang/srt/models/deepseek_v2.py").decode(),
            "cuda_graph_runner": zf.read("sglang/srt/model_executor/cuda_graph_runner.py").decode(),
            "metadata": zf.read("sglang-0.5.9.dist-info/METADATA").decode(),
        }
    assert hashlib.sha256(files["deepseek_v2"].encode()).hexdigest() == PRISTINE_059_SHA256
    return files


@pytest.fixture
def run_double(tmp_path: Path) -> Iterator[Any]:
    """run_double(flags, site, **env): a started test double, killed after the test if still running."""
    started: List[Double] = []

    def start(flags: List[str], site: Optional[Path], **env: str) -> Double:
        double = Double(tmp_path, flags, site, **env)
        started.append(double)
        return double

    yield start
    for double in started:
        if double.proc.poll() is None:
            double.proc.kill()
            double.proc.wait(timeout=10)


# SGLang's own parser, per release, in the parser venv (testbed/parser_venv): session fixtures
# here, so that test_parse_server_args and test_double_speculative_rule share one zygote per
# release (SGLang's import, 3 to 15 CPU seconds, paid once per run).
@pytest.fixture(scope="session")
def python311():
    python = parser_venv.find_python()
    if python is None:
        pytest.skip("no Python 3.11 for the parser venv: run scripts/bootstrap (installs Debian's python3.11) "
                    "or set SGLANG_PARSER_PYTHON")
    return python


@pytest.fixture(scope="session")
def release(python311):
    """version -> (python, env) with that release importable."""
    base = parser_venv.ensure_base(python311)
    cache = {}

    def get(version):
        if version not in cache:
            target = parser_venv.ensure_release(python311, version)
            cache[version] = (str(base / "bin" / "python"), parser_venv.env_for(target))
        return cache[version]

    return get


@pytest.fixture(scope="session")
def forked(release):
    """version -> a Zygote of that release's python with SGLang's ServerArgs imported."""
    zygotes = {}

    def get(version):
        if version not in zygotes:
            python, env = release(version)
            # What a parse imports: ServerArgs, and the model config its checks load.
            zygotes[version] = Zygote(python, ["sglang.srt.server_args", "sglang.srt.configs.model_config"], env)
        return zygotes[version]

    yield get
    for zygote in zygotes.values():
        zygote.close()


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """The DeepSeek-V3 target config and an EAGLE-3 draft config (no weights)."""
    root = tmp_path_factory.mktemp("models")
    for name in ("deepseek-v3", "deepseek-v3-eagle3"):
        shutil.copytree(REPO / "files" / "models" / name, root / name)
    return root / "deepseek-v3", root / "deepseek-v3-eagle3"


# --------------------------------------------------------------------------- waits on events, not sleeps


def clock_past(stamp: float, apart: float = 0.1) -> None:
    """Return once the clock is ``apart`` past ``stamp``: a process's start is known to a clock tick and
    /proc/uptime's hundredth, a file's ctime to the coarse clock's tick, so what comes after is ordered after."""
    deadline = time.monotonic() + 10
    while time.time() <= stamp + apart:
        assert time.monotonic() < deadline, "the clock did not pass %s" % stamp
        time.sleep(0.01)


def wait_running(proc: subprocess.Popen, argv) -> float:
    """Return once /proc shows ``proc`` running ``argv`` (what the rules and the audit read), with a time
    after its start."""
    deadline = time.monotonic() + 10
    while True:
        try:
            if Path("/proc/%d/cmdline" % proc.pid).read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]:
                return time.time()
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "%s never ran %s" % (proc.pid, argv)
        time.sleep(0.01)
