"""molecule/shared/callback_plugins/ansiballz_cache.py: the suite's ansible-playbook processes
share one AnsiballZ cache, keyed by what payloads are built from, and the payload a run sends
is the one it would have built."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

CALLBACKS = REPO / "molecule" / "shared" / "callback_plugins"
PLAY = """
- name: One module, twice
  hosts: all
  gather_facts: false
  tasks:
    - name: Run a command
      ansible.builtin.command: "echo payload"
      register: out
      changed_when: false
    - name: Check what it printed
      ansible.builtin.assert:
        that: out.stdout == "payload"
"""


def _load():
    spec = importlib.util.spec_from_file_location("ansiballz_cache", CALLBACKS / "ansiballz_cache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _play(tmp_path, **env):
    (tmp_path / "play.yml").write_text(PLAY)
    environment = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), ANSIBLE_NOCOLOR="1",
                       ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"), **env)
    if "SGLANG_TEST_ANSIBALLZ_CACHE" not in env:
        environment.pop("SGLANG_TEST_ANSIBALLZ_CACHE", None)
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "one,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, "play.yml"],
                          cwd=str(tmp_path), env=environment, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_second_process_sends_the_payload_the_first_built(tmp_path):
    shared = tmp_path / "shared"
    _play(tmp_path, SGLANG_TEST_ANSIBALLZ_CACHE=str(shared))
    [key_dir] = list(shared.iterdir())
    [payload] = [p for p in key_dir.iterdir() if p.name.startswith("ansible.modules.command-")
                 and not p.name.endswith(".lock")]
    built = payload.stat()
    second = _play(tmp_path, SGLANG_TEST_ANSIBALLZ_CACHE=str(shared), ANSIBLE_DEBUG="1")
    # ansible-core names the path through its own local tmp: the link to the shared directory.
    assert "ANSIBALLZ: using cached module: %s/ansible-local-" % (tmp_path / "local-tmp") in second.stdout
    assert "ANSIBALLZ: Creating module" not in second.stdout + second.stderr
    assert (payload.stat().st_ino, payload.stat().st_mtime_ns) == (built.st_ino, built.st_mtime_ns)
    # Each process removed its own local tmp (the link in it), never the shared payloads.
    assert not list((tmp_path / "local-tmp").glob("ansible-local-*")) and payload.exists()


def test_without_the_variable_each_process_keeps_its_own_cache(tmp_path):
    proc = _play(tmp_path, ANSIBLE_DEBUG="1")
    assert "ANSIBALLZ: Creating module" in proc.stdout + proc.stderr
    assert not (tmp_path / "shared").exists()


def test_the_key_follows_every_input_of_a_payload(tmp_path):
    mod = _load()
    checkout = tmp_path / "checkout"
    (checkout / "plugins" / "module_utils").mkdir(parents=True)
    util = checkout / "plugins" / "module_utils" / "x.py"
    util.write_text("A = 1\n")
    manifest = tmp_path / "colls" / "ansible_collections" / "ns" / "c" / "MANIFEST.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"version": "1.0.0"}')
    colls = [str(tmp_path / "colls")]
    first = mod.cache_key(checkout, colls)
    assert mod.cache_key(checkout, colls) == first
    util.write_text("A = 2\n")
    second = mod.cache_key(checkout, colls)
    assert second != first
    manifest.write_text('{"version": "1.0.1"}')
    assert mod.cache_key(checkout, colls) not in (first, second)
    # A new module is a new input too.
    (checkout / "plugins" / "modules").mkdir()
    third = mod.cache_key(checkout, colls)
    (checkout / "plugins" / "modules" / "m.py").write_text("")
    assert mod.cache_key(checkout, colls) != third


def test_linking_twice_in_one_process_keeps_the_one_link(tmp_path):
    mod = _load()
    local = tmp_path / "ansible-local-1"
    local.mkdir()
    first = mod.link(str(local), str(tmp_path / "shared"))
    assert mod.link(str(local), str(tmp_path / "shared")) == first
    assert os.readlink(local / "ansiballz_cache") == first and Path(first).is_dir()


def test_a_cached_payload_carries_bytecode_that_the_hosts_python_imports(tmp_path):
    """Each .py of a cached payload has an unchecked-hash .pyc beside it, compiled by the hosts'
    Python: that Python imports the .pyc (its code names the payload's inner path), another one
    falls back to the source."""
    import base64
    import pickle
    import shutil
    import zipfile

    python = shutil.which("python3.11")
    assert python, "python3.11 (Debian 12's python3; scripts/bootstrap installs it) compiles the hosts' bytecode"
    shared = tmp_path / "shared"
    _play(tmp_path, SGLANG_TEST_ANSIBALLZ_CACHE=str(shared), SGLANG_TEST_BYTECODE_PYTHON=python)
    [key_dir] = list(shared.iterdir())
    [payload] = [p for p in key_dir.iterdir() if p.name.startswith("ansible.modules.command-")
                 and not p.name.endswith(".lock")]
    with payload.open("rb") as cache_file:
        cached = pickle.load(cache_file)  # ansible-core's own cache format (module_common._CachedModule)
    archive = tmp_path / "payload.zip"
    archive.write_bytes(base64.b64decode(cached.zip_data))
    names = set(zipfile.ZipFile(archive).namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert sources and {n[:-3] + ".pyc" for n in sources} <= names
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import ansible.module_utils.basic as b; "
             "print(b.AnsibleModule.__init__.__code__.co_filename)")
    hosts = subprocess.run([python, "-I", "-c", probe, str(archive)], capture_output=True, text=True, check=True)
    assert hosts.stdout.strip() == "<ansiballz>/ansible/module_utils/basic.py"
    other = subprocess.run([sys.executable, "-I", "-c", probe, str(archive)], capture_output=True, text=True,
                           check=True)
    assert other.stdout.strip() == str(archive / "ansible" / "module_utils" / "basic.py")
    # A key of its own: payloads compiled by another Python (or none) are never mixed in.
    _play(tmp_path, SGLANG_TEST_ANSIBALLZ_CACHE=str(shared), SGLANG_TEST_BYTECODE_PYTHON="/nonexistent")
    assert len(list(shared.iterdir())) == 2
