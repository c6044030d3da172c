"""The test bed's decisions: what it does when the engine is up or down and images present or missing.

The planners are pure; ``ensure`` is exercised with the actions replaced by
recorders, so nothing is installed, started or built by these tests.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testbed"))
import testbed  # noqa: E402


def state(**overrides) -> testbed.State:
    base = dict(docker_cli=True, dockerd_binary=True, debootstrap_binary=True, engine_answers=True,
                image_recipes={s: testbed.recipe_hash(s) for s in testbed.SUITES},
                inotify_instances=1024)
    base.update(overrides)
    return testbed.State(**base)


@pytest.fixture
def recorded(monkeypatch):
    """Replace every action by a recorder; observe() returns the queued states in turn."""
    calls: list[tuple] = []
    states: list[testbed.State] = []
    monkeypatch.setattr(testbed, "observe", lambda runner=None: states.pop(0) if len(states) > 1 else states[0])
    monkeypatch.setattr(testbed, "apt_install", lambda pkgs, runner=None: calls.append(("apt", tuple(pkgs))))
    monkeypatch.setattr(testbed, "start_engine", lambda runner=None: calls.append(("start-engine",)))
    monkeypatch.setattr(testbed, "build_image", lambda suite, runner=None: calls.append(("build", suite)))
    monkeypatch.setattr(testbed, "set_inotify", lambda value: calls.append(("inotify", value)))
    return calls, states


def test_healthy_machine_is_left_alone(recorded):
    calls, states = recorded
    states.append(state())
    testbed.ensure(testbed.SUITES, containers=3)
    assert calls == []


def test_bare_machine_installs_starts_and_builds_everything(recorded):
    calls, states = recorded
    states.append(state(docker_cli=False, dockerd_binary=False, debootstrap_binary=False,
                        engine_answers=False, image_recipes={s: None for s in testbed.SUITES},
                        inotify_instances=128))
    states.append(state(image_recipes={s: None for s in testbed.SUITES}, inotify_instances=128))
    testbed.ensure(testbed.SUITES)
    # The two images are built side by side: in either order.
    assert calls[:3] == [("apt", ("docker.io", "debootstrap")), ("start-engine",), ("inotify", 1024)]
    assert sorted(calls[3:]) == [("build", "bookworm"), ("build", "trixie")]


def test_missing_images_are_built_side_by_side_and_a_failure_still_fails(monkeypatch):
    import threading
    both = threading.Barrier(2, timeout=10)  # broken (an error) unless the two builds overlap
    def build(suite, runner=None):
        both.wait()
        if suite == "trixie":
            raise SystemExit("testbed: debootstrap trixie failed")
    monkeypatch.setattr(testbed, "build_image", build)
    with pytest.raises(SystemExit, match="debootstrap trixie failed"):
        testbed.build_images(["bookworm", "trixie"])
    assert not both.broken


def test_stopped_engine_with_images_is_started_not_rebuilt(recorded):
    calls, states = recorded
    states.append(state(engine_answers=False, image_recipes={s: None for s in testbed.SUITES}))
    states.append(state())  # after the start the images are visible again
    testbed.ensure(testbed.SUITES)
    assert calls == [("start-engine",)]


def test_missing_image_is_built_alone_and_debootstrap_installed_only_then(recorded):
    calls, states = recorded
    states.append(state(debootstrap_binary=False,
                        image_recipes={"bookworm": testbed.recipe_hash("bookworm"), "trixie": None}))
    testbed.ensure(testbed.SUITES)
    assert calls == [("apt", ("debootstrap",)), ("build", "trixie")]


def test_image_from_an_older_recipe_is_rebuilt():
    st = state(image_recipes={"bookworm": "0123456789abcdef", "trixie": testbed.recipe_hash("trixie")})
    assert testbed.plan_images(st, testbed.SUITES) == ["bookworm"]


def test_engine_plan():
    assert testbed.plan_engine(state()) == []
    assert testbed.plan_engine(state(engine_answers=False)) == ["start-engine"]
    assert testbed.plan_engine(state(engine_answers=False, dockerd_binary=False)) == ["install-docker", "start-engine"]


@pytest.mark.parametrize("current,containers,expected", [
    (128, 0, 1024), (1024, 3, None), (1024, 200, 200 * 6 + 64), (4096, 200, None), (None, 10, None)])
def test_inotify_plan(current, containers, expected):
    assert testbed.plan_inotify(current, containers) == expected


def test_fleet_plan_keeps_running_containers():
    wanted = testbed.fleet_names("demo", 3)
    create, start, remove = testbed.plan_fleet(wanted, {"demo-1": "running", "demo-2": "exited", "demo-9": "running"})
    assert (create, start, remove) == (["demo-3"], ["demo-2"], ["demo-9"])


def test_inventory_uses_the_docker_connection():
    text = testbed.render_inventory(["a-1", "a-2"], "sglang", {})
    assert "ansible_connection: community.docker.docker" in text
    assert "        a-1:\n        a-2:\n" in text


def test_run_names_the_failing_command():
    with pytest.raises(SystemExit, match="'false' failed"):
        testbed.run(["false"])
    assert testbed.run(["false"], check=False).returncode == 1


def test_observe_reads_a_real_machine_without_changing_it():
    st = testbed.observe()
    assert set(st.image_recipes) == set(testbed.SUITES)
    assert isinstance(st.engine_answers, bool)


def test_ssh_inventory_is_what_production_uses(tmp_path):
    import yaml
    hosts = [testbed.SshHost("f-1", 32801, False), testbed.SshHost("f-2", 32802, True)]
    text = testbed.render_ssh_inventory(hosts, "sglang", tmp_path / "key", tmp_path / "pw", tmp_path / "fleet")
    inv = yaml.safe_load(text)["all"]["children"]["sglang"]
    v = inv["vars"]
    assert v["ansible_connection"] == "ansible.builtin.ssh" and v["ansible_host"] == "127.0.0.1"
    assert v["ansible_user"] == "ops" and v["ansible_become"] is True
    assert v["ansible_ssh_private_key_file"] == str(tmp_path / "key")
    assert inv["hosts"]["f-1"] == {"ansible_port": 32801}
    # The password is read from the uncommitted file when Ansible needs it; never written here.
    assert inv["hosts"]["f-2"]["ansible_become_password"] == "{{ lookup('ansible.builtin.file', '%s') }}" % (
        tmp_path / "pw")


def test_one_host_of_a_fleet_asks_for_a_sudo_password():
    assert testbed.password_sudo_hosts(["a-1", "a-2", "a-3"]) == {"a-3"}
    assert testbed.password_sudo_hosts([]) == set()


def test_operator_script_gives_ops_its_key_and_the_right_sudo():
    nopasswd = testbed.operator_script("ssh-ed25519 AAAA ops", password_sudo=False)
    withpw = testbed.operator_script("ssh-ed25519 AAAA ops", password_sudo=True)
    assert "ops ALL=(ALL:ALL) NOPASSWD: ALL" in nopasswd and "NOPASSWD" not in withpw
    assert "visudo -cqf" in nopasswd and "ssh-keygen -A" in nopasswd
    assert "'ssh-ed25519 AAAA ops'" in nopasswd and "PasswordAuthentication no" in nopasswd


def test_only_the_loopback_port_is_used():
    out = "0.0.0.0:1234\n127.0.0.1:32801\n"
    runner = lambda cmd, **kw: testbed.subprocess.CompletedProcess(cmd, 0, out, "")  # noqa: E731
    assert testbed.published_ssh_port("f-1", runner) == 32801
    with pytest.raises(SystemExit, match="127.0.0.1::22"):
        testbed.published_ssh_port("f-1", lambda cmd, **kw: testbed.subprocess.CompletedProcess(cmd, 0, "", ""))


def tiny_deb(tmp_path: Path, name: str, files: dict[str, str], links: dict[str, str]) -> Path:
    """A .deb of ``name`` shipping ``files`` (path -> text) and ``links`` (path -> target)."""
    root = tmp_path / ("pkg-" + name)
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1\nArchitecture: all\nMaintainer: t <t@example.invalid>\nDescription: t\n")
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for path, target in links.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).symlink_to(target)
    deb = tmp_path / f"{name}_1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian)")
def test_the_web_ui_tree_resolves_the_links_into_other_packages(tmp_path):
    # As Debian's prometheus links its UI to libjs-jquery's files.
    ui = tiny_deb(tmp_path, "ui", {"usr/share/ui/web/page.html": "<html>", "usr/share/doc/ui/README": "x"},
                  {"usr/share/ui/web/jquery": os.path.join("..", "..", "javascript", "jquery")})
    lib = tiny_deb(tmp_path, "libjs-jquery", {"usr/share/javascript/jquery/jquery.min.js": "$",
                                               "usr/share/javascript/jquery/big/zones": "212 MB"}, {})
    tree = testbed.extract_share_tree([ui, lib], tmp_path / "root", ["./usr/share/javascript/jquery/big"])
    assert (tree / "usr/share/ui/web/jquery/jquery.min.js").read_text() == "$"
    assert not (tree / "usr/share/doc").exists() and not (tree / "usr/share/javascript/jquery/big").exists()
    # Without the library the link would resolve to nothing: refused, and no tree left behind.
    with pytest.raises(SystemExit, match=r"usr/share/ui/web/jquery"):
        testbed.extract_share_tree([ui], tmp_path / "half")
    assert not (tmp_path / "half").exists() and [p.name for p in tmp_path.glob(".extract-*")] == []


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian)")
def test_a_file_that_is_no_deb_is_named(tmp_path):
    bogus = tmp_path / "truncated_1_all.deb"
    bogus.write_text("not an archive")
    # tar is replaced by a runner that reads nothing, so that only dpkg-deb's own failure speaks.
    with pytest.raises(SystemExit, match="could not read truncated_1_all.deb"):
        testbed.extract_share_tree([bogus], tmp_path / "root",
                                   runner=lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "", ""))
