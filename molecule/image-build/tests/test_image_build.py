"""Image-build mode: the patched release is baked in, and nothing about services exists."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from scenario_helpers import PROJECT, run_playbook  # noqa: E402

SITE = "/opt/sglang/venv/lib/python3.{minor}/site-packages/sglang/srt/models/deepseek_v2.py"


def test_patch_is_applied_and_compiles(host):
    minor = host.check_output("python3 -c 'import sys; print(sys.version_info.minor)'")
    path = SITE.format(minor=minor)
    text = host.file(path).content_string
    assert text.count("self.capture_embedding_for_eagle3 = False") >= 1
    assert "hidden_states.clone()" in text
    assert host.run("/opt/sglang/venv/bin/python -m py_compile %s" % path).rc == 0
    assert host.file("/var/lib/sglang-remediation/backup").is_directory


def test_draft_config_lists_the_trained_layers(host):
    """The image's server is to be started on the draft's view (the draft itself is only read)."""
    cfg = json.loads(host.file("/etc/sglang/sglang.draft/config.json").content_string)
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]


def test_no_service_user_unit_or_environment(host):
    assert not host.file("/etc/systemd/system/sglang.service").exists
    assert not host.file("/etc/sglang/sglang.env").exists
    assert not host.user("sglang").exists
    assert host.run("systemctl cat sglang").rc != 0


def test_the_install_was_hash_checked(host):
    """converge.yml pins the wheel's sha256: pip installed through the role's pinned requirement."""
    req = host.file("/var/lib/sglang-remediation/requirements.txt")
    assert req.exists and req.mode == 0o644 and req.user == "root"
    assert req.content_string.startswith("sglang==0.5.9 --hash=sha256:"), req.content_string


def test_a_rollback_in_image_build_mode_puts_the_release_back_and_touches_no_service(host):
    """playbooks/rollback.yml with sglang_service_manage=false (its last test: it undoes the build):
    the draft config and the patched file go back, and no unit, server or daemon reload is involved."""
    demo = yaml.safe_load((PROJECT / "inventory" / "demo" / "group_vars" / "sglang_demo.yml").read_text())
    minor = host.check_output("python3 -c 'import sys; print(sys.version_info.minor)'")
    back = run_playbook(PROJECT / "playbooks" / "rollback.yml", extra_vars=dict(demo, sglang_service_manage=False),
                        env={"ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg")})
    assert back.rc == 0, back.tail(80)
    text = host.file(SITE.format(minor=minor)).content_string
    assert "hidden_states.clone()" not in text, "the patched file was not put back"
    # The draft's config as it arrived from training, byte for byte (never written), and the view the
    # build made of it gone with its config.json.
    arrived = (PROJECT / "files" / "models" / "deepseek-v3-eagle3" / "config.json").read_text()
    assert host.file("/models/DeepSeek-V3-EAGLE3/config.json").content_string == arrived
    assert not host.file("/etc/sglang/sglang.draft/config.json").exists
    assert not host.file("/etc/systemd/system/sglang.service").exists
    assert host.run("systemctl cat sglang").rc != 0
