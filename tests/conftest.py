"""Shared fixtures: real SGLang release files in throwaway venvs, rendered templates."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict

import jinja2
import pytest

REPO = Path(__file__).resolve().parents[1]
ROLE = REPO / "roles" / "sglang"
TEMPLATES = ROLE / "templates" / "patches"
# The checkout is the collection fleetops.sglang (scripts/bootstrap links it into
# collections/); modules import their module_utils by the collection's name.
MODULES = REPO / "plugins" / "modules"
MODULE_UTILS_DIR = REPO / "plugins" / "module_utils"
MODULE_UTILS = MODULE_UTILS_DIR / "sglang_eagle3.py"
LIBRARY = MODULES / "sglang_eagle3.py"
COLLECTION = "fleetops.sglang"


def _collections_path() -> Path:
    """A collections path on which ansible_collections.fleetops.sglang is this checkout."""
    for base in (REPO / "collections", REPO / ".cache" / "test-collections"):
        link = base / "ansible_collections" / "fleetops" / "sglang"
        if link.resolve() == REPO:
            return base
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(REPO, target_is_directory=True)
    return base


COLLECTIONS_PATH = _collections_path()
if str(COLLECTIONS_PATH) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS_PATH))

# Run a module file as __main__ the way AnsiballZ does on a host: its
# ansible_collections.fleetops.sglang.plugins.module_utils imports resolve from
# the collections path given as argv[1].
LAUNCHER = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
module = sys.argv[2]
sys.argv = [module, sys.argv[3]]
runpy.run_path(module, run_name="__main__")
"""
MARKER = "sglang-remediation eagle3-embed v1"

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_wheels  # noqa: E402


# The engine, one module per concern, imported by the collection's name as a
# module on a host imports it.
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_distribution as DIST  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_eagle3 as E  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_fileio as FILEIO  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_hunks as HUNKS  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_memo as MEMO  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_shapes as SHAPES  # noqa: E402
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_verify as VERIFY  # noqa: E402


def render_templates(marker: str = MARKER) -> Dict[str, str]:
    """Render every patch template the way lookup('template') does (plain Jinja2, trim_blocks)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    return {p.name[: -len(".hunks.j2")]: env.from_string(p.read_text()).render(sglang_patch_marker=marker)
            for p in sorted(TEMPLATES.glob("*.hunks.j2"))}


@pytest.fixture(scope="session")
def engine():
    return E


@pytest.fixture(scope="session")
def patches() -> Dict[str, str]:
    return render_templates()


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
    sys.path.insert(0, str(REPO / "testbed"))
    import testbed  # noqa: E402 (the test bed's own helper, not a test dependency)

    path = testbed.ensure_promtool()

    def run(*args: str, stdin: str = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
        return subprocess.run([str(path), *args], input=stdin, capture_output=True, text=True,
                              timeout=120, cwd=str(cwd))

    return run
