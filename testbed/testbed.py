#!/usr/bin/env python3
"""Container test bed for the SGLang remediation project.

One entry point (``scripts/testbed``) that brings a bare Debian machine to the
point where Molecule and the demo fleet can run: a Docker engine that answers,
systemd base images for Debian 12 and 13 built from Debian packages (no
registry), enough inotify instances for many systemd containers, and a demo
fleet of systemd containers with an inventory that uses the docker connection.

Every step first observes, then decides, then acts; the decisions are pure
functions over an observed ``State`` so that tests can exercise them without
reinstalling anything.  What is already healthy is never rebuilt or restarted.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

# Packages baked into every base image.  python3-packaging is needed by
# Ansible's pip module on the host, python3-venv by ``python3 -m venv``,
# python3-apt by the apt module; without them the role fails on a bare host.
# openssh-server and sudo serve the SSH fleet (`fleet-up --connection ssh`): an
# unprivileged operator logs in and becomes root, as production fleets do.
IMAGE_PACKAGES: tuple[str, ...] = (
    "python3",
    "systemd",
    "systemd-sysv",
    "dbus",
    "procps",
    "iproute2",
    "python3-apt",
    "python3-packaging",
    "python3-venv",
    "openssh-server",
    "sudo",
)
SUITES: tuple[str, ...] = ("bookworm", "trixie")
IMAGE_REPO = "local/sglang-testbed"
# Bumped by hand when the build recipe changes in a way the package list does not show.
RECIPE_REVISION = "1"
RECIPE_LABEL = "io.sglang-remediation.recipe"
FLEET_LABEL = "io.sglang-remediation.fleet"
# The execution environment's base (scripts/build-ee, execution-environment.yml): the same
# debootstrap recipe, minbase Debian 13 with only what an EE needs and no systemd. python3 is
# 3.13 there; python3-venv serves ansible-builder's assemble script (python3 -m venv) and brings
# ensurepip with its pip wheel, from which pip is installed into /usr/local (build_ee_base).
# Not python3-pip: it pulls Debian's python3-wheel and python3-packaging into
# /usr/lib/python3/dist-packages, which pip cannot uninstall (no RECORD file), so the EE's pinned
# packaging could not replace them. openssh-client is the ssh connection; ca-certificates lets
# ansible-galaxy and the uri module verify TLS.
EE_BASE_SUITE = "trixie"
EE_BASE_IMAGE = f"local/sglang-ee-base:{EE_BASE_SUITE}"
EE_BASE_PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-venv",
    "openssh-client",
    "ca-certificates",
)
# Bumped by hand when the EE base's recipe changes in a way the package list does not show.
EE_BASE_REVISION = "2"
INOTIFY_PATH = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_WANTED = 1024
# Each systemd container holds about six inotify instances; the default 128
# stops the 23rd container.  Raise the limit before that point.
INOTIFY_PER_CONTAINER = 6
DOCKERD_LOG = Path("/var/log/sglang-testbed-dockerd.log")
# Debian's Prometheus packages: promtool for the tests of the metrics textfile and the alert
# rules; the Prometheus server (run on the controller) and prometheus-node-exporter
# (installed on the live scenario's host) for the alert chain end to end. Each .deb is
# downloaded once into the project's cache and only the files needed are extracted:
# installing `prometheus` here would also enable and start a Prometheus server on the test
# machine.
TOOLS_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "tools"
DEBS_CACHE = TOOLS_CACHE / "debs"
PROMTOOL_PACKAGE = "prometheus"
PROMTOOL_CACHE = TOOLS_CACHE / "promtool"
PROMETHEUS_PACKAGE = "prometheus"
PROMETHEUS_CACHE = TOOLS_CACHE / "prometheus"
# Debian builds the web UI as files that the server reads (--web.local-assets), not into
# the binary: without them the UI's pages answer 500. Those files link to the JavaScript,
# CSS and fonts of other packages (the package's Depends) under /usr/share; without them
# the pages render unstyled and their scripts do not run. All are extracted into one tree
# laid out as Debian installs them, where the links resolve.
PROMETHEUS_ROOT = TOOLS_CACHE / "prometheus-root"
PROMETHEUS_ASSETS_CACHE = PROMETHEUS_ROOT / "usr" / "share" / "prometheus" / "web"
PROMETHEUS_UI_PACKAGES = (
    "fonts-glyphicons-halflings", "libjs-bootstrap4", "libjs-d3", "libjs-eonasdan-bootstrap-datetimepicker",
    "libjs-jquery", "libjs-jquery-hotkeys", "libjs-moment", "libjs-moment-timezone", "libjs-mustache",
    "libjs-popper.js", "libjs-rickshaw",
)
# 212 MB of per-zone files that the UI never loads (it loads moment-timezone-with-data.min.js).
PROMETHEUS_UI_EXCLUDE = ("./usr/share/javascript/moment-timezone/data",)
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
ENGINE_WAIT_SECONDS = 60
# The SSH fleet (`fleet-up --connection ssh`): what production looks like, an
# unprivileged operator who logs in with a key and becomes root with sudo. The key
# pair and the become password are generated once and kept under .cache/ (never
# committed); per fleet, its known_hosts and ssh's control sockets.
SSH_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "testbed" / "ssh"
SSH_USER = "ops"
# Where scripts/wheelhouse puts the SGLang wheels the test hosts install from.
WHEELHOUSE = Path(__file__).resolve().parents[1] / ".cache" / "wheelhouse"
SSH_WAIT_SECONDS = 60

# The systemd-in-a-container flags measured on these machines: no --privileged
# (the bounding set lacks CAP_SYS_RESOURCE), only what systemd needs as PID 1.
SYSTEMD_RUN_FLAGS: tuple[str, ...] = (
    "--cap-add", "SYS_ADMIN",
    "--security-opt", "seccomp=unconfined",
    "--security-opt", "apparmor=unconfined",
    "--cgroupns=host",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run",
    "--tmpfs", "/run/lock",
    "--stop-signal", "SIGRTMIN+3",
)

# The test bed's mark (plugins/module_utils/_testbed.py, the one rule): every container the test
# bed creates gets it as a read-only file, so that testbed-prepare.yml, the test double and the
# gates know they are on a disposable container. No image carries it: a container of an image
# run by hand, or a real host, does not.
MARK_SOURCE = Path(__file__).resolve().parents[1] / ".cache" / "testbed" / "mark"
MARK_RULE = Path(__file__).resolve().parents[1] / "plugins" / "module_utils" / "_testbed.py"


def mark_rule():
    """plugins/module_utils/_testbed.py, loaded by path (it imports nothing from the collection)."""
    spec = importlib.util.spec_from_file_location("_sglang_testbed_mark", MARK_RULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mark_flags(source: Path = MARK_SOURCE) -> list[str]:
    """``docker run`` flags that mount the mark read-only at its path (written first, when it differs)."""
    rule = mark_rule()
    if not source.is_file() or source.read_text() != rule.MARK_TEXT:
        source.parent.mkdir(parents=True, exist_ok=True)
        tmp = source.with_name(source.name + ".%d.tmp" % os.getpid())
        tmp.write_text(rule.MARK_TEXT)
        tmp.chmod(0o644)
        tmp.replace(source)
    return ["-v", f"{source}:{rule.MARK_PATH}:ro"]


def container_flags() -> list[str]:
    """What every systemd container of the test bed is started with: the systemd flags and the mark."""
    return [*SYSTEMD_RUN_FLAGS, *mark_flags()]


Runner = Callable[..., subprocess.CompletedProcess]


def log(msg: str) -> None:
    """Progress goes to stderr so that stdout stays parseable."""
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str], check: bool = True, capture: bool = True,
        timeout: float | None = None, stdin=None, cwd: str | None = None,
        stdin_text: str | None = None) -> subprocess.CompletedProcess:
    """Run a command; on failure say which one and what it printed, then stop."""
    if stdin_text is not None:
        stdin = None
    res = subprocess.run(list(cmd), check=False, text=True, timeout=timeout, stdin=stdin, cwd=cwd,
                         input=stdin_text,
                         stdout=subprocess.PIPE if capture else None,
                         stderr=subprocess.PIPE if capture else None)
    if check and res.returncode != 0:
        detail = ((res.stderr or "") + (res.stdout or "")).strip()[-2000:]
        raise SystemExit(f"testbed: '{' '.join(cmd)}' failed (exit {res.returncode})"
                         + (f":\n{detail}" if detail else ""))
    return res


def recipe_hash(suite: str) -> str:
    """Identifies what an image was built from, so a changed recipe rebuilds."""
    text = "\n".join([RECIPE_REVISION, suite, *IMAGE_PACKAGES])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ee_base_recipe_hash() -> str:
    """The EE base's recipe label: another package list or revision rebuilds it."""
    text = "\n".join(["ee-base", EE_BASE_REVISION, EE_BASE_SUITE, *EE_BASE_PACKAGES])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def image_tag(suite: str) -> str:
    return f"{IMAGE_REPO}:{suite}"


