"""plugins/plugin_utils/_prefork.py: the controller's main process loads, before the first worker forks,
what every worker would load again for itself (the Jinja plugins, the lexer, the collection's filters).

Judged inside the workers of real ansible-playbook runs: an action plugin of the test's own reports, from
the worker that runs it, whether the plugins were already there when the worker started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

COLLECTION_FILTERS = "ansible_collections.fleetops.sglang.plugins.filter.sglang"

# Runs in the worker, and templates nothing itself: what it sees loaded was loaded before the fork.
PROBE = textwrap.dedent('''
    import sys
    from ansible.plugins.action import ActionBase
    from ansible.plugins.loader import filter_loader, test_loader


    class ActionModule(ActionBase):
        def run(self, tmp=None, task_vars=None):
            return {"changed": False, "seen": {
                "builtin_filters": bool(filter_loader._cached_non_collection_wrappers),
                "builtin_tests": bool(test_loader._cached_non_collection_wrappers),
                "collection_filters": "%s" in sys.modules,
            }}
''' % COLLECTION_FILTERS)

PLAY = textwrap.dedent('''
    - hosts: all
      gather_facts: false
      tasks:
        - name: What the worker found loaded
          preload_probe:
          register: seen
        - name: Keep it
          ansible.builtin.copy:
            content: "{{ seen.seen | to_json }}"
            dest: "{{ out }}/{{ inventory_hostname }}.json"
          delegate_to: localhost
''')


def _bare_config(tmp_path, callback_plugins=None):
    """An ansible.cfg with the collection and no callback enabled."""
    cfg = tmp_path / "bare.cfg"
    cfg.write_text("[defaults]\ncollections_path = %s\n%s" % (
        REPO / "collections", "callback_plugins = %s\n" % callback_plugins if callback_plugins else ""))
    return str(cfg)


def _run(tmp_path, **env_over):
    (tmp_path / "action_plugins").mkdir(exist_ok=True)
    (tmp_path / "action_plugins" / "preload_probe.py").write_text(PROBE)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts").write_text("".join("h%d ansible_connection=local ansible_python_interpreter=%s\n"
                                            % (i, sys.executable) for i in range(3)))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), SGLANG_REPORT_DIR=str(tmp_path / "reports"))
    env.update(env_over)
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(tmp_path / "hosts"),
                           str(tmp_path / "play.yml"), "-e", "out=%s" % out],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout
    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(seen) == ["h0", "h1", "h2"], (seen, proc.stdout)
    return seen, proc.stdout


def test_with_the_report_callback_every_worker_starts_with_the_plugins_loaded(tmp_path):
    """The collection's ansible.cfg enables fleetops.sglang.sglang_report, which warms up at the playbook's start."""
    seen, out = _run(tmp_path)
    for host, loaded in seen.items():
        assert loaded == {"builtin_filters": True, "builtin_tests": True, "collection_filters": True}, (host, loaded)
    assert "WARNING" not in out, out


def test_without_it_each_worker_loads_them_again(tmp_path):
    """The same run with no callback: nothing was loaded before the fork (what the warm-up saves)."""
    seen, _ = _run(tmp_path, ANSIBLE_CONFIG=_bare_config(tmp_path))
    for host, loaded in seen.items():
        assert loaded == {"builtin_filters": False, "builtin_tests": False, "collection_filters": False}, (host, loaded)


def test_the_suites_runs_get_it_from_the_test_beds_callback_directory(tmp_path):
    """Molecule's runs of the role enable no report: molecule/shared/callback_plugins warms them up the same way."""
    seen, _ = _run(tmp_path, ANSIBLE_CONFIG=_bare_config(tmp_path, REPO / "molecule" / "shared" / "callback_plugins"))
    for host, loaded in seen.items():
        assert all(loaded.values()), (host, loaded)


WARM = textwrap.dedent('''
    import json, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
    from ansible_collections.fleetops.sglang.plugins.plugin_utils import _prefork
    if len(sys.argv) > 2:
        _prefork._COLLECTION_FILTERS = sys.argv[2]
    first = _prefork.warm_up()
    from ansible.plugins.loader import filter_loader, test_loader
    print(json.dumps({"first": first, "again": _prefork.warm_up(),
                      "filters": len(filter_loader._cached_non_collection_wrappers),
                      "tests": len(test_loader._cached_non_collection_wrappers),
                      "collection": _prefork._COLLECTION_FILTERS in sys.modules}))
''')


@pytest.mark.parametrize("broken", [False, True], ids=["loads", "a step that fails is left to the workers"])
def test_warm_up_loads_once_and_never_fails_a_run(broken):
    argv = [str(REPO / ".venv" / "bin" / "python"), "-c", WARM, str(REPO / "collections")]
    if broken:
        argv.append("ansible_collections.fleetops.sglang.plugins.filter.no_such_file")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["filters"] > 50 and got["tests"] > 20, got
    # Loaded once: the second call finds it done, whatever the first one could not do.
    assert got["again"] is True
    assert got["first"] is (not broken) and got["collection"] is (not broken), got
