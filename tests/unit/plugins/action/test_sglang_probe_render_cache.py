"""The probe action's render cache (plugins/action/sglang_probe.py, RenderCache).

A run renders the unit and the environment once per exact input set instead of once per
host. Whatever changes what the template task would write must change the answer: for
every variable of the role (and for every variable the templates read directly), a host
whose value differs gets the sha256 of its own render, which is checked against a render
with no cache at all (the template lookup). Templates whose output is not a function of
their variables are never cached. The render runs in its own process
(tests/render_cache_harness.py): Ansible's collection loader takes over the process's imports.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import COLLECTIONS_PATH, REPO  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.fleetops.sglang.plugins.action import sglang_probe as action  # noqa: E402

TEMPLATES = ("sglang.service.j2", "sglang.env.j2", "sglang.keys.yaml.j2")


@pytest.fixture(scope="module")
def renders(tmp_path_factory):
    cache = tmp_path_factory.mktemp("render-cache")
    res = subprocess.run([sys.executable, str(REPO / "tests" / "render_cache_harness.py"), str(COLLECTIONS_PATH),
                          str(cache)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout)


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_first_host_renders_and_the_next_with_the_same_inputs_reads_the_cache(renders, template):
    t = renders["templates"][template]
    assert t["first"] == t["fresh"] == t["second"]
    # The second host added no entry: it was answered from the cache.
    assert t["entries_after"] == t["entries_before"]
    assert any(not e.startswith("inputs-") for e in t["entries_before"])


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_input_of_the_role_is_part_of_the_key(renders, template):
    t = renders["templates"][template]
    wrong = [(r["name"], r["cached"], r["oracle"]) for r in t["rows"] if r["cached"] != r["oracle"]]
    assert not wrong
    differ = [r["name"] for r in t["rows"] if r["cached"] != t["first"]]
    # Each template reads several of the role's variables: changing them changes the file.
    assert len(differ) >= 4, differ
    if template == "sglang.service.j2":
        # Read through _sglang_launch_args, not by the template itself.
        assert {"sglang_port", "sglang_extra_args", "sglang_speculative_num_steps"} <= set(differ)


def test_what_each_template_reads_is_checked(renders):
    """The variables the templates read directly are among those changed above."""
    rows = {r["name"] for r in renders["templates"]["sglang.service.j2"]["rows"]}
    for template in TEMPLATES:
        names = action.template_inputs((REPO / "roles" / "sglang" / "templates" / template).read_text())
        assert names, template
        assert set(names) - {"inventory_hostname"} <= rows, set(names) - rows


def test_inputs_of_a_template_are_its_free_variables_and_impure_templates_are_not_cached():
    assert action.template_inputs("{% set a = b | default(1) %}{{ a }} {{ c.d }}{% for i in e %}{{ i }}{% endfor %}") \
        == ["b", "c", "e"]
    assert action.template_inputs("{{ x | fleetops.sglang.flag_lines }} {{ range(3) | list }}") == ["x"]
    for impure in ("{{ lookup('env', 'HOME') }}", "{{ query('x') }}", "{{ now() }}", "{{ [1, 2] | shuffle }}",
                   "{{ 5 | random }}", "{{ '%Y' | strftime }}", "{{ hostvars[inventory_hostname].x }}",
                   "{{ groups.all }}", "{{ vars['x'] }}", "{% if %}", "{% include 'other.j2' %}",
                   "{% import 'macros.j2' as m %}{{ m.f() }}", "{% from 'm.j2' import f %}", "{% extends 'base.j2' %}"):
        assert action.template_inputs(impure) is None, impure


def test_a_template_that_reads_an_unset_variable_or_the_render_time_is_rendered_every_time(renders):
    keys = renders["keys"]
    assert keys["sglang.service.j2"] is not None
    assert keys["run_date.j2"] is None and keys["unset.j2"] is None
    # ansible_managed, added by the lookup, is keyed by what the lookup derives it from.
    assert keys["managed.j2"] is not None
    assert renders["no_json"] == [None, None]
    # A template the search path does not have is left to the lookup, which names it.
    assert keys["missing.j2"] is None
    # A managed string that is itself a template depends on more than the lookup's inputs.
    assert keys["managed_templated"] is None


def test_a_cache_that_cannot_be_written_or_holds_a_torn_value_is_computed_again(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    cache = action.RenderCache(str(blocked / "sub"))
    cache.put("k", "a" * 64)  # no directory can be made under a file: nothing is kept, nothing raised
    assert cache.get("k") is None
    assert cache.json_of("j", lambda: [1, 2]) == [1, 2]
    good = action.RenderCache(str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "j").write_text("[1,")
    assert good.json_of("j", lambda: ["again"]) == ["again"]
    assert good.json_of("j", lambda: ["not called"]) == ["again"]


def test_a_torn_entry_is_not_read(tmp_path):
    cache = action.RenderCache(str(tmp_path))
    assert action.RenderCache.key("p", "s", {"a": [1]}) != action.RenderCache.key("p", "s", {"a": [1, 1]})
    (tmp_path / "k").write_text("abc")
    assert cache.get("k") is None
    cache.put("k", "a" * 64)
    assert cache.get("k") == "a" * 64
    assert [p.name for p in tmp_path.iterdir()] == ["k"]
