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
        ("ThemisShardStorageUnwritable", ['themis_storage_writable{job="themis"}', "== 0"]),
        ("ThemisRaidUnrecoverable", ["themis_raid_unrecoverable_stripes"]),
        ("ThemisRoutingFallbackSpike", ["themis_domain_routing_fallback_total", 'tier!="none"', "> 0.2"]),
        (
            "ThemisSpeculationFallbackSpike",
            ["themis_speculation_fallback_total", "themis_llm_requests_total"],
        ),
        ("ThemisLLMQueueSaturated", ["histogram_quantile(0.99", "themis_llm_queue_seconds_bucket", "> 5"]),
        ("ThemisLLMRequestsRejected", ["themis_llm_rejected_requests_total"]),
        ("ThemisHintsDropped", ["themis_hints_dropped_total"]),
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
    assert "SUCCESS: 10 rules found" in done.stdout


# ---- the alerts fire when they should (promtool test rules on synthetic series) -------------------
def series(metric: str, values: str, instance: str = "shard-1:8080", **labels: str) -> dict:
    extra = "".join(f', {k}="{v}"' for k, v in labels.items())
    return {
        "series": f'{metric}{{job="themis", instance="{instance}", namespace="prod"{extra}}}',
        "values": values,
    }


SERIES = [
    # shard-0 stops answering scrapes after 1 minute; shard-1 stays up.
    series("up", "1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0", instance="shard-0:8080"),
    series("up", "1+0x16"),
    # Two units go missing at minute 2 and stay missing; ok units are not a degradation.
    series("themis_raid_units", "0 0 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2", state="missing"),
    series("themis_raid_units", "40+0x16", instance="shard-0:8080", state="ok"),
    # shard-1's disk refuses writes from minute 3 to minute 9, then takes them again.
    series("themis_storage_writable", "1 1 1 0 0 0 0 0 0 1 1 1 1 1 1 1 1"),
    series("themis_storage_writable", "1+0x16", instance="shard-0:8080"),
    # Half of the domain-hinted decisions fall back; un-hinted ("none") traffic does not dilute it.
    series("themis_domain_routing_fallback_total", "0+30x16"),
    series("themis_domain_routing_decisions_total", "0+30x16", tier="fallback"),
    series("themis_domain_routing_decisions_total", "0+30x16", tier="1"),
    series("themis_domain_routing_decisions_total", "0+6000x16", tier="none"),
    # Speculation falls back for half of the finished requests.
    series("themis_speculation_fallback_total", "0+10x16"),
    series("themis_llm_requests_total", "0+20x16", finish_reason="length"),
    # Every request waits between 1 s and 10 s for admission: p99 ≈ 9.9 s > 5 s.
    series("themis_llm_queue_seconds_bucket", "0+0x16", le="1"),
    series("themis_llm_queue_seconds_bucket", "0+10x16", le="10"),
    series("themis_llm_queue_seconds_bucket", "0+10x16", le="+Inf"),
]


def expect(alert: str, minute: int, *labels: dict) -> dict:
    return {
        "eval_time": f"{minute}m",
        "alertname": alert,
        "exp_alerts": [{"exp_labels": lb} for lb in labels],
    }


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (apt-get install -y prometheus)"
)
def test_alerts_fire_on_synthetic_series_and_not_before_their_for(render, tmp_path):
    rule = one(render(VALUE_SETS["everything"], "everything"), "PrometheusRule")
    groups = rule["spec"]["groups"]
    for group in groups:  # expressions and `for` are under test; annotation texts are not
        for r in group["rules"]:
            r.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shard0 = {"job": "themis", "instance": "shard-0:8080", "namespace": "prod"}
    checks = [
        expect("ThemisShardDown", 2),  # down for 1m of its 2m
        expect("ThemisShardDown", 4, {**shard0, "severity": "critical"}),
        expect("ThemisRaidDegraded", 6),
        expect(
            "ThemisRaidDegraded", 8, {"namespace": "prod", "instance": "shard-1:8080", "severity": "warning"}
        ),
        expect("ThemisRoutingFallbackSpike", 8),
        expect("ThemisRoutingFallbackSpike", 16, {"namespace": "prod", "severity": "warning"}),
        expect("ThemisSpeculationFallbackSpike", 16, {"namespace": "prod", "severity": "warning"}),
        expect(
            "ThemisLLMQueueSaturated",
            12,
            {"namespace": "prod", "instance": "shard-1:8080", "severity": "warning"},
        ),
        expect("ThemisLLMRequestsRejected", 12),
        expect("ThemisRaidUnrecoverable", 12),
        expect("ThemisShardStorageUnwritable", 3),  # unwritable for less than its 1m
        expect(
            "ThemisShardStorageUnwritable",
            5,
            {"namespace": "prod", "instance": "shard-1:8080", "severity": "critical"},
        ),
        expect("ThemisShardStorageUnwritable", 11),  # writable again
    ]
    spec = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": SERIES, "alert_rule_test": checks}],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(spec))
    done = subprocess.run(
        ["promtool", "test", "rules", "tests.yaml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