# --------------------------------------------------------------------------- state


@dataclasses.dataclass
class State:
    """What was observed on the machine; the planners only read this."""

    docker_cli: bool
    dockerd_binary: bool
    debootstrap_binary: bool
    engine_answers: bool
    image_recipes: dict[str, str | None]   # suite -> recipe label of the image, None if absent
    inotify_instances: int | None


def observe(runner: Runner = run) -> State:
    """Read the machine's state without changing anything."""
    engine = False
    if shutil.which("docker"):
        engine = runner(["docker", "version", "--format", "{{.Server.Version}}"],
                        check=False, timeout=20).returncode == 0
    recipes: dict[str, str | None] = {}
    for suite in SUITES:
        recipes[suite] = None
        if engine:
            res = runner(["docker", "image", "inspect", "--format",
                          "{{ index .Config.Labels \"%s\" }}" % RECIPE_LABEL, image_tag(suite)],
                         check=False)
            if res.returncode == 0:
                recipes[suite] = res.stdout.strip()
    try:
        inotify = int(INOTIFY_PATH.read_text().strip())
    except (OSError, ValueError):
        inotify = None
    return State(
        docker_cli=shutil.which("docker") is not None,
        dockerd_binary=shutil.which("dockerd") is not None,
        debootstrap_binary=shutil.which("debootstrap") is not None,
        engine_answers=engine,
        image_recipes=recipes,
        inotify_instances=inotify,
    )


