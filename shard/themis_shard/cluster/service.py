"""The cluster side of one shard: topology, peers, replication, gossip and catch-up.

Created by the app's lifespan. It owns the background tasks (gossip loop, hint replay, plan
file watch) and the start-up catch-up that pulls, from every peer, the versions of the keys
this shard owns that it missed while it was down (anti-entropy by version).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.concurrency import run_in_threadpool

from ..metrics import LATENCY_BUCKETS
from ..plan import ClusterPlan
from ..storage.collections import CollectionConfig
from ..storage.documents import DocumentStore, Replicated
from ..storage.hints import HintLog, encode_items
from ..vector.catalog import VectorCatalog
from .documents import DistributedDocuments
from .gossip import Gossiper
from .gossip_state import GossipCodec, GossipState, ShardLoad
from .placement import Topology, merge_top_k
from .remote import PeerError, PeerUnavailable, RemoteExecutor
from .settings import ClusterSettings

log = logging.getLogger(__name__)

SYNC_CHUNK = 1000


class ClusterMetrics:
    def __init__(self, registry: CollectorRegistry, hints: HintLog) -> None:
        self.replication = Counter("themis_replication_items_total",
                                   "Replica versions sent synchronously or kept as hints", ["outcome"],
                                   registry=registry)
        self.caught_up = Counter("themis_catch_up_items_total", "Versions installed by start-up catch-up",
                                 registry=registry)
        self.fan_out = Histogram("themis_search_fan_out_seconds", "Cluster-wide vector search latency",
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.ring_version = Gauge("themis_ring_version", "Ring version of the plan in use", registry=registry)
        hinted = Gauge("themis_hints_pending", "Hint records waiting for a peer", ["peer"], registry=registry)
        self._hinted = hinted
        self._hints = hints

    def refresh(self) -> None:
        for peer, n in self._hints.pending().items():
            self._hinted.labels(peer=peer).set(n)


class ClusterService:
    def __init__(self, plan: ClusterPlan, self_id: str, store: DocumentStore, vectors: VectorCatalog,
                 settings: ClusterSettings, registry: CollectorRegistry,
                 load: Callable[[], ShardLoad] | None = None, plan_path=None) -> None:
        self.settings = settings.with_router(plan.router)
        self.self_id = self_id
        self.store = store
        self.vectors = vectors
        self.plan_path = plan_path
        self._topology = Topology.of(plan, self_id)
        self._plan_mtime = self._mtime()
        self.hints = HintLog(store)
        self.metrics = ClusterMetrics(registry, self.hints)
        self.metrics.ring_version.set(plan.ring_version)
        self.executor = RemoteExecutor(self.settings, self._resolve, registry=registry)
        self.documents = DistributedDocuments(store, self.executor, self.hints, lambda: self._topology, self.metrics)
        self.state = GossipState.create(self_id, url=self._resolve(self_id), incarnation=time.time_ns() // 1_000_000,
                                        now=time.monotonic(), settings=self.settings)
        for member in plan.members:
            if member.shard_id != self_id:
                self.state.add_seed(member.shard_id, member.url, time.monotonic())
        secret = self.settings.gossip_secret
        self.gossiper: Gossiper | None = None
        if secret is not None and self._topology.clustered:
            codec = GossipCodec(plan.cluster, secret.get_secret_value().encode())
            self.gossiper = Gossiper.from_settings(self.state, codec, self._gossip_transport, self.settings,
                                                   load=load, registry=registry)
        self._tasks: list[asyncio.Task] = []
        self.caught_up = not self._topology.clustered

    # -- topology ----------------------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return self._topology

    def _resolve(self, shard_id: str) -> str:
        return self._topology.url(shard_id)

    def _mtime(self) -> float | None:
        try:
            return self.plan_path.stat().st_mtime if self.plan_path else None
        except OSError:
            return None

    def reload_plan(self) -> bool:
        """Adopt a changed plan file; True when the plan changed."""
        mtime = self._mtime()
        if mtime is None or mtime == self._plan_mtime:
            return False
        self._plan_mtime = mtime
        try:
            plan = ClusterPlan.load(self.plan_path)
        except Exception as exc:  # a half-written or invalid plan is ignored, the old one kept
            log.warning("ignoring unreadable plan %s: %s", self.plan_path, exc)
            return False
        if plan == self._topology.plan:
            return False
        log.info("plan changed: ring version %d → %d", self._topology.version, plan.ring_version)
        self._topology = Topology.of(plan, self.self_id)
        self.metrics.ring_version.set(plan.ring_version)
        known = set(self.state.members)
        for member in plan.members:
            if member.shard_id not in known:
                self.state.add_seed(member.shard_id, member.url, time.monotonic())
        for gone in known - {m.shard_id for m in plan.members} - {self.self_id}:
            self.state.remove_member(gone)
        return True

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self.gossiper is not None:
            self._tasks.append(self.gossiper.start())
        self._tasks.append(asyncio.create_task(self._every(1.0, self._replay_hints), name="hint-replay"))
        if self.plan_path:
            self._tasks.append(asyncio.create_task(self._every(1.0, self._watch_plan), name="plan-watch"))
        self._tasks.append(asyncio.create_task(self.catch_up(), name="catch-up"))

    async def stop(self) -> None:
        if self.gossiper is not None:
            await self.gossiper.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.executor.aclose()

    @staticmethod
    async def _every(seconds: float, job: Callable[[], Awaitable[Any]]) -> None:
        while True:
            try:
                await job()
            except Exception:
                log.exception("background job %s failed", getattr(job, "__name__", job))
            await asyncio.sleep(seconds)

    async def _watch_plan(self) -> None:
        self.reload_plan()

    # -- gossip ------------------------------------------------------------------------------
    async def _gossip_transport(self, peer: str, message: dict[str, Any]) -> Any:
        return await self.executor.request(peer, "POST", "/internal/gossip", json_body=message, retries=0,
                                           timeout_s=self.settings.exchange_timeout_s)

    def member_states(self) -> dict[str, str]:
        if self.gossiper is None:
            down = self.executor.open_peers()
            return {m: ("dead" if m in down else "alive") for m in self._topology.members}
        return {m: str(s) for m, s in self.state.statuses(time.monotonic()).items()}

    # -- hinted handoff ----------------------------------------------------------------------
    async def _replay_hints(self) -> None:
        self.metrics.refresh()
        for peer in self.hints.peers():
            if peer not in self._topology.members or peer in self.executor.open_peers():
                continue
            while True:
                keys, items = await run_in_threadpool(self.hints.take, peer, 100)
                if not keys:
                    break
                try:
                    await self.executor.request(peer, "POST", "/internal/replicate",
                                                json_body={"items": encode_items(items)}, idempotent=True, retries=0)
                except (PeerUnavailable, PeerError):
                    break
                await run_in_threadpool(self.hints.done, peer, keys)
                log.info("delivered %d hinted version(s) to %s", len(items), peer)

    # -- catch-up (anti-entropy by version) ----------------------------------------------------
    async def catch_up(self) -> None:
        """Pull from every peer the collections and the versions of keys this shard owns."""
        try:
            await asyncio.gather(*(self._catch_up_from(peer) for peer in self._topology.peers))
        finally:
            self.caught_up = True

    async def _catch_up_from(self, peer: str) -> None:
        try:
            configs = await self.executor.request(peer, "GET", "/internal/collections", retries=0)
            for raw in configs["collections"]:
                await self.adopt_collection(CollectionConfig.model_validate(raw))
            body = await self.executor.request(peer, "GET", "/internal/sync", params={"shard": self.self_id},
                                               expect="bytes", retries=0, timeout_s=120)
        except (PeerUnavailable, PeerError) as exc:
            log.info("catch-up from %s skipped: %s", peer, exc)
            return
        items = [Replicated(d["collection"], d["key"], int(d["version"]), d.get("document"))
                 for d in map(json.loads, body.splitlines()) if d]
        installed = 0
        for start in range(0, len(items), SYNC_CHUNK):
            installed += len(await run_in_threadpool(self.store.apply_replicated, items[start:start + SYNC_CHUNK]))
        self.metrics.caught_up.inc(installed)
        if installed:
            log.info("caught up %d version(s) from %s", installed, peer)

    def sync_lines(self, shard: str) -> list[bytes]:
        """NDJSON of every version (tombstones too) this shard holds that ``shard`` owns."""
        topo = self._topology
        lines = []
        for doc in self.store.scan_all():
            if topo.owns(shard, doc.collection, doc.key):
                lines.append(json.dumps(encode_items([Replicated(doc.collection, doc.key, doc.version,
                                                                 doc.document)])[0]).encode())
        return lines

    # -- collections and search ----------------------------------------------------------------
    async def adopt_collection(self, config: CollectionConfig) -> None:
        current = self.store.collection(config.name) if self.store.has_collection(config.name) else None
        if current == config:
            return

        def declare() -> None:
            self.vectors.declare(self.store.declare_collection(config))

        with contextlib.suppress(Exception):
            await run_in_threadpool(declare)

    async def broadcast_collection(self, config: CollectionConfig) -> None:
        async def send(peer: str) -> None:
            try:
                await self.executor.request(peer, "PUT", f"/internal/collections/{config.name}",
                                            json_body=config.model_dump(mode="json"))
            except (PeerUnavailable, PeerError) as exc:
                log.warning("collection %s not declared on %s yet (%s); catch-up will", config.name, peer, exc)

        await asyncio.gather(*(send(p) for p in self._topology.peers))

    async def search(self, collection: str, body: dict[str, Any], local: Callable[[], Awaitable[list[dict]]]
                     ) -> tuple[list[dict], list[str]]:
        """Fan a search out to every shard, merge top-k; returns (results, shards that failed)."""
        started = time.perf_counter()
        failed: list[str] = []

        async def remote(peer: str) -> list[dict]:
            try:
                reply = await self.executor.request(peer, "POST", f"/internal/collections/{collection}/search",
                                                    json_body=body, idempotent=True, retries=1)
                return reply["results"]
            except PeerError as exc:
                if exc.status == 404:  # the collection is not (yet) known there: no results there
                    return []
                failed.append(peer)
                return []
            except PeerUnavailable:
                failed.append(peer)
                return []

        lists = await asyncio.gather(local(), *(remote(p) for p in self._topology.peers))
        self.metrics.fan_out.observe(time.perf_counter() - started)
        return merge_top_k(lists, body["k"]), failed

