"""The custom metrics API's rules: the chart's Prometheus Adapter config, read as the adapter reads it."""

from __future__ import annotations

import pytest
from themis_testing.autoscaler.metrics_adapter import (
    metric_value_list,
    parse_rules,
    pod_matchers,
    quantity,
    render_query,
)

CONFIG = """
rules:
  - seriesQuery: 'themis_llm_ttft_seconds_bucket{namespace!="",pod!=""}'
    resources:
      overrides:
        namespace: {resource: namespace}
        kubernetes_pod: {resource: pod}
    name:
      matches: ^themis_llm_ttft_seconds_bucket$
      as: themis_llm_ttft_p90_seconds
    metricsQuery: >-
      histogram_quantile(0.9, sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (le, <<.GroupBy>>))
  - seriesQuery: 'themis_pending_llm_requests'
    metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"""


def test_a_rule_names_its_metric_by_matches_and_as_or_keeps_the_series_name():
    ttft, pending = parse_rules(CONFIG)
    assert ttft.metric_name("themis_llm_ttft_seconds_bucket") == "themis_llm_ttft_p90_seconds"
    assert ttft.metric_name("themis_llm_queue_seconds_bucket") is None
    assert pending.metric_name("themis_pending_llm_requests") == "themis_pending_llm_requests"


def test_the_metrics_query_gets_the_series_the_pods_of_the_namespace_and_the_pod_label():
    ttft, _ = parse_rules(CONFIG)
    query = render_query(
        ttft.metrics_query,
        "themis_llm_ttft_seconds_bucket",
        pod_matchers(ttft, "ns1", ["demo-1", "demo-0"]),
        ttft.resource_labels["pod"],
    )
    assert query == (
        'histogram_quantile(0.9, sum(rate(themis_llm_ttft_seconds_bucket{namespace="ns1",'
        'kubernetes_pod=~"demo-0|demo-1"}[2m])) by (le, kubernetes_pod))'
    )


def test_a_template_field_the_adapter_would_fill_but_we_do_not_is_refused_by_name():
    with pytest.raises(ValueError, match=r"\.GroupBySlice"):
        render_query("<<.GroupBySlice>>", "s", "m", "pod")


def test_values_are_kubernetes_quantities_in_milli_units():
    assert [quantity(v) for v in (16, 0.8, 2.5, 0.0004)] == ["16", "800m", "2500m", "0"]
    body = metric_value_list("ns1", "m", {"demo-0": 1.5}, "2026-12-03T00:00:00Z")
    assert body["items"][0]["describedObject"] == {
        "kind": "Pod",
        "namespace": "ns1",
        "name": "demo-0",
        "apiVersion": "/v1",
    }
    assert body["items"][0]["value"] == "1500m"
