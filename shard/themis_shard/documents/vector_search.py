"""Vector search over a collection, scatter-gathered across the cluster: the one search that
``/v1/collections/{c}/search`` and ``/v1/rag`` run."""

from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool

from ..cluster.service import ClusterService
from ..metrics import ShardMetrics
from ..storage.names import urn
from ..vector.catalog import VectorCatalog, check_vector
from ..vector.filters import validate_filter


async def vector_search(
    vectors: VectorCatalog,
    cluster: ClusterService,
    metrics: ShardMetrics,
    collection: str,
    vector: list[float],
    k: int,
    filter_: dict[str, Any] | None,
) -> tuple[list[dict], list[str]]:
    """``[{"urn", "score", "document", "version", "hlc"}]`` best first, and the shards that did not answer.
    Refuses (4xx) a collection without a vector index, a vector of the wrong dimension and a
    malformed filter before any shard is asked."""
    index = vectors.index(collection)
    check_vector(vector, index.dimension)

    async def local() -> list[dict]:
        started = time.perf_counter()
        hits = await run_in_threadpool(vectors.search, collection, vector, k, filter_)
        metrics.vector_searches.labels(index=index.kind).inc()
        metrics.vector_search_latency.labels(index=index.kind).observe(time.perf_counter() - started)
        return [
            {"urn": urn(collection, d.key), "score": h.score, "document": d.document}
            | {"version": d.version, "hlc": d.hlc}
            for h, d in hits
        ]

    if not cluster.topology.clustered:
        return await local(), []
    validate_filter(filter_)
    return await cluster.search(collection, {"vector": vector, "k": k, "filter": filter_}, local)