# --------------------------------------------------------------------------- planners


def plan_engine(state: State) -> list[str]:
    """Decide what the engine needs.  A running engine is never touched."""
    if state.engine_answers:
        return []
    actions: list[str] = []
    if not (state.dockerd_binary and state.docker_cli):
        actions.append("install-docker")
    actions.append("start-engine")
    return actions


def plan_images(state: State, suites: Sequence[str]) -> list[str]:
    """Suites whose image is missing or was built from another recipe."""
    return [s for s in suites if state.image_recipes.get(s) != recipe_hash(s)]


def plan_packages(state: State, engine_actions: Sequence[str], builds: Sequence[str]) -> list[str]:
    """Debian packages to install, only when a step that needs them will run."""
    pkgs: list[str] = []
    if "install-docker" in engine_actions:
        pkgs.append("docker.io")
    if builds and not state.debootstrap_binary:
        pkgs.append("debootstrap")
    return pkgs


def plan_inotify(current: int | None, containers: int) -> int | None:
    """New inotify limit, or None when the current one is enough."""
    if current is None:
        return None
    if current >= max(INOTIFY_WANTED, containers * INOTIFY_PER_CONTAINER + 64):
        return None
    return max(INOTIFY_WANTED, containers * INOTIFY_PER_CONTAINER + 64)


# --------------------------------------------------------------------------- actions


