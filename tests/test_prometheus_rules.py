"""examples/prometheus/alerts.yml, checked and unit-tested by Debian's promtool.

The rules use only series the role's textfile writes (tests/unit/plugins/module_utils/test_live_metrics.py renders
it) and SGLang's own sglang:spec_accept_length; alerts_test.yml feeds them series and
states which alerts fire, with which labels and annotations.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import yaml

from conftest import MODULE_UTILS_DIR, REPO

RULES = REPO / "examples" / "prometheus" / "alerts.yml"
RULES_TEST = REPO / "examples" / "prometheus" / "alerts_test.yml"


def test_promtool_check_rules(promtool):
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 9 rules found" in proc.stdout


def test_promtool_test_rules(promtool):
    proc = promtool("test", "rules", str(RULES_TEST))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_has_a_test_and_uses_metrics_the_textfile_writes():
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    tested = {t["alertname"] for case in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert {r["alert"] for r in rules} == tested
    spec = importlib.util.spec_from_file_location("sglang_metrics", MODULE_UTILS_DIR / "_metrics.py")
    metrics = importlib.util.module_from_spec(spec)
    sys.modules["sglang_metrics"] = metrics
    spec.loader.exec_module(metrics)
    text = metrics.render(dict(compliant=True, release="0.5.9", decision="patch", family="body_a_loop",
                               draft_ids=[-1, 2, 30], mode="audit", classes=[], accept_length_min=2.5,
                               live={"read": True, "accept_length_probe": 3.5, "settings": {}},
                               restarts_total=0, last_run=1.0, last_success=1.0))
    written = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    used = {m for r in rules for m in re.findall(r"\b(sglang_remediation_\w+)", r["expr"])}
    assert used and used <= written, used - written
    timer_used = {m for r in rules for m in re.findall(r"\b(sglang_audit_timer_\w+)", r["expr"])}
    from ansible_collections.fleetops.sglang.plugins.module_utils import _hostaudit
    beat = _hostaudit.heartbeat({"now": 1.0, "outcome": "audited", "cpu_seconds": 0.5, "interval": 900, "jitter": 120})
    assert timer_used and timer_used <= set(re.findall(r"^# TYPE (\S+) ", beat, re.M)), timer_used


def test_every_alert_has_a_runbook_in_the_guide_and_a_summary_that_says_what_to_run():
    guide = (REPO / "docs" / "docsite" / "rst" / "guide_live_metrics.rst").read_text()
    lines = guide.splitlines()
    # A section title is a line followed by its underline; GitHub anchors it by its lowercased text.
    titles = {lines[i].strip().lower() for i in range(len(lines) - 1)
              if lines[i].strip() and set(lines[i + 1].strip()) <= set("=-~^") and len(lines[i + 1].strip()) >= 3}
    base = "https://github.com/fleetops/sglang-remediation/blob/main/docs/docsite/rst/guide_live_metrics.rst#"
    for rule in (r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]):
        url = rule["annotations"]["runbook_url"]
        assert url == base + rule["alert"].lower() and rule["alert"].lower() in titles, rule["alert"]
        assert "; run " in rule["annotations"]["summary"], rule["alert"]
