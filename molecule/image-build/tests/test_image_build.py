"""Image-build mode: the patched release is baked in, and nothing about services exists."""
from __future__ import annotations

import json

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
    cfg = json.loads(host.file("/models/DeepSeek-V3-EAGLE3/config.json").content_string)
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