def apt_install(packages: Sequence[str], runner: Runner = run) -> None:
    log(f"installing Debian packages: {' '.join(packages)}")
    env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
    # The package lists may be absent on a fresh machine: refresh once.
    runner([*env_cmd, "apt-get", "update", "-qq"], capture=False)
    runner([*env_cmd, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
           capture=False)


def start_engine(runner: Runner = run, wait: float = ENGINE_WAIT_SECONDS) -> None:
    """Start dockerd in the background (no init system on these machines) and wait."""
    if shutil.which("systemctl") and Path("/run/systemd/system").is_dir():
        log("starting the Docker engine with systemctl")
        runner(["systemctl", "start", "docker"], capture=False)
    else:
        log(f"starting dockerd in the background (log: {DOCKERD_LOG})")
        DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
        with open(DOCKERD_LOG, "ab") as out:
            subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if runner(["docker", "version"], check=False).returncode == 0:
            log("Docker engine answers")
            return
        time.sleep(1)
    raise SystemExit(f"testbed: the Docker engine did not answer within {wait:.0f}s; see {DOCKERD_LOG}")


def set_inotify(value: int) -> None:
    log(f"raising fs.inotify.max_user_instances to {value}")
    INOTIFY_PATH.write_text(f"{value}\n")


def slim_rootfs(root: Path, mask_consoles: bool = True) -> None:
    """Drop docs, locales and apt lists: halves the image, nothing the role needs."""
    for rel in ("usr/share/doc", "usr/share/man", "usr/share/info", "var/cache/apt/archives",
                "var/lib/apt/lists"):
        target = root / rel
        if target.is_dir():
            shutil.rmtree(target)
            target.mkdir(parents=True)
    locales = root / "usr/share/locale"
    if locales.is_dir():
        for entry in locales.iterdir():
            if entry.is_dir() and not entry.name.startswith("en"):
                shutil.rmtree(entry)
    if not mask_consoles:
        return
    # A container has no consoles to serve; masking these avoids a degraded system.
    for unit in ("getty@tty1.service", "console-getty.service", "systemd-firstboot.service"):
        link = root / "etc/systemd/system" / unit
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to("/dev/null")


def debootstrap_rootfs(suite: str, root: Path, packages: Sequence[str], runner: Runner = run) -> None:
    """debootstrap a minbase Debian with these packages into root.

    No mirror argument: debootstrap's default serves, and no host name is
    written into this repository.
    """
    log(f"debootstrap {suite} (about a minute)")
    # Captured: its hundreds of lines are shown only when it fails.
    runner(["debootstrap", "--variant=minbase", "--include=" + ",".join(packages), suite, str(root)])


def import_rootfs(root: Path, tag: str, changes: Sequence[str], runner: Runner = run) -> None:
    """docker import the tree as one layer, with these Dockerfile changes (CMD, ENV, LABEL)."""
    log(f"importing {tag}")
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    change_args = [arg for change in changes for arg in ("-c", change)]
    runner(["docker", "import", *change_args, "-", tag], stdin=tar.stdout)
    tar.stdout.close()
    if tar.wait() != 0:
        raise SystemExit(f"testbed: tar of the rootfs for {tag} failed")


def build_image(suite: str, runner: Runner = run) -> None:
    """debootstrap a minimal Debian with systemd and import it as an image."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"testbed-{suite}-") as tmp:
        root = Path(tmp) / "rootfs"
        debootstrap_rootfs(suite, root, IMAGE_PACKAGES, runner)
        slim_rootfs(root)
        import_rootfs(root, image_tag(suite), ['CMD ["/lib/systemd/systemd"]',
                                               f"LABEL {RECIPE_LABEL}={recipe_hash(suite)}"], runner)
    log(f"built {image_tag(suite)} in {time.monotonic() - started:.0f}s")


def build_images(suites: Sequence[str], runner: Runner = run) -> None:
    """Build these suites' images side by side: a debootstrap is mostly one core's dpkg and the
    network's wait, so on a new machine two of them in parallel take the wall time of one."""
    if not suites:
        return
    with ThreadPoolExecutor(max_workers=len(suites), thread_name_prefix="testbed-build") as pool:
        # Every build runs to its end; the first failure, in the given order, is raised.
        for future in [pool.submit(build_image, suite, runner) for suite in suites]:
            future.result()


def ee_base_recipe(runner: Runner = run) -> str | None:
    """The recipe label of the EE base image, None when there is none."""
    res = runner(["docker", "image", "inspect", "--format",
                  "{{ index .Config.Labels \"%s\" }}" % RECIPE_LABEL, EE_BASE_IMAGE], check=False)
    return res.stdout.strip() if res.returncode == 0 else None


def build_ee_base(runner: Runner = run) -> None:
    """debootstrap the EE base (EE_BASE_PACKAGES, no systemd) and import it as EE_BASE_IMAGE."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="testbed-ee-base-") as tmp:
        root = Path(tmp) / "rootfs"
        debootstrap_rootfs(EE_BASE_SUITE, root, EE_BASE_PACKAGES, runner)
        slim_rootfs(root, mask_consoles=False)
        # Debian marks its Python EXTERNALLY-MANAGED (PEP 668): pip refuses to install into it.
        # An EE is a single-purpose image whose system Python *is* the environment that
        # ansible-builder fills with pip (into /usr/local/lib/python3.13/dist-packages, apart
        # from the Debian-owned /usr/lib/python3/dist-packages): the marker goes, so that pip in
        # the image and in images derived from it works without --break-system-packages.
        for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        # `python3 -m pip`: Debian disables ensurepip for the system Python, so pip installs
        # itself from the wheel Debian ships for ensurepip (python3-pip-whl), offline, into
        # /usr/local/lib/python3.13/dist-packages (with a RECORD: pip can upgrade it).
        wheel = next(root.glob("usr/share/python-wheels/pip-*.whl")).relative_to(root)
        runner(["chroot", str(root), "/usr/bin/python3", f"/{wheel}/pip", "install", "-q", "--no-index",
                "--no-cache-dir", "--disable-pip-version-check", "--root-user-action=ignore", f"/{wheel}"])
        import_rootfs(root, EE_BASE_IMAGE, [
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV LANG=C.UTF-8",
            'CMD ["/bin/bash"]',
            f"LABEL {RECIPE_LABEL}={ee_base_recipe_hash()}",
        ], runner)
    log(f"built {EE_BASE_IMAGE} in {time.monotonic() - started:.0f}s")


def ensure_ee_base(runner: Runner = run) -> bool:
    """The EE base image from the current recipe; built only when missing or stale. True if built."""
    if ee_base_recipe(runner) == ee_base_recipe_hash():
        log(f"{EE_BASE_IMAGE} up to date")
        return False
    if shutil.which("debootstrap") is None:
        apt_install(["debootstrap"], runner)
    build_ee_base(runner)
    return True


def ensure(suites: Sequence[str], containers: int = 0, runner: Runner = run) -> State:
    """Bring engine, images and limits to the wanted state; idempotent."""
    state = observe(runner)
    engine_actions = plan_engine(state)
    builds = plan_images(state, suites) if state.engine_answers else list(suites)
    pkgs = plan_packages(state, engine_actions, builds)
    if pkgs:
        apt_install(pkgs, runner)
    if "start-engine" in engine_actions:
        start_engine(runner)
        state = observe(runner)
        builds = plan_images(state, suites)
    new_limit = plan_inotify(state.inotify_instances, containers)
    if new_limit is not None:
        set_inotify(new_limit)
    build_images(builds, runner)
    if not (pkgs or engine_actions or builds or new_limit):
        log("engine, images and limits already in place")
    return state


def find_promtool() -> Path | None:
    """promtool on PATH (the package installed by hand), else the one extracted before."""
    found = shutil.which("promtool")
    if found:
        return Path(found)
    return PROMTOOL_CACHE if os.access(PROMTOOL_CACHE, os.X_OK) else None


@contextlib.contextmanager
def _tools_lock():
    """One download or extraction into the tools cache at a time: pytest and the live
    scenario may both ask for the same package at once."""
    TOOLS_CACHE.mkdir(parents=True, exist_ok=True)
    with open(TOOLS_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _cached_deb(package: str) -> Path | None:
    found = sorted(DEBS_CACHE.glob(package + "_*.deb"))
    return found[-1] if found else None


def ensure_deb(package: str, runner: Runner = run) -> Path:
    """Debian's .deb of ``package`` (this machine's release) in .cache/tools/debs, downloaded
    once; idempotent. Call it under _tools_lock when another process may download too."""
    found = _cached_deb(package)
    if found:
        return found
    log(f"downloading Debian's {package} package into {DEBS_CACHE}")
    DEBS_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="testbed-deb-") as tmp:
        # apt-get download writes as _apt when it can; a world-writable temp dir lets it.
        os.chmod(tmp, 0o777)
        if runner(["apt-get", "download", package], check=False, cwd=tmp).returncode != 0:
            runner(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-qq"], capture=False)
            runner(["apt-get", "download", package], cwd=tmp)
        debs = sorted(Path(tmp).glob(package + "_*.deb"))
        if not debs:
            raise SystemExit(f"testbed: apt-get download {package} left no .deb")
        # Copied under a temporary name, then renamed: a reader never sees half a .deb.
        partial = DEBS_CACHE / (debs[0].name + ".partial")
        shutil.copyfile(debs[0], partial)
        os.replace(partial, DEBS_CACHE / debs[0].name)
    return DEBS_CACHE / debs[0].name


def extract_from_deb(deb: Path, member: str, dest: Path, runner: Runner = run) -> Path:
    """One file or directory of ``deb`` (``member`` as the package lists it, e.g.
    ./usr/bin/promtool) at ``dest``, which must not exist yet."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".extract-", dir=dest.parent) as tmp:
        data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        runner(["tar", "-x", "-C", tmp, member], stdin=data.stdout)
        data.stdout.close()
        if data.wait() != 0:
            raise SystemExit(f"testbed: dpkg-deb could not read {deb.name}")
        # Same directory, so the rename is atomic: a reader finds the whole file or none.
        os.replace(Path(tmp) / member, dest)
    return dest


