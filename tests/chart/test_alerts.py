"""The chart's PrometheusRule: the alerts the issue asks for, and rules Prometheus accepts."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from .conftest import VALUE_SETS, one


@pytest.fixture(scope="module")
def rules(render) -> dict[str, dict]:
    rule = one(render(VALUE_SETS["everything"], "everything"), "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


@pytest.mark.parametrize(
    ("alert", "metrics"),
    [
        ("ThemisShardDown", ['up{job="themis"} == 0']),
        ("ThemisShardDeclaredDead", ['themis_gossip_members{job="themis", status="dead"}']),
        ("ThemisRaidDegraded", ['themis_raid_units{job="themis", state=~"missing|corrupt"}']),
        ("ThemisRaidUnrecoverable", ["themis_raid_unrecoverable_stripes"]),
        ("ThemisRoutingFallbackSpike", ["themis_domain_routing_fallback_total", 'tier!="none"', "> 0.2"]),
        (
            "ThemisSpeculationFallbackSpike",
            ["themis_speculation_fallback_total", "themis_llm_requests_total"],
        ),
        ("ThemisLLMQueueSaturated", ["histogram_quantile(0.99", "themis_llm_queue_seconds_bucket", "> 5"]),
        ("ThemisLLMRequestsRejected", ["themis_llm_rejected_requests_total"]),
    ],
)
def test_alert_watches_what_it_is_named_after(rules, alert, metrics):
    rule = rules[alert]
    for fragment in metrics:
        assert fragment in rule["expr"], (alert, fragment, rule["expr"])
    assert rule["labels"]["severity"] in ("critical", "warning")
    assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_thresholds_and_durations_come_from_values(render):
    values = {
        "prometheusRule": {
            "enabled": True,
            "job": "tdb",
            "rules": {
                "routingFallbackSpike": {"ratio": 0.5, "for": "1m", "severity": "critical"},
                "queueSaturation": {"p99Seconds": 0.25, "for": "30s", "severity": "info"},
            },
        }
    }
    rule = one(render(values), "PrometheusRule")
    by_name = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    fallback = by_name["ThemisRoutingFallbackSpike"]
    assert fallback["expr"].rstrip().endswith("> 0.5") and fallback["for"] == "1m"
    assert fallback["labels"]["severity"] == "critical"
    assert by_name["ThemisLLMQueueSaturated"]["expr"].rstrip().endswith("> 0.25")
    assert 'up{job="tdb"}' in by_name["ThemisShardDown"]["expr"]


def test_annotations_keep_prometheus_templates(rules):
    assert "{{ $labels.instance }}" in rules["ThemisShardDown"]["annotations"]["summary"]


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (apt-get install -y prometheus)"
)
def test_promtool_accepts_the_rules(render, tmp_path):
    rule = one(render(VALUE_SETS["everything"], "everything"), "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout
