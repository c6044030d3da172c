"""Runs the probe action's render in a process of its own
(tests/unit/plugins/action/test_sglang_probe_render_cache.py).

Ansible's collection loader, which the action plugin needs, replaces the import system of the
process that installs it; the other tests import the collection as plain packages. So the
render is checked here and the test reads the answers as JSON.

Usage: render_cache_harness.py COLLECTIONS_PATH CACHE_DIR
"""
from __future__ import annotations

import copy
import datetime
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROLE = REPO / "roles" / "sglang"

from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.plugins.loader import init_plugin_loader, lookup_loader  # noqa: E402
from ansible.template import Templar  # noqa: E402

init_plugin_loader([sys.argv[1]])

from ansible_collections.fleetops.sglang.plugins.action import sglang_probe as action  # noqa: E402

TEMPLATES = ("sglang.service.j2", "sglang.env.j2", "sglang.keys.yaml.j2")


def role_vars() -> dict:
    """The role's defaults, its vars and the demo fleet's group_vars, loaded as Ansible loads them (trusted)."""
    loader = DataLoader()
    values: dict = {}
    for path in (ROLE / "defaults" / "main.yml", REPO / "inventory" / "demo" / "group_vars" / "sglang_demo.yml",
                 ROLE / "vars" / "main.yml"):
        values.update(loader.load_from_file(str(path), trusted_as_template=True) or {})
    values.update(sglang_venv="/opt/sglang/venv", role_path=str(ROLE), ansible_search_path=[str(ROLE)],
                  sglang_api_key="k-123", inventory_hostname="h1")
    return values


class Probe(action.ActionModule):
    """The action with only what its render needs: a loader, a templar, a cache directory."""

    def __init__(self, cache_dir, task_vars):  # pylint: disable=super-init-not-called
        self._loader = DataLoader()
        self._templar = Templar(loader=self._loader, variables=task_vars)
        self._cache_dir = str(cache_dir)

    def _cache(self):
        return action.RenderCache(self._cache_dir)


def fresh(template: str, task_vars: dict) -> str:
    """What the template lookup renders, with no cache: the oracle."""
    loader = DataLoader()
    templar = Templar(loader=loader, variables=task_vars)
    lookup = lookup_loader.get("ansible.builtin.template", loader=loader, templar=templar)
    return hashlib.sha256(lookup.run([template], variables=task_vars)[0].encode()).hexdigest()


def changed(value):
    """Another value of the same kind, still a valid input where possible."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.25
    if isinstance(value, str):
        return value + "x" if "{{" not in value else value.replace("}}", "~ 'x' }}", 1)
    if isinstance(value, list):
        return value + [value[-1] if value else "x"] if value else ["x"]
    if isinstance(value, dict):
        return dict(value, SGLANG_CACHE_PROBE="1")
    return "x"


def answer(cache, template, task_vars):
    """The action's answer (cached or not) and the lookup's, or the error each raised."""
    out = []
    for compute in (lambda: Probe(cache, task_vars)._render_sha256(template, task_vars),
                    lambda: fresh(template, task_vars)):
        try:
            out.append(compute())
        except Exception as ex:  # noqa: BLE001  (a refused input must be refused both ways)
            out.append(type(ex).__name__)
    return out


def main(cache_dir: Path) -> dict:
    base = role_vars()
    out: dict = {"templates": {}}
    for template in TEMPLATES:
        cache = cache_dir / template
        first = Probe(cache, base)._render_sha256(template, base)
        entries = sorted(p.name for p in cache.iterdir())
        second = Probe(cache, base)._render_sha256(template, base)
        entries_after = sorted(p.name for p in cache.iterdir())
        rows = []
        names = [n for n in base if n.startswith(("sglang_", "_sglang_")) and n != "sglang_venv"] + ["ansible_managed"]
        for name in names:
            task_vars = copy.deepcopy(base)
            task_vars[name] = changed(base.get(name, "managed"))
            cached, oracle = answer(cache, template, task_vars)
            rows.append({"name": name, "cached": cached, "oracle": oracle})
        out["templates"][template] = {"first": first, "fresh": fresh(template, base), "second": second,
                                      "entries_before": entries, "entries_after": entries_after,
                                      "rows": rows}
    probe = Probe(cache_dir / "keys", base)
    lookup = lookup_loader.get("ansible.builtin.template", loader=probe._loader, templar=probe._templar)
    own = cache_dir / "own" / "templates"
    own.mkdir(parents=True)
    keys = {"sglang.service.j2": probe._render_key(lookup, "sglang.service.j2", base)}
    for name, text in (("run_date.j2", "{{ template_run_date }}"), ("unset.j2", "{{ not_set_anywhere | default(1) }}"),
                       ("managed.j2", "{{ ansible_managed }}")):
        (own / name).write_text(text)
        keys[name] = probe._render_key(lookup, name, dict(base, ansible_search_path=[str(own.parent)]))
    keys["missing.j2"] = probe._render_key(lookup, "missing.j2", dict(base, ansible_search_path=[str(own.parent)]))
    config = action.C.config
    real = config.get_config_value
    config.get_config_value = lambda name, *a, **k: "{{ who }} managed" if name == "DEFAULT_MANAGED_STR" else real(name, *a, **k)
    try:
        keys["managed_templated"] = probe._render_key(lookup, "managed.j2", dict(base, ansible_search_path=[str(own.parent)]))
    finally:
        config.get_config_value = real
    out["keys"] = keys
    out["no_json"] = [action.RenderCache.key("p", "s", {"a": datetime.date(2026, 1, 1)}),
                      action.RenderCache.key("p", "s", {"a": float("nan")})]
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[2]))))