def extract_share_tree(debs: Sequence[Path], dest: Path, exclude: Sequence[str] = (),
                       runner: Runner = run) -> Path:
    """The /usr/share of each of ``debs`` (less docs, manuals and ``exclude``) merged into one
    tree at ``dest``/usr/share, as Debian would install them; ``dest`` must not exist. Refuses
    a tree with a link that resolves to nothing: a package is missing from ``debs``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".extract-", dir=dest.parent, ignore_cleanup_errors=True) as tmp:
        for deb in debs:
            data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
            skip = ["--exclude=" + path
                    for path in ("./usr/share/doc", "./usr/share/man", "./usr/share/lintian", *exclude)]
            runner(["tar", "-x", "-C", tmp, *skip, "./usr/share"], stdin=data.stdout)
            data.stdout.close()
            if data.wait() != 0:
                raise SystemExit(f"testbed: dpkg-deb could not read {deb.name}")
        dangling = sorted(str(p.relative_to(tmp)) for p in Path(tmp).rglob("*") if p.is_symlink() and not p.exists())
        if dangling:
            raise SystemExit(f"testbed: links to files no package of {[d.name for d in debs]} ships: {dangling}")
        # Same directory, so the rename is atomic: a reader finds the whole tree or none.
        os.replace(tmp, dest)
    return dest


def ensure_promtool(runner: Runner = run) -> Path:
    """Debian's promtool, extracted from the `prometheus` package once; idempotent."""
    found = find_promtool()
    if found:
        return found
    with _tools_lock():
        if not os.access(PROMTOOL_CACHE, os.X_OK):
            log(f"extracting promtool from Debian's {PROMTOOL_PACKAGE} package into {TOOLS_CACHE}")
            extract_from_deb(ensure_deb(PROMTOOL_PACKAGE, runner), "./usr/bin/promtool", PROMTOOL_CACHE, runner)
    PROMTOOL_CACHE.chmod(0o755)
    return PROMTOOL_CACHE


def ensure_prometheus(runner: Runner = run) -> tuple[Path, Path]:
    """Debian's Prometheus server and the web UI files it serves (pass the second as
    --web.local-assets), extracted from the `prometheus` package and the UI's libraries
    once; idempotent. Never installed: the package would start a server on this machine."""
    with _tools_lock():
        if not os.access(PROMETHEUS_CACHE, os.X_OK) or not PROMETHEUS_ASSETS_CACHE.is_dir():
            log(f"extracting prometheus from Debian's {PROMETHEUS_PACKAGE} package into {TOOLS_CACHE}")
            deb = ensure_deb(PROMETHEUS_PACKAGE, runner)
            if not PROMETHEUS_ASSETS_CACHE.is_dir():
                libraries = [ensure_deb(package, runner) for package in PROMETHEUS_UI_PACKAGES]
                extract_share_tree([deb, *libraries], PROMETHEUS_ROOT, PROMETHEUS_UI_EXCLUDE, runner)
            if not os.access(PROMETHEUS_CACHE, os.X_OK):
                extract_from_deb(deb, "./usr/bin/prometheus", PROMETHEUS_CACHE, runner)
    return PROMETHEUS_CACHE, PROMETHEUS_ASSETS_CACHE


def ensure_node_exporter_deb(runner: Runner = run) -> Path:
    """Debian's prometheus-node-exporter .deb, for a test host to install (dpkg -i: it
    depends only on adduser and libc6, both in the base images); idempotent."""
    with _tools_lock():
        return ensure_deb(NODE_EXPORTER_PACKAGE, runner)


# --------------------------------------------------------------------------- fleet


def fleet_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(1, count + 1)]


def running_fleet(prefix: str, runner: Runner = run) -> dict[str, str]:
    """Containers of this fleet, name -> status."""
    res = runner(["docker", "ps", "-a", "--filter", f"label={FLEET_LABEL}={prefix}",
                  "--format", "{{.Names}} {{.State}}"])
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        name, _, status = line.partition(" ")
        out[name] = status
    return out


