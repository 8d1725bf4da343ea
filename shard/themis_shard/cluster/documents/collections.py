"""Collections across the cluster: every shard declares every collection, and a vector search
asks every shard (vectors live with their documents, spread by the ring) and merges the top k.

A declaration is broadcast best-effort: a shard that misses it learns the collection from the
catch-up that pulls its keys. A search answers with what the reachable shards returned and
names the shards that failed, rather than failing the whole query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from starlette.concurrency import run_in_threadpool

from ...metrics import LATENCY_BUCKETS
from ...storage.collections import CollectionConfig
from ...storage.documents import DocumentStore
from ...vector.catalog import VectorCatalog
from ..placement.owners import merge_top_k
from ..placement.views import TopologySource
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor

log = logging.getLogger(__name__)


class ClusterCollections:
    def __init__(
        self,
        store: DocumentStore,
        vectors: VectorCatalog,
        executor: RemoteExecutor,
        topology: TopologySource,
        registry: CollectorRegistry,
    ) -> None:
        self.store = store
        self.vectors = vectors
        self.executor = executor
        self._plan = topology
        self.fan_out = Histogram(
            "themis_search_fan_out_seconds",
            "Cluster-wide vector search latency",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    async def adopt(self, config: CollectionConfig) -> None:
        """Declare a collection a peer broadcast (a no-op when it is already declared so)."""
        current = self.store.collection(config.name) if self.store.has_collection(config.name) else None
        if current == config:
            return

        def declare() -> None:
            self.vectors.declare(self.store.declare_collection(config))

        with contextlib.suppress(Exception):
            await run_in_threadpool(declare)

    async def broadcast(self, config: CollectionConfig) -> None:
        async def send(peer: str) -> None:
            await self.executor.revive(peer)  # a breaker opened while the peer was starting
            try:
                await self.executor.request(
                    peer,
                    "PUT",
                    f"/internal/collections/{config.name}",
                    json_body=config.model_dump(mode="json"),
                )
            except (PeerUnavailable, PeerError) as exc:
                log.warning(
                    "collection %s not declared on %s yet (%s); catch-up will", config.name, peer, exc
                )

        await asyncio.gather(*(send(p) for p in self._plan.topology.peers))

    async def search(
        self, collection: str, body: dict[str, Any], local: Callable[[], Awaitable[list[dict]]]
    ) -> tuple[list[dict], list[str]]:
        """Fan a search out to every shard, merge top-k; returns (results, shards that failed)."""
        started = time.perf_counter()
        failed: list[str] = []

        async def remote(peer: str) -> list[dict]:
            try:
                reply = await self.executor.request(
                    peer,
                    "POST",
                    f"/internal/collections/{collection}/search",
                    json_body=body,
                    idempotent=True,
                    retries=1,
                )
                return reply["results"]
            except PeerError as exc:
                if exc.status == 404:  # the collection is not (yet) known there: no results there
                    return []
                failed.append(peer)
                return []
            except PeerUnavailable:
                failed.append(peer)
                return []

        lists = await asyncio.gather(local(), *(remote(p) for p in self._plan.topology.peers))
        self.fan_out.observe(time.perf_counter() - started)
        return merge_top_k(lists, body["k"]), failed
