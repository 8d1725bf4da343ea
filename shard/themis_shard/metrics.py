"""Prometheus metrics of one shard, on the shard's own registry (no global state).

Names follow ARCHITECTURE.md §4: ``themis_`` prefix, base units, histograms rather than
precomputed quantiles. Other parts (engine, cluster, RAID) register their metrics on the same
``registry`` so ``/metrics`` shows them all.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ShardMetrics:
    def __init__(self, shard_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # process_* (CPU, RSS, open fds), python_gc_* and python_info, as every Prometheus
        # exporter has them; on this registry, not the library's global default one.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.info = Gauge(
            "themis_shard_info", "Constant 1, labelled with the shard id", ["shard_id"], registry=r
        )
        self.info.labels(shard_id=shard_id).set(1)
        self.http_requests = Counter(
            "themis_http_requests_total",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=r,
        )
        self._request_children: dict[tuple[str, str, int], tuple] = {}
        self.http_latency = Histogram(
            "themis_http_request_duration_seconds",
            "HTTP request latency by route",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.document_ops = Counter(
            "themis_document_operations_total", "Document operations by kind", ["op"], registry=r
        )
        self.transactions = Counter(
            "themis_transactions_total",
            "Transactions by outcome (committed, conflict)",
            ["outcome"],
            registry=r,
        )
        self.commit_latency = Histogram(
            "themis_storage_commit_seconds",
            "Durable (synced) commit latency",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.documents = Gauge(
            "themis_documents", "Documents stored on this shard by collection", ["collection"], registry=r
        )
        self.vector_searches = Counter(
            "themis_vector_searches_total", "Vector searches by index type", ["index"], registry=r
        )
        self.vector_search_latency = Histogram(
            "themis_vector_search_seconds",
            "Local vector search latency",
            ["index"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.vectors = Gauge("themis_vectors", "Vectors indexed by collection", ["collection"], registry=r)
        self.storage_writable = Gauge(
            "themis_storage_writable",
            "1 while this shard's disk takes writes; 0 from a write refused for lack of space or an "
            "IO error until a probe write succeeds (the shard is unready meanwhile)",
            registry=r,
        )

    def record_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """One answered request, by route template (bounded label values). The labelled
        children are looked up once per (method, route, status): ``labels()`` costs more than
        ``inc()`` and this runs on every request."""
        found = self._request_children.get((method, route, status))
        if found is None:
            found = self._request_children[(method, route, status)] = (
                self.http_requests.labels(method=method, route=route, status=str(status)),
                self.http_latency.labels(method=method, route=route),
            )
        found[0].inc()
        found[1].observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
