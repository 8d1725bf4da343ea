"""The cluster side of one shard: topology, peers, replication, gossip and catch-up.

Created by the app's lifespan. It owns the background tasks (gossip loop, hint replay, plan
file watch) and the start-up catch-up that pulls, from every peer, the versions of the keys
this shard owns that it missed while it was down (anti-entropy by version).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.concurrency import run_in_threadpool

from ..metrics import LATENCY_BUCKETS
from ..plan import ClusterPlan
from ..ring import HashRing
from ..storage.collections import CollectionConfig
from ..storage.documents import DocumentStore, Replicated
from ..storage.hints import HintLog
from ..storage.names import urn
from ..vector.catalog import VectorCatalog
from .announcer import announcements_to_publish, resident_adapters
from .documents import DistributedDocuments
from .gossip import Gossiper
from .gossip_state import GossipCodec, GossipState, RoutingView, ShardLoad
from .inference import InferenceRouting
from .migration import (
    COMPLETE_STATES,
    MigrationProgress,
    MigrationState,
    bounded_gather,
    decode_entries,
    entry_bytes,
    keys_to_purge,
    serve_page,
)
from .placement import Topology, merge_top_k
from .remote import PeerError, PeerUnavailable, RemoteExecutor
from .router import RoutingPolicy
from .settings import ClusterSettings

log = logging.getLogger(__name__)


class ClusterMetrics:
    def __init__(self, registry: CollectorRegistry, hints: HintLog) -> None:
        self.replication = Counter(
            "themis_replication_items_total",
            "Replica versions sent synchronously or kept as hints",
            ["outcome"],
            registry=registry,
        )
        self.caught_up = Counter(
            "themis_catch_up_items_total", "Versions installed by start-up catch-up", registry=registry
        )
        self.fan_out = Histogram(
            "themis_search_fan_out_seconds",
            "Cluster-wide vector search latency",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.ring_version = Gauge("themis_ring_version", "Ring version of the plan in use", registry=registry)
        self.migration_keys = Counter(
            "themis_migration_keys_total", "Keys received by resharding/catch-up", registry=registry
        )
        self.migration_bytes = Counter(
            "themis_migration_bytes_total", "Document bytes received by handoffs", registry=registry
        )
        self.migration_state = Gauge(
            "themis_migration_state",
            "Handoff state: 0 idle, 1 migrating, 2 done, 3 purged, 4 drained",
            registry=registry,
        )
        hinted = Gauge("themis_hints_pending", "Hint records waiting for a peer", ["peer"], registry=registry)
        self._hinted = hinted
        self._hints = hints

    def refresh(self) -> None:
        for peer, n in self._hints.pending().items():
            self._hinted.labels(peer=peer).set(n)


class ClusterService:
    def __init__(
        self,
        plan: ClusterPlan,
        self_id: str,
        store: DocumentStore,
        vectors: VectorCatalog,
        settings: ClusterSettings,
        registry: CollectorRegistry,
        load: Callable[[], ShardLoad] | None = None,
        plan_path=None,
    ) -> None:
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
        self.documents = DistributedDocuments(
            store, self.executor, self.hints, lambda: self._topology, self.metrics, handoff=self
        )
        self.state = GossipState.create(
            self_id,
            url=self._resolve(self_id),
            incarnation=time.time_ns() // 1_000_000,
            now=time.monotonic(),
            settings=self.settings,
        )
        for member in plan.members:
            if member.shard_id != self_id:
                self.state.add_seed(member.shard_id, member.url, time.monotonic())
        if load is not None:
            sample = load

            def load() -> ShardLoad:  # what the engine's metrics say, plus what we draft for
                return sample().model_copy(update={"draft_of": self._draft_of()})

        secret = self.settings.gossip_secret
        self.gossiper: Gossiper | None = None
        if secret is not None and self._topology.clustered:
            codec = GossipCodec(plan.cluster, secret.get_secret_value().encode())
            self.gossiper = Gossiper.from_settings(
                self.state, codec, self._gossip_transport, self.settings, load=load, registry=registry
            )
        self.view = RoutingView(self.state)
        from .prefix_routing import prefix_aware_router  # issue 7: holders of the prompt's KV prefix first

        self.router = prefix_aware_router(
            self.view,
            lambda key: self._topology.ring.owners(key, len(self._topology.ring.shards)),
            lambda: self.executor.open_peers() | self.view.dead_peers(),
            self.settings,
            registry,
        )
        #: The shard's LLMRuntime once the app started it (adapters to announce); None without LLM.
        self.runtime = None
        self.prefix_sync = None  # prefix_directory.PrefixSync, once the LLM runtime is up
        self.inference = InferenceRouting(self, registry)
        self._plan_adapters: set[str] = set()
        self._adapter_failures: dict[str, str] = {}
        self._tasks: list[asyncio.Task] = []
        self.caught_up = not self._topology.clustered
        self.migration = MigrationProgress(ring_version=plan.ring_version)
        self._handoff_complete = False
        # Small pages with a pause between them bound the handoff's share of the event loop
        # (JSON work holds the GIL): foreground requests stay fast while keys move.
        self.migration_page_size = self.settings.migration_page_size
        self.migration_page_pause_s = self.settings.migration_page_pause_s
        self.settings_migration_attempts = 3

    # -- topology ----------------------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return self._topology

    def _resolve(self, shard_id: str) -> str:
        return self._topology.url(shard_id)

    # -- speculative decoding: this shard's draft shard (issue 6) ---------------------------------

    def _draft_of(self) -> str:
        return getattr(self.runtime, "draft_of", "") if self.runtime is not None else ""

    def draft_target(self):
        """The peer to fetch drafts from (``LLMSettings.draft_shard``: an id, or "auto" = the
        least-loaded live peer gossiping ``draft_of`` = our model); None when there is none."""
        from ..llm.speculative.remote import DraftTarget
        from .draft_shard import choose_draft_shard

        if self.runtime is None:
            return None
        want = self.runtime.settings.draft_shard
        if want == "auto":
            try:
                sha = self.runtime.model(None).fingerprint.sha256
            except Exception:
                return None
            unavailable = self.executor.open_peers() | self.view.dead_peers()
            want = choose_draft_shard(
                dict(self.state.members), self_id=self.self_id, model_sha256=sha, unavailable=unavailable
            )
        if not want or want == self.self_id:
            return None
        try:
            url = self._resolve(want)
        except KeyError:
            url = self.state.members[want].url if want in self.state.members else ""
        if not url:
            return None
        return DraftTarget(
            url, peer=want, breaker=self.executor.breakers.get(want), ssl_context=self.executor.ssl_context
        )

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
        ring_changed = plan.ring_version != self._topology.version
        self._topology = Topology.of(plan, self.self_id)
        self._adapter_failures.clear()  # a new plan may have fixed a placement: try again
        self.metrics.ring_version.set(plan.ring_version)
        self.settings = self.settings.with_router(plan.router)
        self.router.set_policy(RoutingPolicy.from_settings(self.settings))
        known = set(self.state.members)
        for member in plan.members:
            if member.shard_id not in known:
                self.state.add_seed(member.shard_id, member.url, time.monotonic())
        for gone in known - {m.shard_id for m in plan.members} - {self.self_id}:
            self.state.remove_member(gone)
        if ring_changed:
            self._tasks.append(asyncio.create_task(self.migrate(), name=f"handoff-v{plan.ring_version}"))
        return True

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self.gossiper is not None:
            self._tasks.append(self.gossiper.start())
            self._tasks.append(
                asyncio.create_task(
                    self._every(self.settings.gossip_interval_s, self._announce), name="announce"
                )
            )
        self._tasks.append(asyncio.create_task(self._every(1.0, self._replay_hints), name="hint-replay"))
        self._tasks.append(asyncio.create_task(self._every(2.0, self._sync_adapters), name="plan-adapters"))
        if self.settings.breaker_health_probe_s:
            self._tasks.append(
                asyncio.create_task(
                    self._every(self.settings.breaker_health_probe_s, self._probe_open_peers),
                    name="breaker-probe",
                )
            )
        if self.plan_path:
            self._tasks.append(asyncio.create_task(self._every(1.0, self._watch_plan), name="plan-watch"))
        self._tasks.append(asyncio.create_task(self.catch_up(), name="catch-up"))
        if self._topology.clustered:  # KV-prefix directory (issue 7)
            self._tasks.append(
                asyncio.create_task(
                    self._every(self.settings.gossip_interval_s, self._prefix_refresh),
                    name="prefix-directory",
                )
            )

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

    def prefix_puller(self, llm_settings):
        """Pull-on-miss of KV prefixes, for the LLM runtime's constructor (``llm.hooks.PrefixPuller``):
        only a clustered shard with a KV-prefix cache has peers to pull from, else None."""
        if self.prefix_sync is None and self._topology.clustered and llm_settings.prefix_cache:
            from .prefix_directory import PrefixSync

            self.prefix_sync = PrefixSync(self, llm_settings)
        return self.prefix_sync

    async def _prefix_refresh(self) -> None:
        if self.runtime is None or not getattr(self.runtime.settings, "prefix_cache", False):
            return
        if self.prefix_sync is None:
            from .prefix_directory import PrefixSync

            self.prefix_sync = PrefixSync(self, self.runtime.settings)
        await self.prefix_sync.refresh()

    async def _watch_plan(self) -> None:
        self.reload_plan()

    # -- gossip ------------------------------------------------------------------------------
    async def _gossip_transport(self, peer: str, message: dict[str, Any]) -> Any:
        return await self.executor.request(
            peer,
            "POST",
            "/internal/gossip",
            json_body=message,
            retries=0,
            timeout_s=self.settings.exchange_timeout_s,
        )

    async def _sync_adapters(self) -> None:
        """Load the LoRA adapters the plan places on this shard; unload the ones it no longer does.
        (The operator only writes the plan; shards act on it — no heavy calls from the operator.)"""
        if self.runtime is None or not getattr(self.runtime, "ready", False):
            return
        wanted = {a.name: a for a in self._topology.plan.adapters if self.self_id in a.shards}
        manager = self.runtime.model(None).adapters
        loaded = {info.name: info for info in manager.list()}
        for name, placement in wanted.items():
            if name in loaded or name in self._adapter_failures:
                continue
            source = placement.source.removeprefix("file://")
            if "://" in source:
                self._adapter_failures[name] = f"unsupported adapter source {placement.source!r} (use a path)"
                log.warning("adapter %s: %s", name, self._adapter_failures[name])
                continue
            try:
                info = await manager.load(name, source, domain=placement.domain, scale=placement.scale)
            except Exception as exc:  # a bad file must not stop the shard; report and go on
                self._adapter_failures[name] = str(exc)
                log.warning("adapter %s from the plan failed to load: %s", name, exc)
                continue
            if placement.sha256 and info.sha256 != placement.sha256:
                await manager.unload(name)
                self._adapter_failures[name] = "sha256 mismatch"
                log.error(
                    "adapter %s: sha256 %s does not match the plan's %s", name, info.sha256, placement.sha256
                )
                continue
            self._plan_adapters.add(name)
            log.info("loaded adapter %s (%s) from the plan", name, placement.domain)
        for name in list(self._plan_adapters):
            if name not in wanted and name in loaded:
                await manager.unload(name)
                self._plan_adapters.discard(name)
                log.info("unloaded adapter %s: no longer placed on this shard", name)

    async def _announce(self) -> None:
        """Publish our adapters' capabilities (and withdrawals) into the gossip state."""
        if self.runtime is None:
            return
        mine = {a.adapter_id: a for a in self.state.announcements.values() if a.shard_id == self.self_id}
        for ann in announcements_to_publish(
            self.self_id, resident_adapters(self.runtime), mine, time.time(), self.settings.announcement_ttl_s
        ):
            self.state.announce(ann)

    def member_states(self) -> dict[str, str]:
        if self.gossiper is None:
            down = self.executor.open_peers()
            return {m: ("dead" if m in down else "alive") for m in self._topology.members}
        return {m: str(s) for m, s in self.state.statuses(time.monotonic()).items()}

    async def _probe_open_peers(self) -> None:
        """Close the breaker of an open peer that answers /ready again (out-of-band probe)."""
        for peer in self.executor.open_peers():
            if peer not in self._topology.members:
                continue
            try:
                r = await self.executor.client.get(f"{self._resolve(peer)}/ready", timeout=1.0)
            except Exception:  # still down: the breaker stays open
                continue
            if r.status_code == 200:
                self.executor.breakers.get(peer).record_success()
                log.info("peer %s answers again; breaker closed", peer)

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
                    await self.documents.push_replicas(peer, items, retries=0)
                except (PeerUnavailable, PeerError):
                    break
                await run_in_threadpool(self.hints.done, peer, keys)
                log.info("delivered %d hinted version(s) to %s", len(items), peer)

    # -- catch-up and resharding (cluster/migration.py) ---------------------------------------
    @property
    def handoff_active(self) -> bool:
        """True while keys may still sit on their previous owners (reads/writes look there too)."""
        return self._topology.plan.previous_ring is not None and not self._handoff_complete

    def previous_ring(self) -> HashRing | None:
        return self._topology.plan.previous_hash_ring()

    async def catch_up(self) -> None:
        """At start: pull every owned key from the peers (anti-entropy by version)."""
        try:
            await self.migrate(full=True)
        finally:
            self.caught_up = True

    async def migrate(self, full: bool = False) -> None:
        """Pull what this shard gained in the current ring (everything it owns when ``full``),
        then wait for every member to finish and purge the copies this shard lost."""
        topo = self._topology
        previous = None if full else self.previous_ring()
        progress = MigrationProgress(
            ring_version=topo.version, state=MigrationState.MIGRATING, started_at=time.time()
        )
        self.migration = progress
        self._handoff_complete = False
        self.metrics.migration_state.set(1)
        peers = set(topo.members) - {self.self_id}
        done: set[str] = set()
        attempts: dict[str, int] = {}
        while True:
            todo = peers - done - progress.unreachable
            progress.peers_pending = set(todo)
            if not todo:
                break
            ordered = sorted(todo)
            results = await bounded_gather(
                4, *(self._pull_from(p, topo, previous, progress) for p in ordered)
            )
            failed = {p for p, ok in zip(ordered, results, strict=True) if not ok}
            done |= set(ordered) - failed
            for p in failed:
                attempts[p] = attempts.get(p, 0) + 1
            newly = {p for p in failed if attempts[p] >= self.settings_migration_attempts}
            if newly:
                log.warning("handoff: %s unreachable; asking the other holders for their keys", sorted(newly))
                progress.unreachable |= newly
                done = set()
            elif failed:
                await asyncio.sleep(1.0)
        progress.state = MigrationState.DONE
        progress.finished_at = time.time()
        self.metrics.migration_state.set(2)
        log.info(
            "handoff for ring version %d: %d key(s), %d byte(s) received",
            topo.version,
            progress.keys_received,
            progress.bytes_received,
        )
        if self._topology.plan.previous_ring is not None and self._topology.version == topo.version:
            self._tasks.append(asyncio.create_task(self._finish_handoff(topo), name="handoff-finish"))

    async def _pull_from(
        self, peer: str, topo: Topology, previous: HashRing | None, progress: MigrationProgress
    ) -> bool:
        request = {
            "shard": self.self_id,
            "ring": topo.ring.spec.to_dict(),
            "previous": previous.spec.to_dict() if previous else None,
            "copies": topo.plan.copies,
            "unreachable": sorted(progress.unreachable),
            "after": None,
        }
        while True:
            try:
                page = await self.executor.request(
                    peer,
                    "POST",
                    "/internal/sync",
                    json_body=request,
                    idempotent=True,
                    retries=0,
                    timeout_s=60,
                )
            except (PeerUnavailable, PeerError) as exc:
                log.info("handoff from %s interrupted: %s", peer, exc)
                return False
            items = page["items"]
            if items:
                installed = await run_in_threadpool(self.store.apply_replicated, decode_entries(items))
                progress.keys_received += len(installed)
                progress.bytes_received += entry_bytes(items)
                self.metrics.migration_keys.inc(len(installed))
                self.metrics.migration_bytes.inc(entry_bytes(items))
            if page["next"] is None:
                return True
            request["after"] = page["next"]
            if self.migration_page_pause_s:
                await asyncio.sleep(self.migration_page_pause_s)  # rate limit: foreground first

    def serve_sync_page(self, request: dict[str, Any]) -> dict[str, Any]:
        return serve_page(self.store, self.self_id, request, self.migration_page_size)

    async def _finish_handoff(self, topo: Topology) -> None:
        """Once every member reports this ring version complete, drop the copies we lost."""
        peers = set(topo.members) - {self.self_id}
        while True:
            states = await asyncio.gather(*(self._peer_migration(p) for p in sorted(peers)))
            if all(
                s is not None and s["ring_version"] >= topo.version and s["state"] in COMPLETE_STATES
                for s in states
            ):
                break
            await asyncio.sleep(0.5)
        if self._topology.version != topo.version:
            return  # a newer ring took over; its own handoff will purge
        self._handoff_complete = True
        lost = []
        cursor = None
        while True:
            page, cursor = await run_in_threadpool(self.store.scan_page, cursor, 5000)
            gone = keys_to_purge(page, self.self_id, topo.ring, topo.plan.copies)
            if gone:
                await self._hand_over(page, set(gone), topo)
            lost += gone
            if cursor is None:
                break
        for start in range(0, len(lost), 1000):
            self.migration.keys_purged += await run_in_threadpool(
                self.store.purge, lost[start : start + 1000]
            )
        leaving = self.self_id not in topo.ring.shards
        self.migration.state = MigrationState.DRAINED if leaving else MigrationState.PURGED
        self.metrics.migration_state.set(4 if leaving else 3)
        log.info(
            "handoff for ring version %d complete: purged %d copies%s",
            topo.version,
            len(lost),
            " (drained)" if leaving else "",
        )

    async def _hand_over(self, page: list, gone: set[tuple[str, str]], topo: Topology) -> None:
        """Before dropping copies, make sure their current owners hold at least this version.
        A write that reached this shard through a coordinator still on the old plan *after* the
        new owner's pull would otherwise vanish with the purge (seen as keys left with one copy
        after a scale-in under load). Each owner is asked for its versions first (keys only) and
        sent just the entries it lacks; an owner that cannot be reached gets them as a durable
        hint."""
        per_owner: dict[str, list[Replicated]] = {}
        for e in page:
            if (e.collection, e.key) in gone:
                item = Replicated(e.collection, e.key, e.version, getattr(e, "document", None))
                for owner in topo.ring.owners(urn(e.collection, e.key), topo.plan.copies):
                    per_owner.setdefault(owner, []).append(item)
        chunks = [
            (owner, items[i : i + 500])
            for owner, items in per_owner.items()
            for i in range(0, len(items), 500)
        ]
        await bounded_gather(4, *(self._hand_over_chunk(owner, items) for owner, items in chunks))

    async def _hand_over_chunk(self, owner: str, items: list[Replicated]) -> None:
        try:
            reply = await self.executor.request(
                owner,
                "POST",
                "/internal/versions",
                json_body={"keys": [(i.collection, i.key) for i in items]},
                idempotent=True,
                retries=1,
            )
            items = [i for i, theirs in zip(items, reply["versions"], strict=True) if i.version > theirs]
        except (PeerUnavailable, PeerError, KeyError, ValueError):
            pass  # cannot compare: send them all (or hint them)
        if items:
            self.migration.keys_handed_over += len(items)
            await self.documents.send_replicas(owner, items)

    async def _peer_migration(self, peer: str) -> dict | None:
        try:
            return await self.executor.request(peer, "GET", "/internal/migration", retries=0, timeout_s=5)
        except (PeerUnavailable, PeerError):
            return None

    async def fetch_previous(self, collection: str, key: str) -> None:
        """Read-through before coordinating a write during a handoff: install the key's newest
        version from its previous owners so the new version continues from it."""
        previous = self.previous_ring()
        if previous is None:
            return
        for owner in previous.owners(urn(collection, key), self._topology.plan.copies):
            if owner == self.self_id:
                continue
            try:
                reply = await self.executor.request(
                    owner,
                    "GET",
                    f"/internal/documents/{collection}/{key}",
                    params={"tombstones": "true"},
                    retries=0,
                    timeout_s=5,
                )
            except PeerError as exc:
                if exc.status == 404:
                    continue
                continue
            except PeerUnavailable:
                continue
            await run_in_threadpool(
                self.store.apply_replicated,
                [Replicated(collection, key, int(reply["version"]), reply["document"])],
            )
            return

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

        await asyncio.gather(*(send(p) for p in self._topology.peers))

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

        lists = await asyncio.gather(local(), *(remote(p) for p in self._topology.peers))
        self.metrics.fan_out.observe(time.perf_counter() - started)
        return merge_top_k(lists, body["k"]), failed
