#!/usr/bin/env python3
"""Headless Chromium for the tests that look at a page: the docs site, the Prometheus UI.

Debian's ``chromium`` package, installed with apt-get the first time it is missing (the
machines this runs on are Debian, and only package registries are reachable, so no browser
download of Playwright's or Puppeteer's kind). Each call is one short-lived browser process
with a fresh profile: no driver, no daemon, nothing left running, and two tests (or two
engineers' checkouts) can take pictures at the same time.

    python testbed/browser.py ensure
    python testbed/browser.py screenshot URL OUT.png [--width 1280 --height 900]
    python testbed/browser.py dump-dom URL
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "chromium"
# Debian names the binary `chromium`; Ubuntu's transitional package and some images say
# `chromium-browser`.
BINARIES: tuple[str, ...] = ("chromium", "chromium-browser")
# One apt-get at a time on this machine, whoever asks (apt's own lock fails rather than waits).
INSTALL_LOCK = ROOT / ".cache" / "browser-install.lock"
# A page with scripts (the Prometheus UI) renders after load; the virtual-time budget lets its
# timers and fetches run before the DOM or the picture is taken, without a fixed sleep.
DEFAULT_BUDGET_MS = 5000
TIMEOUT_S = 90


def log(msg: str) -> None:
    print(f"[browser] {msg}", file=sys.stderr, flush=True)


def find_chromium() -> Path | None:
    """The installed browser, or None."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def install_command(is_root: bool, have_sudo: bool) -> list[str] | None:
    """apt-get as root, through sudo when we are not; None when neither is possible."""
    prefix: list[str]
    if is_root:
        prefix = []
    elif have_sudo:
        prefix = ["sudo", "-n"]
    else:
        return None
    return [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
            "--no-install-recommends", PACKAGE]


def ensure_chromium() -> Path:
    """The browser's path, installing Debian's package once if it is missing; idempotent."""
    found = find_chromium()
    if found:
        return found
    INSTALL_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(INSTALL_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_chromium()  # another process may have installed it while we waited
        if found:
            return found
        cmd = install_command(os.geteuid() == 0, shutil.which("sudo") is not None)
        if cmd is None:
            raise SystemExit(f"browser: {PACKAGE} is not installed and this user cannot run apt-get "
                             f"(not root, no sudo): install it with 'apt-get install {PACKAGE}'")
        log(f"installing Debian's {PACKAGE} package")
        if subprocess.run(cmd).returncode != 0:
            # The package lists may be absent or stale on a fresh machine: refresh once.
            subprocess.run([*cmd[:cmd.index("apt-get")], "apt-get", "update", "-qq"], check=True)
            subprocess.run(cmd, check=True)
    found = find_chromium()
    if not found:
        raise SystemExit(f"browser: apt-get installed {PACKAGE} but none of {BINARIES} is on PATH")
    return found


def chromium_argv(binary: Path, profile: str, width: int, height: int, budget_ms: int) -> list[str]:
    """The headless command line, less the action (--dump-dom or --screenshot) and the URL."""
    return [
        str(binary), "--headless", "--disable-gpu", "--hide-scrollbars",
        # The tests run as root in containers, where Chromium's sandbox cannot start; they only
        # open pages this project built or serves itself.
        "--no-sandbox", "--disable-dev-shm-usage",
        f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
        # Offline machines: no update checks, no field trials, no crash uploads.
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-breakpad", "--metrics-recording-only",
        f"--window-size={width},{height}", f"--virtual-time-budget={budget_ms}",
    ]


@contextlib.contextmanager
def profile() -> Iterator[str]:
    """A throwaway profile (and HOME) for one Chromium run, removed afterwards. Chromium's helper
    processes (crashpad, the zygote's children) can outlive the browser by a moment and still write
    there: the removal retries for a few seconds, then leaves what is still being written rather
    than failing the test that took the picture."""
    tmp = tempfile.mkdtemp(prefix="browser-profile-")
    try:
        yield tmp
    finally:
        deadline = time.monotonic() + 5
        while True:
            try:
                shutil.rmtree(tmp)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    shutil.rmtree(tmp, ignore_errors=True)
                    break
                time.sleep(0.2)


def _run(args: Sequence[str], timeout: int) -> subprocess.CompletedProcess:
    # HOME under the profile too: Chromium writes caches and crash data there.
    with profile() as tmp:
        argv = [a.replace("{profile}", tmp) for a in args]
        env = dict(os.environ, HOME=tmp)
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, env=env)


def screenshot(url: str, path: str | Path, width: int = 1280, height: int = 900,
               budget_ms: int = DEFAULT_BUDGET_MS) -> Path:
    """A PNG of the page's first width x height pixels at path; raises when none was written."""
    out = Path(path).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        out.unlink()  # a stale picture must not pass for a new one
    argv = chromium_argv(ensure_chromium(), "{profile}", width, height, budget_ms)
    res = _run([*argv, f"--screenshot={out}", url], TIMEOUT_S)
    if not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(f"browser: no screenshot of {url} (rc {res.returncode}):\n{res.stderr[-2000:]}")
    return out


def dump_dom(url: str, width: int = 1280, height: int = 900, budget_ms: int = DEFAULT_BUDGET_MS) -> str:
    """The page's DOM as HTML after its scripts ran (what a user sees, not the file's source)."""
    argv = chromium_argv(ensure_chromium(), "{profile}", width, height, budget_ms)
    res = _run([*argv, "--dump-dom", url], TIMEOUT_S)
    if res.returncode != 0 or "<html" not in res.stdout.lower():
        raise RuntimeError(f"browser: no DOM of {url} (rc {res.returncode}):\n{res.stderr[-2000:]}")
    return res.stdout


def snapshot(url: str, path: str | Path, width: int = 1280, height: int = 900,
             budget_ms: int = DEFAULT_BUDGET_MS) -> str:
    """screenshot() and dump_dom() from one browser process (one start instead of two): the
    picture at path, the DOM returned."""
    out = Path(path).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    argv = chromium_argv(ensure_chromium(), "{profile}", width, height, budget_ms)
    res = _run([*argv, f"--screenshot={out}", "--dump-dom", url], TIMEOUT_S)
    if not out.is_file() or out.stat().st_size == 0 or "<html" not in res.stdout.lower():
        raise RuntimeError(f"browser: no screenshot or DOM of {url} (rc {res.returncode}):\n{res.stderr[-2000:]}")
    return res.stdout


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ensure", help="install Debian's chromium when missing")
    shot = sub.add_parser("screenshot", help="a PNG of a page")
    shot.add_argument("url")
    shot.add_argument("out")
    shot.add_argument("--width", type=int, default=1280)
    shot.add_argument("--height", type=int, default=900)
    shot.add_argument("--budget-ms", type=int, default=DEFAULT_BUDGET_MS)
    dom = sub.add_parser("dump-dom", help="a page's DOM after its scripts ran")
    dom.add_argument("url")
    dom.add_argument("--budget-ms", type=int, default=DEFAULT_BUDGET_MS)
    args = ap.parse_args(argv)
    if args.cmd == "ensure":
        print(ensure_chromium())
    elif args.cmd == "screenshot":
        print(screenshot(args.url, args.out, args.width, args.height, args.budget_ms))
    else:
        sys.stdout.write(dump_dom(args.url, budget_ms=args.budget_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
