"""Chart autoscaling: an HPA on the ThemisCluster's scale subresource driven by three LLM signals
(pending requests, KV-page utilisation, TTFT p90; Prometheus Adapter rules), bounded below by the
RAID minimum; and the operator's own /metrics Service and ServiceMonitor. That the HPA really
scales a cluster: e2e/operator/test_autoscaling.py."""

from __future__ import annotations

import pytest
import yaml

from .conftest import by_kind, one

CLUSTER = {"enabled": True, "name": "demo", "spec": {"shards": 3, "raidMode": "raid5"}}
ON = {"cluster": CLUSTER, "autoscaling": {"enabled": True, "minShards": 3, "maxShards": 6}}


def test_the_hpa_scales_the_themiscluster_on_queue_depth_kv_utilisation_and_ttft(render):
    import kubernetes_validate

    docs = render(ON)
    hpa = one(docs, "HorizontalPodAutoscaler")
    kubernetes_validate.validate(hpa, "1.29", strict=True)
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "name": "demo",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (3, 6)
    targets = {m["pods"]["metric"]["name"]: m["pods"]["target"] for m in spec["metrics"]}
    assert all(m["type"] == "Pods" for m in spec["metrics"])
    assert targets == {
        "themis_pending_llm_requests": {"type": "AverageValue", "averageValue": "16"},
        "themis_llm_kv_utilization": {"type": "AverageValue", "averageValue": "0.8"},
        "themis_llm_ttft_p90_seconds": {"type": "AverageValue", "averageValue": "2"},
    }
    down = spec["behavior"]["scaleDown"]
    assert down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]  # one hand-off at a time


def test_a_signal_set_to_null_is_not_a_metric_of_the_hpa(render):
    off = {**ON["autoscaling"], "targetKVUtilization": None, "targetTTFTP90Seconds": None}
    hpa = one(render({**ON, "autoscaling": off}), "HorizontalPodAutoscaler")
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == ["themis_pending_llm_requests"]


def test_the_prometheus_adapter_rules_serve_each_signal_per_pod(render):
    rules = next(
        d
        for d in by_kind(render(ON), "ConfigMap")
        if d["metadata"]["name"].endswith("prometheus-adapter-rules")
    )
    parsed = yaml.safe_load(rules["data"]["config.yaml"])["rules"]
    assert [r["name"]["as"] for r in parsed] == [
        "themis_pending_llm_requests",
        "themis_llm_kv_utilization",
        "themis_llm_ttft_p90_seconds",
    ]
    for rule in parsed:
        assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
        assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]
    without = render({**ON, "autoscaling": {**ON["autoscaling"], "prometheusAdapter": {"rules": False}}})
    assert not [d for d in by_kind(without, "ConfigMap") if "adapter" in d["metadata"]["name"]]


def test_no_autoscaling_objects_by_default(render):
    docs = render({"cluster": CLUSTER})
    assert not by_kind(docs, "HorizontalPodAutoscaler")


@pytest.mark.parametrize(
    ("raid", "minimum"),
    [("raid1", 2), (None, 2), ("raid5", 3), ("raid6", 4)],  # None: the CRD's default, raid1
)
def test_min_shards_below_the_raid_minimum_is_refused_by_the_values_schema(helm, chart, raid, minimum):
    spec = {"shards": 4} | ({"raidMode": raid} if raid else {})
    values = {"cluster": {**CLUSTER, "spec": spec}, "autoscaling": {"enabled": True, "maxShards": 8}}
    chart.validate_schema(values | {"autoscaling": {**values["autoscaling"], "minShards": minimum}})
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values | {"autoscaling": {**values["autoscaling"], "minShards": minimum - 1}})


def test_raid0_may_scale_down_to_one_shard(chart):
    chart.validate_schema(
        {
            "cluster": {**CLUSTER, "spec": {"shards": 2, "raidMode": "raid0"}},
            "autoscaling": {"enabled": True, "minShards": 1},
        }
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"autoscaling": {"enabled": True}}, "needs cluster.enabled"),
        (
            {**ON, "autoscaling": {"enabled": True, "minShards": 5, "maxShards": 4}},
            "below autoscaling.minShards",
        ),
    ],
)
def test_autoscaling_that_cannot_work_fails_to_render(chart, values, message):
    with pytest.raises(Exception, match=message):
        chart.render(values, name="themis", namespace="themis-system", is_install=True)


def test_the_operator_serves_metrics_scraped_by_its_own_service_monitor(render):
    docs = render({"operator": {"serviceMonitor": {"enabled": True}}})
    deployment = one(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["THEMIS_OPERATOR_METRICS_PORT"] == "8082"
    assert {"name": "metrics", "containerPort": 8082, "protocol": "TCP"} in container["ports"]
    service = next(d for d in by_kind(docs, "Service") if d["metadata"]["name"].endswith("-metrics"))
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    monitor = next(
        d for d in by_kind(docs, "ServiceMonitor") if d["spec"]["endpoints"][0]["port"] == "metrics"
    )
    assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert len(by_kind(render({"serviceMonitor": {"enabled": True}}), "ServiceMonitor")) == 1  # the shards'
    off = render({"operator": {"metricsPort": 0}})
    assert not [d for d in by_kind(off, "Service") if d["metadata"]["name"].endswith("-metrics")]
