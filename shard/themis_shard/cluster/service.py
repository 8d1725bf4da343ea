"""The cluster side of one shard: a façade over the parts that make a shard a cluster member.

Created by the app's lifespan. The parts, each with its own background tasks:

* ``Membership`` (membership/) — gossip, member states, breaker probes, the draft shard;
* ``PlanWatcher`` (plan_watcher.py) — plan file reload, router settings, adapter placement;
* ``Handoff`` (placement/migration.py) — start-up catch-up and the resharding state machine;
* ``Replication`` (replication/delivery.py) + ``DistributedDocuments``
  (documents/coordinator.py) — routed reads and writes, synchronous replication with hinted
  handoff, hint replay;
* ``ClusterCollections`` (documents/collections.py) — collection declarations and vector search fan-out;
* ``Transactions`` (transactions/) — two-phase commit of cross-shard transactions and its
  recovery (in-doubt intents, logged commits re-driven).

They share no attributes: each gets what it needs in its constructor; the current topology and
settings are read from one ``LivePlan`` that only the plan watcher swaps. Request handlers and
the app reach the parts through the attributes and methods below.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from themis_core.plan import ClusterPlan
from themis_core.ring import HashRing
from themis_core.tracing import Spans

from ..llm.fetch import SourceFetcher
from ..llm.settings import LLMSettings
from ..storage.collections import CollectionConfig
from ..storage.digests import RecordDigests
from ..storage.documents import DocumentStore
from ..storage.hints import HintLog
from ..storage.inflight import InflightLog
from ..vector.catalog import VectorCatalog
from .documents.collections import ClusterCollections
from .documents.coordinator import DistributedDocuments
from .membership.gossip_state import ShardLoad
from .membership.members import Membership
from .placement.migration import Handoff, MigrationProgress
from .placement.owners import Topology
from .placement.views import LivePlan, RuntimeSlot
from .plan_watcher import PlanWatcher
from .replication.anti_entropy import AntiEntropy
from .replication.delivery import Replication
from .replication.fencing import KeyLocks
from .replication.lease import AuthorityLease
from .replication.tombstone_gc import TombstoneGC
from .routing.inference import InferenceRouting
from .routing.prefix_directory import PrefixSync
from .routing.prefix_routing import PrefixRoutingPolicy, prefix_aware_router, prefix_target
from .security.peer_auth import InternalAuthPolicy, PeerAuth
from .settings import ClusterSettings
from .tasks import Tasks
from .transactions.service import Transactions
from .transactions.settings import TxnSettings
from .transport.remote import RemoteExecutor

log = logging.getLogger(__name__)


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
        plan_path: Path | None = None,
        prefix: LLMSettings | None = None,
        fetcher: SourceFetcher | None = None,
        txn: TxnSettings | None = None,
        spans: Spans | None = None,
    ) -> None:
        """``prefix``: the LLM settings when this shard runs an engine (its KV-prefix cache);
        ``fetcher``: downloads the plan's http(s) adapter sources; ``txn``: two-phase commit;
        ``spans``: where the peer calls' spans go (``tracing.Spans``)."""
        self.self_id = self_id
        self.store = store
        self.vectors = vectors
        self.plan_path = plan_path
        self.live = LivePlan(Topology.of(plan, self_id), settings.with_router(plan.router))
        self._runtime = RuntimeSlot()
        self.hints = HintLog(store)
        secret = settings.gossip_secret.get_secret_value() if settings.gossip_secret else None
        self.executor = RemoteExecutor(
            self.live.settings,
            self.live.url,
            registry=registry,
            auth=PeerAuth(secret, self_id) if secret else None,
            spans=spans,
        )
        #: what ``/internal/...`` demands of a caller (``api.middleware.InternalAuth`` checks it)
        self.internal_auth = InternalAuthPolicy.of(settings)
        self.replication = Replication(
            self.executor,
            self.hints,
            self.live,
            registry,
            hint_budget_bytes=self.live.settings.hint_budget_bytes,
        )
        self.handoff = Handoff(
            self_id,
            store,
            self.executor,
            self.live,
            self.replication,
            registry,
            page_size=self.live.settings.migration_page_size,
            page_pause_s=self.live.settings.migration_page_pause_s,
            finish_timeout_s=self.live.settings.migration_finish_timeout_s,
        )
        #: per-range digests and tombstones, kept current as writes are staged
        self.digests = RecordDigests(store)
        self.anti_entropy = AntiEntropy(
            self_id,
            store,
            self.digests,
            self.executor,
            self.live,
            self.replication,
            registry,
            interval_s=self.live.settings.anti_entropy_interval_s,
        )
        self.tombstone_gc = TombstoneGC(
            store,
            self.digests,
            self.hints,
            self.executor,
            self.live,
            registry,
            grace_s=self.live.settings.tombstone_grace_s,
            interval_s=self.live.settings.anti_entropy_interval_s,
        )
        if self.live.settings.unsafe_disable_fencing:
            log.error(
                "UNSAFE: THEMIS_UNSAFE_DISABLE_FENCING is on: writes are not fenced and replicas "
                "coordinate when a primary looks down; acknowledged writes can be lost"
            )
        #: renewed by the plan authority's probes; a primary acts only while it holds
        self.lease = AuthorityLease()
        locks = KeyLocks()  # one per-key lock table for single-shard writes and 2PC prepares
        self.transactions = Transactions(
            store, locks, self.executor, self.live, self.replication, txn or TxnSettings(), registry
        )
        self.documents = DistributedDocuments(
            store,
            self.executor,
            self.replication,
            self.live,
            handoff=self.handoff,
            locks=locks,
            cross_shard=self.transactions,
            held=self.transactions.intents,
            fencing=not self.live.settings.unsafe_disable_fencing,
            inflight=InflightLog(store),
            read_from_replicas=self.live.settings.read_from_replicas,
            lease=self.lease,
        )
        self.collections = ClusterCollections(store, vectors, self.executor, self.live, registry)
        self.membership = Membership(self_id, plan, self.live, self.executor, self._runtime, registry, load)
        # KV-prefix directory and pull-on-miss: only a clustered shard with a prefix cache has peers.
        self.prefix_sync = (
            PrefixSync(self, prefix)
            if prefix is not None and prefix.prefix_cache and self.topology.clustered
            else None
        )
        self.router = prefix_aware_router(
            self.membership.view,
            lambda key: self.topology.ring.owners(key, len(self.topology.ring.shards)),
            self.membership.unavailable,
            self.live.settings,
            registry,
            prefix_source=self.prefix_sync.held_for_prompt if self.prefix_sync is not None else None,
            prefix_policy=(
                PrefixRoutingPolicy(prefill_tokens_per_s=prefix.prefix_prefill_tokens_per_s)
                if prefix is not None
                else None
            ),
        )
        self.plan_watcher = PlanWatcher(
            self_id,
            plan_path,
            self.live,
            self.router,
            self.membership,
            self.handoff,
            self._runtime,
            registry,
            fetcher=fetcher,
        )
        self.inference = InferenceRouting(
            self.live,
            self.executor,
            self.router,
            self.membership.unavailable,
            registry,
            announced=self.membership.view.adapters,
            stream_resumptions=self.live.settings.stream_resumptions,
            prefix_target=self._prefix_target if prefix is not None else None,
        )
        #: the shards whose engines share this host's cores, this one included (set at start)
        self._colocated: Callable[[], Sequence[str]] = tuple
        self._prefix_route = prefix is not None and prefix.prefix_route
        self._host_batching = prefix is not None and prefix.host_batching
        self._min_gain_s = prefix.prefix_route_min_gain_s if prefix is not None else 0.0
        self._tasks = Tasks()

    def _prefix_target(self, key: str) -> str | None:
        """Where a request without a domain runs best, for its KV prefix or to join this host's
        batching engine (``prefix_target``); None: here."""
        sync = self.prefix_sync if self._prefix_route else None
        colocated = self._colocated() if self._host_batching else ()
        if sync is None and len(colocated) < 2:
            return None
        return prefix_target(
            self.self_id,
            sync.held_for_prompt(key) if sync is not None else {},
            self.membership.view.loads(),
            self.membership.unavailable(),
            self.router.prefix_policy,
            self._min_gain_s,
            colocated,
        )

    # -- what the parts share ----------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return self.live.topology

    @property
    def settings(self) -> ClusterSettings:
        return self.live.settings

    @property
    def runtime(self) -> Any:
        """The shard's LLMRuntime once started (adapters to announce); None without an LLM."""
        return self._runtime.runtime

    def _resolve(self, shard_id: str) -> str:
        return self.live.url(shard_id)

    # -- membership --------------------------------------------------------------------------
    @property
    def state(self):
        return self.membership.state

    @property
    def gossiper(self):
        return self.membership.gossiper

    @property
    def view(self):
        return self.membership.view

    def member_states(self) -> dict[str, str]:
        return self.membership.member_states()

    def draft_target(self):
        return self.membership.draft_target()

    # -- plan --------------------------------------------------------------------------------
    def reload_plan(self) -> bool:
        return self.plan_watcher.reload_plan()

    def lease_probe(self, epoch: int, until: float, plan: ClusterPlan | None = None) -> dict[str, Any]:
        """The plan authority's probe: adopt its newer plan now (the file's, else the one it
        sent: a mounted ConfigMap may lag), renew the lease when we then agree on the epoch, and
        report what it decides the in-sync set on, with the clock the next lease is anchored on."""
        if epoch > self.topology.epoch:
            self.reload_plan()
        if epoch > self.topology.epoch and plan is not None and plan.plan_epoch == epoch:
            self.plan_watcher.adopt_pushed(plan)
        renewed = epoch == self.topology.epoch and until > 0
        if renewed:
            self.lease.renew(until)
        return {
            "shard": self.self_id,
            "epoch": self.topology.epoch,
            "renewed": renewed,
            "caught_up_epoch": self.anti_entropy.caught_up_epoch,
            "ready": self.handoff.caught_up,
            "hints": self.hints.pending(),
            "clock": self.lease.now(),
        }

    def plan_adapters(self) -> dict[str, Any]:
        return self.plan_watcher.adapter_report()

    # -- handoff -----------------------------------------------------------------------------
    @property
    def caught_up(self) -> bool:
        return self.handoff.caught_up

    @property
    def migration(self) -> MigrationProgress:
        return self.handoff.migration

    @property
    def handoff_active(self) -> bool:
        return self.handoff.handoff_active

    def previous_ring(self) -> HashRing | None:
        return self.handoff.previous_ring()

    def serve_sync_page(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.handoff.serve_sync_page(request)

    async def fetch_previous(self, collection: str, key: str) -> None:
        await self.handoff.fetch_previous(collection, key)

    # -- collections and search ----------------------------------------------------------------
    async def adopt_collection(self, config: CollectionConfig) -> None:
        await self.collections.adopt(config)

    async def broadcast_collection(self, config: CollectionConfig) -> None:
        await self.collections.broadcast(config)

    async def search(
        self, collection: str, body: dict[str, Any], local: Callable[[], Awaitable[list[dict]]]
    ) -> tuple[list[dict], list[str]]:
        return await self.collections.search(collection, body, local)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, runtime: Any = None, colocated: Callable[[], Sequence[str]] | None = None) -> None:
        """Start the background work; ``runtime`` is the started LLMRuntime (None without one);
        ``colocated``: the shards whose engines share this host's cores (``HostCores.shards``).

        The runtime is built after this service (it needs the draft resolver and prefix puller),
        so it arrives here rather than in the constructor."""
        self._runtime.runtime = runtime
        if colocated is not None:
            self._colocated = colocated
        if self.topology.clustered:  # before anything is served or repaired
            repairs = await self.documents.recover_inflight()
            if repairs:
                self._tasks.spawn(self.documents.replicate_repairs(repairs), "inflight-recovery")
        self.membership.start()
        self.replication.start()
        self.plan_watcher.start()
        self.handoff.start()
        if self.topology.clustered:
            self.anti_entropy.start(lambda: self.handoff.caught_up)
        self.tombstone_gc.start()
        self.transactions.start()
        if self.topology.clustered:  # KV-prefix directory
            self._tasks.every(self.settings.gossip_interval_s, self._prefix_refresh, "prefix-directory")

    async def stop(self) -> None:
        with contextlib.suppress(TimeoutError):  # w=1 replication in flight: delivered or hinted
            await asyncio.wait_for(self.documents.settle(), 5)
        await self.membership.stop()
        await self.plan_watcher.stop()
        await self.replication.stop()
        await self.handoff.stop()
        await self.anti_entropy.stop()
        await self.tombstone_gc.stop()
        await self.transactions.stop()
        await self._tasks.cancel()
        await self.executor.aclose()

    @property
    def prefix_puller(self) -> PrefixSync | None:
        """Pull-on-miss of KV prefixes for the LLM runtime's constructor (``llm.seams.PrefixPuller``)."""
        return self.prefix_sync

    async def _prefix_refresh(self) -> None:
        if self.prefix_sync is not None:
            await self.prefix_sync.refresh()