def plan_fleet(wanted: Sequence[str], existing: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(to create, to start, to remove): healthy containers are left as they are."""
    create = [n for n in wanted if n not in existing]
    start = [n for n in wanted if existing.get(n) not in (None, "running")]
    remove = [n for n in existing if n not in wanted]
    return create, start, remove


def render_inventory(names: Sequence[str], group: str, extra_vars: dict[str, str]) -> str:
    """Ansible inventory (YAML) for the fleet over the docker connection."""
    lines = ["---", "# Generated by scripts/testbed fleet up; do not edit.", "all:", "  children:",
             f"    {group}:", "      hosts:"]
    for name in names:
        lines.append(f"        {name}:")
    lines.append("      vars:")
    lines.append("        ansible_connection: community.docker.docker")
    lines.append("        ansible_python_interpreter: /usr/bin/python3")
    # The docker connection is already root, and the image has no sudo.
    lines.append("        ansible_become: false")
    for key, value in sorted(extra_vars.items()):
        lines.append(f"        {key}: {value}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- ssh fleet


@dataclasses.dataclass
class SshHost:
    """One container of an SSH fleet as the inventory names it."""

    name: str
    port: int
    password_sudo: bool


def password_sudo_hosts(names: Sequence[str]) -> set[str]:
    """The hosts whose sudo asks for a password: the last one (at least one, never all but one of one)."""
    return {names[-1]} if names else set()


@contextlib.contextmanager
def cache_lock(cache: Path):
    """Scenarios set up side by side (bookworm and trixie) share the key: generate it once."""
    cache.mkdir(parents=True, exist_ok=True)
    os.chmod(cache, 0o700)
    with open(cache / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def ensure_operator_key(cache: Path = SSH_CACHE, runner: Runner = run) -> Path:
    """The operator's ed25519 key pair, generated once; returns the private key."""
    key = cache / "ops_ed25519"
    with cache_lock(cache):
        if not key.exists():
            runner(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sglang-testbed-ops", "-f", str(key)])
    return key


def ensure_become_password(cache: Path = SSH_CACHE) -> Path:
    """The sudo password of the password-sudo host(s), in a 0600 file nobody commits."""
    path = cache / "become-password"
    with cache_lock(cache):
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(18) + "\n")
    return path


def operator_script(pubkey: str, password_sudo: bool) -> str:
    """Shell run as root in a container: fresh host keys, the ops account, its key and sudo.

    Host keys are baked into the image, so every container would share them:
    each one gets its own. Rerunning it leaves the same result.
    """
    sudo_rule = "%s ALL=(ALL:ALL) ALL" % SSH_USER if password_sudo else "%s ALL=(ALL:ALL) NOPASSWD: ALL" % SSH_USER
    return "\n".join([
        "set -eu",
        "if [ ! -e /etc/ssh/.testbed-host-keys ]; then rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null;"
        " touch /etc/ssh/.testbed-host-keys; fi",
        "id -u %s >/dev/null 2>&1 || useradd --create-home --shell /bin/bash %s" % (SSH_USER, SSH_USER),
        "install -d -m 0700 -o %s -g %s /home/%s/.ssh" % (SSH_USER, SSH_USER, SSH_USER),
        "printf '%%s\\n' %s > /home/%s/.ssh/authorized_keys" % (shell_quote(pubkey), SSH_USER),
        "chown %s:%s /home/%s/.ssh/authorized_keys; chmod 0600 /home/%s/.ssh/authorized_keys"
        % (SSH_USER, SSH_USER, SSH_USER, SSH_USER),
        "printf '%%s\\n' %s > /etc/sudoers.d/90-testbed-ops.tmp" % shell_quote(sudo_rule),
        "chmod 0440 /etc/sudoers.d/90-testbed-ops.tmp",
        "visudo -cqf /etc/sudoers.d/90-testbed-ops.tmp",
        "mv /etc/sudoers.d/90-testbed-ops.tmp /etc/sudoers.d/90-testbed-ops",
        # Keys only, as production sshd is configured.
        "printf 'PasswordAuthentication no\\nKbdInteractiveAuthentication no\\nPermitRootLogin no\\n'"
        " > /etc/ssh/sshd_config.d/90-testbed.conf",
        "systemctl enable --quiet ssh.service",
        "systemctl restart ssh.service",
    ]) + "\n"


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def published_ssh_port(name: str, runner: Runner = run) -> int:
    """The 127.0.0.1 port docker published for the container's sshd (never its bridge address)."""
    res = runner(["docker", "port", name, "22/tcp"])
    for line in res.stdout.splitlines():
        addr, _, port = line.strip().rpartition(":")
        if addr == "127.0.0.1" and port.isdigit():
            return int(port)
    raise SystemExit(f"testbed: {name} publishes no 127.0.0.1 port for sshd (docker port said {res.stdout!r});"
                     " start it with -p 127.0.0.1::22")


def publishes_ssh(name: str, runner: Runner = run) -> bool:
    """Whether the container was started with sshd published (running or not)."""
    res = runner(["docker", "inspect", "--format", "{{json .HostConfig.PortBindings}}", name], check=False)
    return res.returncode == 0 and '"22/tcp"' in res.stdout


def wait_ssh(port: int, timeout: float = SSH_WAIT_SECONDS) -> None:
    """Wait until sshd on 127.0.0.1:port sends its banner."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise SystemExit(f"testbed: sshd on 127.0.0.1:{port} did not answer within {timeout:.0f}s {last}")


def host_key_line(name: str, port: int, runner: Runner = run) -> str:
    """known_hosts line for the container's (regenerated) ed25519 host key."""
    key = runner(["docker", "exec", name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.split()
    return f"[127.0.0.1]:{port} {key[0]} {key[1]}"


def setup_ssh_hosts(names: Sequence[str], fleet_dir: Path, cache: Path = SSH_CACHE,
                    runner: Runner = run) -> list[SshHost]:
    """Configure running containers for the SSH fleet and write its known_hosts."""
    key = ensure_operator_key(cache, runner)
    pubkey = Path(str(key) + ".pub").read_text().strip()
    password_file = ensure_become_password(cache)
    password = password_file.read_text().strip()
    with_password = password_sudo_hosts(names)
    hosts: list[SshHost] = []
    for name in names:
        sudo_pw = name in with_password
        runner(["docker", "exec", "-i", name, "sh", "-s"], stdin_text=operator_script(pubkey, sudo_pw))
        # Over stdin, so that the password shows in no process list or docker log.
        runner(["docker", "exec", "-i", name, "chpasswd"],
               stdin_text=f"{SSH_USER}:{password if sudo_pw else secrets.token_urlsafe(18)}\n")
        hosts.append(SshHost(name, published_ssh_port(name, runner), sudo_pw))
    for host in hosts:
        wait_ssh(host.port)
    fleet_dir.mkdir(parents=True, exist_ok=True)
    (fleet_dir / "cp").mkdir(exist_ok=True)
    (fleet_dir / "known_hosts").write_text("".join(host_key_line(h.name, h.port, runner) + "\n" for h in hosts))
    return hosts


def render_ssh_inventory(hosts: Sequence[SshHost], group: str, key: Path, password_file: Path,
                         fleet_dir: Path) -> str:
    """Ansible inventory (YAML) for the fleet as production reaches it: ssh as ops, sudo to root."""
    lines = ["---", "# Generated by testbed.py (--connection ssh); do not edit.", "all:", "  children:",
             f"    {group}:", "      hosts:"]
    for host in hosts:
        lines.append(f"        {host.name}:")
        lines.append(f"          ansible_port: {host.port}")
        if host.password_sudo:
            # As an operator would: read from a file that is not committed, never written here.
            lines.append("          ansible_become_password: "
                         f"\"{{{{ lookup('ansible.builtin.file', '{password_file}') }}}}\"")
    lines += [
        "      vars:",
        "        ansible_connection: ansible.builtin.ssh",
        # sshd is published on the loopback only; the bridge addresses are never used.
        "        ansible_host: 127.0.0.1",
        f"        ansible_user: {SSH_USER}",
        f"        ansible_ssh_private_key_file: {key}",
        "        ansible_become: true",
        "        ansible_become_method: ansible.builtin.sudo",
        "        ansible_python_interpreter: /usr/bin/python3",
        # The fleet's own host keys, checked; its own control sockets, gone with the fleet.
        "        ansible_host_key_checking: true",
        f"        ansible_ssh_common_args: -o UserKnownHostsFile={fleet_dir / 'known_hosts'}",
        f"        ansible_control_path_dir: {fleet_dir / 'cp'}",
    ]
    return "\n".join(lines) + "\n"


def write_ssh_inventory(names: Sequence[str], group: str, inventory: Path, fleet_dir: Path,
                        cache: Path = SSH_CACHE, runner: Runner = run) -> list[SshHost]:
    hosts = setup_ssh_hosts(names, fleet_dir, cache, runner)
    inventory.parent.mkdir(parents=True, exist_ok=True)
    inventory.write_text(render_ssh_inventory(hosts, group, ensure_operator_key(cache, runner),
                                              ensure_become_password(cache), fleet_dir))
    log(f"ssh inventory written to {inventory} ({len(hosts)} hosts, password sudo on "
        f"{', '.join(h.name for h in hosts if h.password_sudo) or 'none'})")
    return hosts


def fleet_up(prefix: str, count: int, suite: str, inventory: Path | None, group: str,
             runner: Runner = run, connection: str = "docker") -> list[str]:
    names = fleet_names(prefix, count)
    existing = running_fleet(prefix, runner)
    if connection == "ssh":
        # A container of a docker-connection fleet publishes no sshd: replace it.
        for name in [n for n in names if n in existing and not publishes_ssh(n, runner)]:
            runner(["docker", "rm", "-f", name])
            del existing[name]
    create, start, remove = plan_fleet(names, existing)
    for name in remove:
        runner(["docker", "rm", "-f", name])
    for name in create:
        log(f"starting container {name} ({image_tag(suite)})")
        # sshd is published on 127.0.0.1 only, on a port docker picks.
        publish = ["-p", "127.0.0.1::22"] if connection == "ssh" else []
        runner(["docker", "run", "-d", "--name", name, "--hostname", name,
                "--label", f"{FLEET_LABEL}={prefix}", *publish, *container_flags(),
                image_tag(suite), "/lib/systemd/systemd"])
    for name in start:
        runner(["docker", "start", name])
    wait_booted(names, runner)
    if connection == "ssh":
        if inventory is None:
            raise SystemExit("testbed: --connection ssh needs --inventory")
        write_ssh_inventory(names, group, inventory, SSH_CACHE / prefix, runner=runner)
    elif inventory is not None:
        inventory.parent.mkdir(parents=True, exist_ok=True)
        inventory.write_text(render_inventory(names, group, {}))
        log(f"inventory written to {inventory}")
    return names


def wait_booted(names: Sequence[str], runner: Runner = run, timeout: float = 90) -> None:
    """Wait until systemd in every container has finished booting."""
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending and time.monotonic() < deadline:
        still = []
        for name in pending:
            res = runner(["docker", "exec", name, "systemctl", "is-system-running"], check=False)
            if res.stdout.strip() not in ("running", "degraded"):
                still.append(name)
        pending = still
        if pending:
            time.sleep(1)
    if pending:
        raise SystemExit(f"testbed: systemd did not finish booting in {', '.join(pending)}")


def fleet_down(prefix: str, runner: Runner = run) -> list[str]:
    names = list(running_fleet(prefix, runner))
    if names:
        runner(["docker", "rm", "-f", *names])
    shutil.rmtree(SSH_CACHE / prefix, ignore_errors=True)
    return names


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_ensure = sub.add_parser("ensure", help="engine running, base images built, limits raised")
    p_ensure.add_argument("--suite", action="append", choices=SUITES,
                          help="only these suites (default: all)")
    p_ensure.add_argument("--containers", type=int, default=0,
                          help="size inotify limits for this many containers")
    sub.add_parser("status", help="print what is observed")
    sub.add_parser("ee-base", help=f"engine running and {EE_BASE_IMAGE} (the execution environment's base,"
                   " scripts/build-ee) built when missing or stale; print its name")
    sub.add_parser("promtool", help="extract Debian's promtool (package prometheus) if missing; print its path")
    sub.add_parser("prometheus", help="fetch Debian's prometheus (server, web UI files) and prometheus-node-exporter"
                   " (.deb) if missing; print their paths")
    p_up = sub.add_parser("fleet-up", help="start N systemd containers and write an inventory")
    p_up.add_argument("--prefix", default="sglang-demo")
    p_up.add_argument("--count", type=int, default=3)
    p_up.add_argument("--suite", default="bookworm", choices=SUITES)
    p_up.add_argument("--inventory", type=Path)
    p_up.add_argument("--group", default="sglang_demo")
    p_up.add_argument("--connection", choices=("docker", "ssh"), default="docker",
                      help="docker exec as root (default), or ssh as the operator 'ops' with sudo")
    p_ssh = sub.add_parser("ssh-setup", help="configure running containers (sshd published on 127.0.0.1) for"
                           " ssh as 'ops' with sudo, and write their inventory")
    p_ssh.add_argument("names", nargs="+")
    p_ssh.add_argument("--inventory", type=Path, required=True)
    p_ssh.add_argument("--group", default="sglang")
    p_ssh.add_argument("--fleet-dir", type=Path, required=True,
                       help="where the fleet's known_hosts and ssh control sockets go")
    p_down = sub.add_parser("fleet-down", help="remove the fleet's containers")
    p_down.add_argument("--prefix", default="sglang-demo")
    p_conv = sub.add_parser("converged", help="the image of a host the role converged (testbed/converged.py);"
                            " built when missing or stale")
    p_conv.add_argument("--suite", action="append", choices=SUITES, help="default: bookworm")
    p_conv.add_argument("--wheelhouse", type=Path, default=WHEELHOUSE)
    p_conv.add_argument("--prefix", default=os.environ.get("SGLANG_TESTBED_PREFIX", "sglang"))
    p_conv.add_argument("--check-container", metavar="NAME",
                        help="only check that this container's image is the current converged one")
    args = parser.parse_args(argv)

    if os.geteuid() != 0 and args.cmd in ("ensure", "fleet-up", "ee-base"):
        log("warning: not root; installing packages or starting the engine may fail")
    if args.cmd == "ensure":
        ensure(args.suite or SUITES, args.containers)
        ensure_promtool()
        ensure_prometheus()
        ensure_node_exporter_deb()
    elif args.cmd == "ee-base":
        ensure([])
        ensure_ee_base()
        print(EE_BASE_IMAGE)
    elif args.cmd == "promtool":
        print(ensure_promtool())
    elif args.cmd == "prometheus":
        print(*ensure_prometheus(), ensure_node_exporter_deb(), sep="\n")
    elif args.cmd == "status":
        print(dataclasses.asdict(observe()))
    elif args.cmd == "fleet-up":
        ensure([args.suite], args.count)
        fleet_up(args.prefix, args.count, args.suite, args.inventory, args.group, connection=args.connection)
    elif args.cmd == "ssh-setup":
        write_ssh_inventory(args.names, args.group, args.inventory, args.fleet_dir)
    elif args.cmd == "fleet-down":
        removed = fleet_down(args.prefix)
        log(f"removed {len(removed)} container(s)")
    elif args.cmd == "converged":
        import converged  # noqa: PLC0415 (a sibling module that imports this one)
        suites = args.suite or ["bookworm"]
        if args.check_container:
            print(converged.check_container(args.check_container, suites[0], args.wheelhouse))
        else:
            ensure(suites)
            converged.ensure_converged(suites, args.wheelhouse, args.prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
