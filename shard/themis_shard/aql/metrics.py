"""AQL metrics on the shard's registry (ARCHITECTURE.md §4 names and units)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from ..metrics import LATENCY_BUCKETS


class AqlMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.queries = Counter(
            "themis_aql_queries_total",
            "AQL statements by kind (read, write, infer, embed, rag, explain) and outcome "
            "(ok, rejected, failed)",
            ["kind", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "themis_aql_query_duration_seconds",
            "AQL statement latency, parse to result",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.rows_scanned = Counter(
            "themis_aql_rows_scanned_total",
            "Rows read by AQL scans, lookups and index searches",
            registry=registry,
        )
