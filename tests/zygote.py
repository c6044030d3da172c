"""Run ``python -c CODE ARGS...`` many times without paying each time for its heavy imports.

A test speed-up, not a test double: the code run is the role's own (the forward-capture
harness, parse_server_args.py), under the same interpreter, environment and argv. Only the
imports that every run repeats (torch, SGLang's ServerArgs: 2 to 7 CPU seconds each) are
done once, in a parent process that then forks one child per run. The child starts from
that state, as a fresh interpreter would after ``import torch``: it sets ``sys.argv`` as
``python -c`` does, points fds 0/1/2 at /dev/null and two files, executes the code as
``__main__`` and exits with its status (``SystemExit`` as the interpreter would turn it
into one, an uncaught exception as 1 with its traceback on stderr).

The parent imports only; it runs no torch operation, so no thread pool exists to be
broken by the fork. The tests that show what a host runs (the harness launched by the
module as AnsiballZ does, one capture per release family) keep starting real processes.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from typing import Dict, Optional, Sequence, Tuple

SERVER = r"""
import json, os, sys, traceback
for name in json.loads(sys.argv[1]):
    try:
        __import__(name)
    except ImportError:
        pass  # only a missed speed-up: the child imports it, or fails, as a fresh process would
requests, replies = sys.stdin, sys.stdout
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.argv = ["-c"] + req["args"]
        sys.path[0] = ""
        rc = 0
        try:
            exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        except SystemExit as exc:
            code = exc.code
            if code is None:
                rc = 0
            elif isinstance(code, int):
                rc = code
            else:
                print(code, file=sys.stderr)
                rc = 1
        except BaseException:
            traceback.print_exc()
            rc = 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc & 0xFF)
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""


class Zygote:
    """One ``python`` with ``env`` and ``preload`` imported, forking a child per ``run``."""

    def __init__(self, python: str, preload: Sequence[str], env: Optional[Dict[str, str]] = None) -> None:
        self.python, self.preload, self.env = python, list(preload), env
        self._proc = subprocess.Popen([python, "-c", SERVER, json.dumps(self.preload)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=env)
        self._lock = threading.Lock()

    def run(self, code: str, args: Sequence[str] = ()) -> Tuple[int, str, str]:
        """``python -c code *args``: (rc, stdout, stderr)."""
        with self._lock, tempfile.TemporaryDirectory() as tmp:
            out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            if self._proc.poll() is not None:
                raise RuntimeError("the zygote of %s exited (%s)" % (self.python, self._proc.returncode))
            self._proc.stdin.write(json.dumps({"code": code, "args": list(args), "stdout": out, "stderr": err}) + "\n")
            self._proc.stdin.flush()
            reply = self._proc.stdout.readline()
            if not reply:
                raise RuntimeError("the zygote of %s died during a run" % self.python)
            with open(out) as fh_out, open(err) as fh_err:
                return json.loads(reply)["rc"], fh_out.read(), fh_err.read()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=60)
