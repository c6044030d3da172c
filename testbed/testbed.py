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
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
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
INOTIFY_PATH = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_WANTED = 1024
# Each systemd container holds about six inotify instances; the default 128
# stops the 23rd container.  Raise the limit before that point.
INOTIFY_PER_CONTAINER = 6
DOCKERD_LOG = Path("/var/log/sglang-testbed-dockerd.log")
# promtool (Debian's `prometheus` package) for the tests of the metrics textfile and the
# alert rules. Only the binary is extracted into the project's cache: installing the
# package would also enable and start a Prometheus server on the test machine.
PROMTOOL_PACKAGE = "prometheus"
PROMTOOL_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "tools" / "promtool"
ENGINE_WAIT_SECONDS = 60

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

Runner = Callable[..., subprocess.CompletedProcess]


def log(msg: str) -> None:
    """Progress goes to stderr so that stdout stays parseable."""
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str], check: bool = True, capture: bool = True,
        timeout: float | None = None, stdin=None, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run a command; on failure say which one and what it printed, then stop."""
    res = subprocess.run(list(cmd), check=False, text=True, timeout=timeout, stdin=stdin, cwd=cwd,
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


def slim_rootfs(root: Path) -> None:
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
    # A container has no consoles to serve; masking these avoids a degraded system.
    for unit in ("getty@tty1.service", "console-getty.service", "systemd-firstboot.service"):
        link = root / "etc/systemd/system" / unit
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to("/dev/null")


def build_image(suite: str, runner: Runner = run) -> None:
    """debootstrap a minimal Debian with systemd and import it as an image.

    No mirror argument: debootstrap's default serves, and no host name is
    written into this repository.
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"testbed-{suite}-") as tmp:
        root = Path(tmp) / "rootfs"
        log(f"debootstrap {suite} (about a minute)")
        # Captured: its hundreds of lines are shown only when it fails.
        runner(["debootstrap", "--variant=minbase", "--include=" + ",".join(IMAGE_PACKAGES),
                suite, str(root)])
        slim_rootfs(root)
        log(f"importing {image_tag(suite)}")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        runner(["docker", "import",
                "-c", 'CMD ["/lib/systemd/systemd"]',
                "-c", f"LABEL {RECIPE_LABEL}={recipe_hash(suite)}",
                "-", image_tag(suite)], stdin=tar.stdout)
        tar.stdout.close()
        if tar.wait() != 0:
            raise SystemExit(f"testbed: tar of the {suite} rootfs failed")
    log(f"built {image_tag(suite)} in {time.monotonic() - started:.0f}s")


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
    for suite in builds:
        build_image(suite, runner)
    if not (pkgs or engine_actions or builds or new_limit):
        log("engine, images and limits already in place")
    return state


def find_promtool() -> Path | None:
    """promtool on PATH (the package installed by hand), else the one extracted before."""
    found = shutil.which("promtool")
    if found:
        return Path(found)
    return PROMTOOL_CACHE if os.access(PROMTOOL_CACHE, os.X_OK) else None


def ensure_promtool(runner: Runner = run) -> Path:
    """Debian's promtool, extracted from the `prometheus` package once; idempotent."""
    found = find_promtool()
    if found:
        return found
    log(f"extracting promtool from Debian's {PROMTOOL_PACKAGE} package into {PROMTOOL_CACHE.parent}")
    PROMTOOL_CACHE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="testbed-promtool-") as tmp:
        # apt-get download writes as _apt when it can; a world-writable temp dir lets it.
        os.chmod(tmp, 0o777)
        if runner(["apt-get", "download", PROMTOOL_PACKAGE], check=False, cwd=tmp).returncode != 0:
            runner(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-qq"], capture=False)
            runner(["apt-get", "download", PROMTOOL_PACKAGE], cwd=tmp)
        debs = sorted(Path(tmp).glob(PROMTOOL_PACKAGE + "_*.deb"))
        if not debs:
            raise SystemExit(f"testbed: apt-get download {PROMTOOL_PACKAGE} left no .deb")
        data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(debs[0])], stdout=subprocess.PIPE)
        runner(["tar", "-x", "-C", tmp, "./usr/bin/promtool"], stdin=data.stdout)
        data.stdout.close()
        if data.wait() != 0:
            raise SystemExit(f"testbed: dpkg-deb could not read {debs[0].name}")
        shutil.move(str(Path(tmp) / "usr" / "bin" / "promtool"), str(PROMTOOL_CACHE))
    PROMTOOL_CACHE.chmod(0o755)
    return PROMTOOL_CACHE


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


def fleet_up(prefix: str, count: int, suite: str, inventory: Path | None, group: str,
             runner: Runner = run) -> list[str]:
    names = fleet_names(prefix, count)
    existing = running_fleet(prefix, runner)
    create, start, remove = plan_fleet(names, existing)
    for name in remove:
        runner(["docker", "rm", "-f", name])
    for name in create:
        log(f"starting container {name} ({image_tag(suite)})")
        runner(["docker", "run", "-d", "--name", name, "--hostname", name,
                "--label", f"{FLEET_LABEL}={prefix}", *SYSTEMD_RUN_FLAGS,
                image_tag(suite), "/lib/systemd/systemd"])
    for name in start:
        runner(["docker", "start", name])
    wait_booted(names, runner)
    if inventory is not None:
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
    sub.add_parser("promtool", help="extract Debian's promtool (package prometheus) if missing; print its path")
    p_up = sub.add_parser("fleet-up", help="start N systemd containers and write an inventory")
    p_up.add_argument("--prefix", default="sglang-demo")
    p_up.add_argument("--count", type=int, default=3)
    p_up.add_argument("--suite", default="bookworm", choices=SUITES)
    p_up.add_argument("--inventory", type=Path)
    p_up.add_argument("--group", default="sglang_demo")
    p_down = sub.add_parser("fleet-down", help="remove the fleet's containers")
    p_down.add_argument("--prefix", default="sglang-demo")
    args = parser.parse_args(argv)

    if os.geteuid() != 0 and args.cmd in ("ensure", "fleet-up"):
        log("warning: not root; installing packages or starting the engine may fail")
    if args.cmd == "ensure":
        ensure(args.suite or SUITES, args.containers)
        ensure_promtool()
    elif args.cmd == "promtool":
        print(ensure_promtool())
    elif args.cmd == "status":
        print(dataclasses.asdict(observe()))
    elif args.cmd == "fleet-up":
        ensure([args.suite], args.count)
        fleet_up(args.prefix, args.count, args.suite, args.inventory, args.group)
    elif args.cmd == "fleet-down":
        removed = fleet_down(args.prefix)
        log(f"removed {len(removed)} container(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
