"""Tombstone garbage collection by watermark: a delete's tombstone is dropped once no older
record of its key can arrive anywhere and every owner holds that very tombstone.

The watermark of a shard is the lowest hybrid-clock stamp it could still send: its oldest
pending hint, or "now minus ``grace``" (longer than any request in flight) when it has none.
The cluster's watermark is the minimum over every member — an unreachable member means no
collection that round. A tombstone stamped below it can only be overtaken by newer records.
The key's primary drives its collection: it asks the other owners to drop the tombstone if they
hold exactly that record, and drops its own copy only when all of them did. A newer write that
races the collection keeps the key (drops compare the whole stamp), and an owner that missed
the drop gets the tombstone back from anti-entropy, harmlessly. No collection while a handoff
is in progress (previous owners may still hold copies). The candidates come from the
tombstones kept as writes are staged (``storage.digests``), not from a scan of the store.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry, Counter
from starlette.concurrency import run_in_threadpool

from ...storage.digests import RecordDigests
from ...storage.documents import DocumentStore, Tombstone
from ...storage.hints import HintLog
from ..placement.owners import Topology
from ..placement.views import TopologySource
from ..tasks import Tasks
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .fencing import primary

log = logging.getLogger(__name__)


def hlc_span(seconds: float) -> int:
    """A duration in hybrid-clock units (milliseconds in the high bits)."""
    return int(seconds * 1000) << 16


def shard_watermark(oldest_hint: int | None, now_hlc: int, grace_hlc: int) -> int:
    floor = now_hlc - grace_hlc
    return floor if oldest_hint is None else min(floor, oldest_hint)


def to_collect(tombstones: list[Tombstone], watermark: int, topology: Topology) -> list[Tombstone]:
    """The tombstones below the watermark whose collection this shard drives (it is primary)."""
    me = topology.self_id
    return [t for t in tombstones if t.hlc < watermark and primary(topology, t.collection, t.key) == me]


def encode(t: Tombstone) -> dict:
    return {"collection": t.collection, "key": t.key, "version": t.version, "hlc": t.hlc, "origin": t.origin}


def decode(d: dict) -> Tombstone:
    return Tombstone(d["collection"], d["key"], int(d["version"]), None, int(d["hlc"]), str(d["origin"]))


class TombstoneGC:
    def __init__(
        self,
        store: DocumentStore,
        digests: RecordDigests,
        hints: HintLog,
        executor: RemoteExecutor,
        topology: TopologySource,
        registry: CollectorRegistry,
        *,
        grace_s: float,
        interval_s: float,
    ) -> None:
        self.store = store
        self.digests = digests
        self.hints = hints
        self.executor = executor
        self._plan = topology
        self.grace_hlc = hlc_span(grace_s)
        self.interval_s = interval_s
        self.collected = Counter(
            "themis_tombstones_collected_total", "Tombstones garbage-collected", registry=registry
        )
        self._tasks = Tasks()

    def watermark(self) -> int:
        return shard_watermark(self.hints.oldest_hlc(), self.store.clock.now(), self.grace_hlc)

    def drop(self, items: list[Tombstone]) -> list[Tombstone]:
        """This shard's side: drop those it holds exactly; say which."""
        held = [t for t in items if self.store.get_entry(t.collection, t.key) == t]
        self.store.drop_tombstones(held)
        return held

    async def collect(self) -> int:
        topo = self._plan.topology
        if topo.plan.previous_ring is not None:
            return 0
        marks = [await run_in_threadpool(self.watermark)]
        for peer in topo.peers:
            if not await self.executor.answers(peer):
                return 0  # a member we cannot ask might still send an older record
            try:
                reply = await self.executor.request(
                    peer, "GET", "/internal/gc/watermark", retries=0, timeout_s=5
                )
                marks.append(int(reply["watermark"]))
            except (PeerUnavailable, PeerError, KeyError, ValueError):
                return 0  # a member we cannot ask might still send an older record
        mine = to_collect(await run_in_threadpool(self.digests.tombstones, min(marks)), min(marks), topo)
        confirmed = {(t.collection, t.key): t for t in mine}
        for peer in topo.peers:
            theirs = [t for t in mine if peer in topo.owners(t.collection, t.key)]
            if not theirs:
                continue
            try:
                reply = await self.executor.request(
                    peer,
                    "POST",
                    "/internal/gc/drop",
                    json_body={"items": [encode(t) for t in theirs]},
                    retries=0,
                )
                dropped = {(d["collection"], d["key"]) for d in reply["dropped"]}
            except (PeerUnavailable, PeerError, KeyError, ValueError):
                dropped = set()
            for t in theirs:
                if (t.collection, t.key) not in dropped:
                    confirmed.pop((t.collection, t.key), None)
        n = await run_in_threadpool(self.store.drop_tombstones, list(confirmed.values()))
        self.collected.inc(n)
        if n:
            log.info("collected %d tombstone(s) below watermark %d", n, min(marks))
        return n

    def start(self) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(self.interval_s)  # not at start-up: peers may still be starting
                try:
                    await self.collect()
                except Exception:
                    log.exception("tombstone collection failed")

        self._tasks.spawn(loop(), "tombstone-gc")

    async def stop(self) -> None:
        await self._tasks.cancel()
