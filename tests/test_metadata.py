"""The collection's metadata agrees with itself, and no file points outside the repository."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from conftest import REPO, ROLE


def _yaml(path):
    return yaml.safe_load((REPO / path).read_text())


def _bounds(spec: str) -> tuple:
    """requires_ansible as (minimum, upper bound): both are required (issue: private and experimental
    core APIs, with no upper bound, break on the next minor release without a word)."""
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)(?:\.(\d+))?\s*,\s*<\s*(\d+)\.(\d+)(?:\.(\d+))?", spec.strip())
    assert found, "requires_ansible %r: a lower and an upper bound, >=X.Y.Z,<X.Y+1.0" % spec
    values = tuple(int(x or 0) for x in found.groups())
    return values[:3], values[3:]


def _minimum(spec: str) -> tuple:
    return _bounds(spec)[0]


def _version(text: str) -> tuple:
    return tuple(int(x) for x in (text.split(".") + ["0", "0"])[:3])


def test_galaxy_runtime_and_the_roles_meta_say_the_same():
    galaxy, runtime, role = _yaml("galaxy.yml"), _yaml("meta/runtime.yml"), _yaml("roles/sglang/meta/main.yml")
    info = role["galaxy_info"]
    assert info["namespace"] == galaxy["namespace"] and info["role_name"] == "sglang"
    assert [info["license"]] == galaxy["license"], (info["license"], galaxy["license"])
    assert (REPO / "COPYING").read_text().lstrip().startswith("GNU GENERAL PUBLIC LICENSE")
    minimum = _minimum(runtime["requires_ansible"])
    assert _version(info["min_ansible_version"]) == minimum


def test_the_oldest_ansible_core_claimed_is_the_one_the_suite_runs():
    """Claim only what is tested: the lock's ansible-core is on the minimum's minor release."""
    minimum = _minimum(_yaml("meta/runtime.yml")["requires_ansible"])
    lock = (REPO / "requirements" / "controller.lock").read_text()
    tested = tuple(int(x) for x in re.search(r"^ansible-core==(\d+)\.(\d+)\.(\d+)", lock, re.M).groups())
    assert tested[:2] == minimum[:2] and tested >= minimum, (tested, minimum)
    # ... and nothing past its minor release.
    assert _bounds(_yaml("meta/runtime.yml")["requires_ansible"])[1] == (tested[0], tested[1] + 1, 0)


def _tracked_text_files():
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        if name.startswith("collections/"):
            continue
        path = REPO / name
        try:
            yield name, path.read_text()
        except (UnicodeDecodeError, OSError):
            continue


def test_no_file_refers_to_a_path_outside_the_repository():
    """Notes of the people who wrote it (a facts file, a research note, a machine path) mean
    nothing to a reader of the repository: cite the upstream file and release instead."""
    outside = re.compile(r"sglang-facts\.md|testbed-facts\.md|STYLE\.md|research/[\w-]+\.md|(?<![\w.])/work/")
    found = []
    for name, text in _tracked_text_files():
        if name == "tests/test_metadata.py":
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if outside.search(line):
                found.append("%s:%d: %s" % (name, number, line.strip()[:100]))
            # Relative to the file's own folder; not one after a templated base ("{{ playbook_dir }}/..").
            if "readlink" in line or "ln -s" in line:
                continue  # a link's target is relative to the link, not to this file
            for rel in re.findall(r"(?<![\w.}/])((?:\.\./)+[\w.-][\w./-]*)", line):
                target = ((REPO / name).parent / rel).resolve()
                if REPO.resolve() not in target.parents and target != REPO.resolve():
                    found.append("%s:%d: %s leaves the repository" % (name, number, rel))
    assert not found, "\n".join(found)


def test_the_role_does_not_claim_other_licences_or_namespaces():
    meta = (ROLE / "meta" / "main.yml").read_text()
    assert "Apache" not in meta and "sglang_remediation" not in meta


def _listed(kind: str) -> set:
    import json
    import os
    import sys
    from pathlib import Path

    from conftest import COLLECTIONS_PATH

    doc = Path(sys.executable).parent / "ansible-doc"
    proc = subprocess.run([str(doc), "-t", kind, "-l", "--json", "fleetops.sglang"], capture_output=True, text=True,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_PATH)), timeout=120, check=True)
    return {name.split(".", 2)[2] for name in json.loads(proc.stdout)}


def test_the_readmes_table_is_the_public_surface_ansible_doc_lists():
    readme = (REPO / "README.md").read_text()
    table = readme.split("| content | FQCN |", 1)[1].split("\n\n", 1)[0]
    rows = {m.group(1): set(re.findall(r"`(?:fleetops\.sglang\.)?([a-z0-9_]+)`", m.group(2)))
            for m in re.finditer(r"^\| (modules|filters|callbacks|strategies) \| (.*) \|$", table, re.M)}
    for kind, row in (("module", "modules"), ("filter", "filters"), ("callback", "callbacks"),
                      ("strategy", "strategies")):
        listed = _listed(kind)
        assert not any(name.startswith("_") for name in listed), listed
        assert rows[row] == listed, (kind, sorted(rows[row] ^ listed))
    version = _yaml("galaxy.yml")["version"]
    assert "fleetops-sglang-%s.tar.gz" % version in readme


DOCSITE = REPO / "docs" / "docsite"
LABEL = ".. _ansible_collections.fleetops.sglang.docsite.%s:"


def test_the_readme_fits_on_two_screens_and_points_at_the_guides():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "the README is the front page; the reference goes into a guide"
    # Every relative link of the README resolves to a file of the checkout (anchors are the site's business).
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert links, "the README links its guides"
    assert [link for link in links if not (REPO / link).exists()] == []
    guides = {Path(link).stem for link in links if link.startswith("docs/docsite/rst/")}
    assert guides == {p.stem for p in (DOCSITE / "rst").glob("*.rst")}, "the README lists every guide"


def test_every_guide_is_listed_once_and_carries_its_label():
    listed = [name for section in _yaml("docs/docsite/extra-docs.yml")["sections"] for name in section["toctree"]]
    assert len(listed) == len(set(listed))
    files = {p.stem: p.read_text() for p in (DOCSITE / "rst").glob("*.rst")}
    assert set(listed) == set(files), "a guide that extra-docs.yml does not list is built nowhere"
    for name, text in files.items():
        assert text.startswith(LABEL % name + "\n"), name
