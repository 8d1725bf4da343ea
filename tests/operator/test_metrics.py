"""The operator's /metrics: reconcile counts by result, errors by type, durations."""

import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from themis_operator.metrics import OperatorMetrics


def value(m: OperatorMetrics, name: str, **labels) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_reconciles_are_counted_timed_and_failures_named():
    m = OperatorMetrics(CollectorRegistry())
    with m.reconcile("ThemisCluster", "timer"):
        pass
    with pytest.raises(ValueError), m.reconcile("ThemisCluster", "update"):
        raise ValueError("boom")
    assert (
        value(m, "themis_operator_reconciles_total", kind="ThemisCluster", trigger="timer", result="ok") == 1
    )
    assert (
        value(m, "themis_operator_reconciles_total", kind="ThemisCluster", trigger="update", result="error")
        == 1
    )
    assert value(m, "themis_operator_reconcile_errors_total", kind="ThemisCluster", error="ValueError") == 1
    count = "themis_operator_reconcile_duration_seconds_count"
    assert value(m, count, kind="ThemisCluster", trigger="timer") == 1


def test_degraded_clusters_are_a_gauge_that_goes_with_the_cluster():
    m = OperatorMetrics(CollectorRegistry())
    m.observe_status("ns", "demo", {"conditions": [{"type": "Degraded", "status": "True"}]})
    assert value(m, "themis_operator_cluster_degraded", namespace="ns", cluster="demo") == 1
    m.forget_cluster("ns", "demo")
    m.forget_cluster("ns", "demo")  # twice is fine
    assert (
        m.registry.get_sample_value(
            "themis_operator_cluster_degraded", {"namespace": "ns", "cluster": "demo"}
        )
        is None
    )


def test_metrics_are_served_over_http():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = OperatorMetrics(CollectorRegistry())
    with m.reconcile("LoRAAdapter", "change"):
        pass
    m.serve(port, host="127.0.0.1")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'themis_operator_reconciles_total{kind="LoRAAdapter",result="ok",trigger="change"} 1.0' in text
    assert "process_resident_memory_bytes" in text and "python_info" in text
