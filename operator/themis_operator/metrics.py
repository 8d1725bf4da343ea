"""The operator's own Prometheus metrics: how often it reconciles, how long that takes, and
how often it fails (``/metrics`` on ``THEMIS_OPERATOR_METRICS_PORT``).

One :class:`OperatorMetrics` per process, built at start-up and kept in kopf's memo (no global
registry), so tests can build as many as they like.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector

_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # process_* (CPU, memory, open fds) and python_* (GC, version), like every shard's registry
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.reconciles = Counter(
            "themis_operator_reconciles_total",
            "Reconciles by resource kind, trigger and result (ok / error)",
            ["kind", "trigger", "result"],
            registry=self.registry,
        )
        self.errors = Counter(
            "themis_operator_reconcile_errors_total",
            "Failed reconciles by resource kind and exception type",
            ["kind", "error"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "themis_operator_reconcile_duration_seconds",
            "Reconcile duration by resource kind and trigger",
            ["kind", "trigger"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.degraded = Gauge(
            "themis_operator_cluster_degraded",
            "1 while a ThemisCluster's Degraded condition is True",
            ["namespace", "cluster"],
            registry=self.registry,
        )

    @contextmanager
    def reconcile(self, kind: str, trigger: str) -> Iterator[None]:
        """Count and time one reconcile; an exception is counted and re-raised (kopf retries)."""
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            self.reconciles.labels(kind=kind, trigger=trigger, result="error").inc()
            self.errors.labels(kind=kind, error=type(exc).__name__).inc()
            raise
        else:
            self.reconciles.labels(kind=kind, trigger=trigger, result="ok").inc()
        finally:
            self.duration.labels(kind=kind, trigger=trigger).observe(time.perf_counter() - started)

    def observe_status(self, namespace: str, cluster: str, status: dict) -> None:
        degraded = any(
            c.get("type") == "Degraded" and c.get("status") == "True" for c in status.get("conditions") or ()
        )
        self.degraded.labels(namespace=namespace, cluster=cluster).set(int(degraded))

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        with suppress(KeyError):
            self.degraded.remove(namespace, cluster)

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        start_http_server(port, addr=host, registry=self.registry)
