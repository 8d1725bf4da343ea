"""Prometheus metrics of one shard, on the shard's own registry (no global state).

Names follow ARCHITECTURE.md §4: ``themis_`` prefix, base units, histograms rather than
precomputed quantiles. Other parts (engine, cluster, RAID) register their metrics on the same
``registry`` so ``/metrics`` shows them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
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
        self._op_children: dict[str, Counter] = {}
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

    def record_document_ops(self, op: str, n: int = 1) -> None:
        """``n`` document operations of kind ``op`` (its child looked up once per kind)."""
        child = self._op_children.get(op)
        if child is None:
            child = self._op_children[op] = self.document_ops.labels(op=op)
        child.inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class StoreSizes:
    """``themis_documents`` and ``themis_vectors`` by collection, read when scraped: every copy
    the shard holds is counted (a replica's too), and a write does no gauge bookkeeping."""

    def __init__(
        self,
        collections: Callable[[], Iterable[str]],
        documents: Callable[[str], int],
        vectors: Callable[[str], int],
    ) -> None:
        self._collections = collections
        self._documents = documents
        self._vectors = vectors

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # sizes are read at each scrape; nothing to call on registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        documents = GaugeMetricFamily(
            "themis_documents", "Documents stored on this shard by collection", labels=["collection"]
        )
        vectors = GaugeMetricFamily("themis_vectors", "Vectors indexed by collection", labels=["collection"])
        for name in self._collections():
            documents.add_metric([name], self._documents(name))
            vectors.add_metric([name], self._vectors(name))
        yield documents
        yield vectors
