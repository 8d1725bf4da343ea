"""Anti-entropy: owners compare Merkle digests of the keys they share and exchange only the
records in the vnode ranges that differ (``merkle.py``); stamps decide every difference.

Runs once after start-up catch-up and then every ``anti_entropy_interval_s``, with each peer in
turn, while no handoff is in progress (a ring change has its own protocol) and only between
shards on the same plan epoch. It repairs what hints could not: a hint dropped at its budget,
a replica restored from an old disk, a burn that was never delivered. A round costs O(vnode
ranges) while the owners agree: the leaves are kept current on every write
(``storage.digests``), and the store is read only for buckets that differ.

Catch-up of a shard out of the in-sync set (``plan_authority.in_sync``) is one-way: it takes the in-sync
peers' records for every key that differs, even where its own stamp is higher (a write it
burned or acknowledged at ``w=1`` before it was fenced, which a new primary has since
overwritten at a lower version), and drops the keys they do not hold, like a Kafka follower
truncating to its leader's log; in-sync shards never take records from it. It runs every
second until it completed a round at the current epoch (``caught_up_epoch``), which the
authority waits for before readmitting the shard.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from starlette.concurrency import run_in_threadpool

from ...errors import Conflict
from ...storage.digests import RecordDigests
from ...storage.documents import DocumentStore, Replicated
from ...storage.record_wire import decode_items, encode_items
from ...storage.stamps import Stamp
from ..placement.views import TopologySource
from ..tasks import Tasks
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .delivery import Replication
from .merkle import FANOUT, Pair, bucket_digests, differing, newer_than, shared_leaves

log = logging.getLogger(__name__)

#: Pause between catch-up rounds of a shard out of sync or rejoining.
CATCH_UP_PAUSE_S = 0.5


class AntiEntropyMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.rounds = Counter(
            "themis_anti_entropy_rounds_total",
            "Digest comparisons with a peer",
            ["outcome"],
            registry=registry,
        )
        self.buckets = Counter(
            "themis_anti_entropy_buckets_differing_total",
            "Merkle buckets that differed and were exchanged",
            registry=registry,
        )
        self.repaired = Counter(
            "themis_anti_entropy_records_total",
            "Records repaired by anti-entropy",
            ["direction"],
            registry=registry,
        )


class AntiEntropy:
    def __init__(
        self,
        self_id: str,
        store: DocumentStore,
        digests: RecordDigests,
        executor: RemoteExecutor,
        topology: TopologySource,
        replication: Replication,
        registry: CollectorRegistry,
        *,
        interval_s: float,
    ) -> None:
        self.self_id = self_id
        self.store = store
        self.digests = digests
        self.executor = executor
        self._plan = topology
        self.replication = replication
        self.metrics = AntiEntropyMetrics(registry)
        self.interval_s = interval_s
        #: The epoch of the last round that compared with every in-sync peer it shares keys
        #: with, from start to end (0: none yet).
        self.caught_up_epoch = 0
        self._tasks = Tasks()

    # -- pure-ish helpers over the local store --------------------------------------------------
    def _pair(self, peer: str) -> Pair:
        topo = self._plan.topology
        return Pair(topo.ring, topo.plan.copies, self.self_id, peer)

    def _records(self, pair: Pair, buckets: set[int] | None = None) -> list:
        """The shared records in ``buckets``; only those are decoded."""

        def keep(collection: str, key: str) -> bool:
            leaf = pair.leaf(collection, key)
            return pair.shares_leaf(leaf) and (buckets is None or leaf // FANOUT in buckets)

        return list(self.store.scan_where(keep))

    def _digests(self, pair: Pair) -> dict[int, str]:
        """From the leaves kept on write (a scan only after a ring change or a failed write)."""
        return bucket_digests(shared_leaves(self.digests.leaves(pair.partition()), pair))

    def _check(self, request: dict[str, Any]) -> Pair:
        topo = self._plan.topology
        epoch = request.get("epoch")
        if (
            int(request["ring_version"]) != topo.version
            or (epoch is not None and int(epoch) != topo.epoch)
            or topo.plan.previous_ring is not None
        ):
            raise Conflict(
                f"anti-entropy needs both shards settled on ring version {topo.version}, epoch {topo.epoch}",
                code="epoch_mismatch",
            )
        peer = str(request["peer"])
        if peer not in topo.members:
            raise Conflict(f"{peer} is not a member", code="not_a_member")
        return self._pair(peer)

    # -- the serving side --------------------------------------------------------------------
    def serve_digests(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"buckets": {str(b): d for b, d in self._digests(self._check(request)).items()}}

    def serve_records(self, request: dict[str, Any]) -> dict[str, Any]:
        pair = self._check(request)
        wanted = {int(b) for b in request["buckets"]}
        return {"items": encode_items([_replicated(e) for e in self._records(pair, wanted)])}

    # -- the asking side ---------------------------------------------------------------------
    async def exchange(self, peer: str) -> int:
        """One comparison with ``peer``; returns how many records moved (either way)."""
        topo = self._plan.topology
        request = {"peer": self.self_id, "ring_version": topo.version, "epoch": topo.epoch}
        pair = self._pair(peer)
        reply = await self.executor.request(
            peer, "POST", "/internal/anti-entropy/digests", json_body=request, idempotent=True, retries=0
        )
        mine = await run_in_threadpool(self._digests, pair)
        buckets = differing(mine, {int(b): d for b, d in reply["buckets"].items()})
        if not buckets:
            self.metrics.rounds.labels(outcome="equal").inc()
            return 0
        self.metrics.buckets.inc(len(buckets))
        reply = await self.executor.request(
            peer,
            "POST",
            "/internal/anti-entropy/records",
            json_body={**request, "buckets": sorted(buckets)},
            idempotent=True,
            retries=0,
            timeout_s=60,
        )
        theirs = decode_items(reply["items"])
        if not topo.in_sync_self:
            return await run_in_threadpool(self._truncate_to, pair, buckets, theirs, peer)
        pulled = await run_in_threadpool(self.store.apply_replicated, theirs)
        local = await run_in_threadpool(self._records, pair, buckets)
        their_stamps = {(i.collection, i.key): i.stamp for i in theirs}
        my_stamps = {(e.collection, e.key): Stamp(e.version, e.hlc, e.origin) for e in local}
        push_keys = set(newer_than(my_stamps, their_stamps))
        push = [_replicated(e) for e in local if (e.collection, e.key) in push_keys]
        if push:
            await self.replication.push(peer, [[r] for r in push], retries=1)  # each on its own
        self.metrics.repaired.labels(direction="pulled").inc(len(pulled))
        self.metrics.repaired.labels(direction="pushed").inc(len(push))
        self.metrics.rounds.labels(outcome="repaired").inc()
        if pulled or push:
            log.info("anti-entropy with %s: %d record(s) pulled, %d pushed", peer, len(pulled), len(push))
        return len(pulled) + len(push)

    def _truncate_to(self, pair: Pair, buckets: set[int], theirs: list[Replicated], peer: str) -> int:
        """Out of sync: make this shard's copies in ``buckets`` exactly the in-sync peer's."""
        wanted = {(i.collection, i.key): i.stamp for i in theirs}
        drop = [
            (e.collection, e.key)
            for e in self._records(pair, buckets)
            if wanted.get((e.collection, e.key)) != Stamp(e.version, e.hlc, e.origin)
        ]
        self.store.purge(drop)
        pulled = self.store.apply_replicated(theirs)
        self.metrics.repaired.labels(direction="pulled").inc(len(pulled))
        self.metrics.rounds.labels(outcome="repaired").inc()
        log.info("catch-up from %s: %d record(s) taken, %d replaced or dropped", peer, len(pulled), len(drop))
        return len(pulled) + len(drop)

    async def round(self) -> None:
        """Compare with every peer, one at a time (skipped while a handoff is in progress).
        Out of sync, only with in-sync peers; in sync, never with a peer out of sync (it
        catches up from us on its own)."""
        topo = self._plan.topology
        if not topo.clustered or topo.plan.previous_ring is not None:
            return
        complete = True
        for peer in topo.peers:
            if peer in topo.plan.out_of_sync:
                continue
            if peer in self.executor.open_peers() or not await self.executor.answers(peer):
                complete = False
                continue
            try:
                await self.exchange(peer)
            except (PeerUnavailable, PeerError, KeyError, ValueError) as exc:
                complete = False
                self.metrics.rounds.labels(outcome="failed").inc()
                log.info("anti-entropy with %s skipped: %s", peer, exc)
        if complete and self._plan.topology.epoch == topo.epoch:
            self.caught_up_epoch = topo.epoch

    def _catching_up(self) -> bool:
        """Out of sync or rejoining, and no complete round at this epoch yet: go again soon."""
        topo = self._plan.topology
        behind = not topo.in_sync_self or topo.self_id in topo.plan.rejoining
        return behind and self.caught_up_epoch < topo.epoch

    def start(self, ready: Any) -> None:
        """``ready()``: true once start-up catch-up finished (the first round follows it)."""

        async def loop() -> None:
            while not ready():
                await asyncio.sleep(0.2)
            while True:
                try:
                    await self.round()
                except Exception:
                    log.exception("anti-entropy round failed")
                waited = 0.0
                while waited < self.interval_s and not self._catching_up():
                    await asyncio.sleep(min(1.0, self.interval_s - waited))
                    waited += 1.0
                if self._catching_up():
                    await asyncio.sleep(CATCH_UP_PAUSE_S)

        self._tasks.spawn(loop(), "anti-entropy")

    async def stop(self) -> None:
        await self._tasks.cancel()


def _replicated(e) -> Replicated:
    return Replicated(e.collection, e.key, e.version, e.document, e.hlc, e.origin)
