"""Online resharding: move each key to its new owners when the ring changes, while serving.

Pull-based. When a shard adopts a ring version it pages, from every other member, exactly the
entries (documents and tombstones) it owns under the new ring but did not own under the
previous one; each page is installed with ``apply_replicated``, so versions decide every race
with foreground writes and a replayed page is a no-op. Each key is sent by one source — its
first previous owner that the puller can reach — so a move costs one copy, not one per replica.
Start-up catch-up is the same protocol with no previous ring: every owned key is offered.

Correctness while moving: the new coordinator of a key that has not arrived yet reads through
to the previous owners before writing (so versions stay monotonic and no acknowledged write can
be overwritten by an older, later-arriving copy), and reads that miss fall back to the previous
owners until every member reports the handoff complete. Only then does a shard purge the copies
it no longer owns; a shard that left the ring reports "drained" and may be stopped. Before
purging, it pushes the copies it drops to their current owners when they lack that version.

The decisions are pure functions at the top; ``Handoff`` at the bottom is the state machine
that drives them over the network (one per shard, owned by the cluster service).

Why one ~560-line module: the pure hand-off decisions and the ``Handoff`` state machine that
applies them share one page format; apart, a decision would live away from the only code that
acts on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.concurrency import run_in_threadpool
from themis_core.ring import HashRing, RingSpec

from ...errors import Unavailable
from ...storage.documents import DocumentStore, Replicated, StoredDocument, Tombstone
from ...storage.names import storage_key, urn
from ...storage.record_wire import decode_items
from ..tasks import Tasks
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor, dumps, internal_path
from .owners import Topology
from .views import TopologySource

log = logging.getLogger(__name__)


class MigrationState(StrEnum):
    IDLE = "idle"  # no ring change seen since start
    MIGRATING = "migrating"  # pulling the keys this shard gained
    DONE = "done"  # pulled everything; waiting for the other members
    PURGED = "purged"  # everyone done; copies this shard lost were dropped
    DRAINED = "drained"  # this shard left the ring and holds nothing any more


COMPLETE_STATES = frozenset({MigrationState.DONE, MigrationState.PURGED, MigrationState.DRAINED})


# -- pure placement decisions ------------------------------------------------------------------
def is_moved_to(requester: str, key_urn: str, ring: HashRing, previous: HashRing | None, copies: int) -> bool:
    """Does ``requester`` need this key: it owns it now and (if there was a previous ring) did not before?"""
    if requester not in ring.owners(key_urn, copies):
        return False
    return previous is None or requester not in previous.owners(key_urn, copies)


def designated_source(
    key_urn: str,
    requester: str,
    ring: HashRing,
    previous: HashRing | None,
    copies: int,
    unreachable: Collection[str],
) -> str | None:
    """The one shard that sends this key to ``requester``: its first previous owner (current
    owners when there is no previous ring) other than the requester that is not unreachable."""
    holders = (previous or ring).owners(key_urn, copies)
    for shard in holders:
        if shard != requester and shard not in unreachable:
            return shard
    return None


def entries_to_send(
    entries: Iterable[StoredDocument | Tombstone],
    self_id: str,
    requester: str,
    ring: HashRing,
    previous: HashRing | None,
    copies: int,
    unreachable: Collection[str],
) -> list[StoredDocument | Tombstone]:
    return [
        e
        for e in entries
        if is_moved_to(requester, urn(e.collection, e.key), ring, previous, copies)
        and designated_source(urn(e.collection, e.key), requester, ring, previous, copies, unreachable)
        == self_id
    ]


def keys_to_purge(
    entries: Iterable[StoredDocument | Tombstone], self_id: str, ring: HashRing, copies: int
) -> list[tuple[str, str]]:
    """Copies this shard holds but no longer owns."""
    return [
        (e.collection, e.key) for e in entries if self_id not in ring.owners(urn(e.collection, e.key), copies)
    ]


# -- wire format ---------------------------------------------------------------------------------
def encode_entry(e: StoredDocument | Tombstone) -> dict[str, Any]:
    return {
        "collection": e.collection,
        "key": e.key,
        "version": e.version,
        "document": e.document,
        "hlc": e.hlc,
        "origin": e.origin,
    }


def decode_entries(items: list[dict[str, Any]]) -> list[Replicated]:
    return decode_items(items)


def serve_page(store: DocumentStore, self_id: str, request: dict[str, Any], page_size: int) -> dict[str, Any]:
    """The sender's side of one ``POST /internal/sync`` page (pure but for the store read).
    The placement test runs on the key, so values that stay put are never decoded."""
    ring = HashRing.cached(RingSpec.from_dict(request["ring"]))
    previous = HashRing.cached(RingSpec.from_dict(request["previous"])) if request.get("previous") else None
    after = bytes.fromhex(request["after"]) if request.get("after") else None
    requester, copies = request["shard"], int(request["copies"])
    unreachable = set(request.get("unreachable", ()))

    def keep(collection: str, key: str) -> bool:
        key_urn = urn(collection, key)
        return (
            is_moved_to(requester, key_urn, ring, previous, copies)
            and designated_source(key_urn, requester, ring, previous, copies, unreachable) == self_id
        )

    send, cursor = store.scan_page(after, page_size, keep)
    scanned = page_size if cursor else len(send)
    return {
        "items": [encode_entry(e) for e in send],
        "next": cursor.hex() if cursor else None,
        "scanned": scanned,
    }


def entry_bytes(items: list[dict[str, Any]]) -> int:
    """The documents' JSON bytes in a page (compact, as orjson writes them: json's encoder, on
    the event loop twice per page, was most of a start-up catch-up's time)."""
    return sum(len(dumps(i["document"])) if i["document"] is not None else 0 for i in items)


def raw_key(collection: str, key: str) -> bytes:
    return storage_key(collection, key)


@dataclass
class MigrationProgress:
    """What ``/v1/cluster/status`` and the metrics show about the current handoff."""

    ring_version: int = 0
    state: MigrationState = MigrationState.IDLE
    keys_received: int = 0
    bytes_received: int = 0
    keys_purged: int = 0
    #: dropped copies whose owners lacked that version and got it pushed before the purge
    keys_handed_over: int = 0
    peers_pending: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    started_at: float | None = None
    finished_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ring_version": self.ring_version,
            "state": self.state.value,
            "keys_received": self.keys_received,
            "bytes_received": self.bytes_received,
            "keys_purged": self.keys_purged,
            "keys_handed_over": self.keys_handed_over,
            "peers_pending": sorted(self.peers_pending),
            "unreachable": sorted(self.unreachable),
            "seconds": round((self.finished_at or time.time()) - self.started_at, 3)
            if self.started_at
            else 0,
        }


async def bounded_gather(limit: int, *aws):
    sem = asyncio.Semaphore(limit)

    async def run(aw):
        async with sem:
            return await aw

    return await asyncio.gather(*(run(a) for a in aws))


def all_complete(states: Iterable[dict | None], ring_version: int) -> bool:
    """Has every member (``None``: unreachable) finished pulling for ``ring_version``?"""
    return all(
        s is not None and s["ring_version"] >= ring_version and s["state"] in COMPLETE_STATES for s in states
    )


def waiting_for(
    states: dict[str, dict | None],
    ring_version: int,
    unreachable_since: dict[str, float],
    now: float,
    timeout_s: float,
) -> set[str]:
    """The members the purge still waits for: those not complete for ``ring_version``, except
    the ones unreachable for longer than ``timeout_s`` — a dead member never blocks a handoff
    (it catches up from the replicas when it returns, and the hand-over hints what it lacks)."""
    return {
        peer
        for peer, s in states.items()
        if not all_complete([s], ring_version)
        and not (s is None and now - unreachable_since.get(peer, now) >= timeout_s)
    }


def hand_over_batches(
    page: Iterable[StoredDocument | Tombstone],
    gone: Collection[tuple[str, str]],
    ring: HashRing,
    copies: int,
    chunk: int = 500,
) -> list[tuple[str, list[Replicated]]]:
    """The dropped copies of one scanned page, grouped per current owner in chunks."""
    per_owner: dict[str, list[Replicated]] = {}
    for e in page:
        if (e.collection, e.key) in gone:
            item = Replicated(e.collection, e.key, e.version, e.document, e.hlc, e.origin)
            for owner in ring.owners(urn(e.collection, e.key), copies):
                per_owner.setdefault(owner, []).append(item)
    return [
        (owner, items[i : i + chunk])
        for owner, items in per_owner.items()
        for i in range(0, len(items), chunk)
    ]


class ReplicaSink(Protocol):
    """Where handed-over copies go: pushed now or kept as a hint (``replication.Replication``)."""

    async def send(self, peer: str, items: list[Replicated]) -> None: ...


class HandoffMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.caught_up = Counter(
            "themis_catch_up_items_total", "Versions installed by start-up catch-up", registry=registry
        )
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


class Handoff:
    """This shard's side of catch-up and resharding: pull what it gained, serve what others
    gained, and purge what it lost once every member is done.

    Small pages with a pause between them bound the handoff's share of the event loop (JSON
    work holds the GIL): foreground requests stay fast while keys move.
    """

    def __init__(
        self,
        self_id: str,
        store: DocumentStore,
        executor: RemoteExecutor,
        topology: TopologySource,
        replicas: ReplicaSink,
        registry: CollectorRegistry,
        *,
        page_size: int,
        page_pause_s: float,
        attempts: int = 3,
        retry_pause_s: float = 1.0,
        poll_s: float = 0.5,
        finish_timeout_s: float = 120.0,
    ) -> None:
        """``finish_timeout_s``: how long an unreachable member may hold up the purge."""
        self.self_id = self_id
        self.store = store
        self.executor = executor
        self._plan = topology
        self.replicas = replicas
        self.metrics = HandoffMetrics(registry)
        self.page_size = page_size
        self.page_pause_s = page_pause_s
        self.attempts = attempts
        self.retry_pause_s = retry_pause_s
        self.poll_s = poll_s
        self.finish_timeout_s = finish_timeout_s
        self.caught_up = not topology.topology.clustered
        self.migration = MigrationProgress(ring_version=topology.topology.version)
        self._complete = False
        self._tasks = Tasks()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.spawn(self.catch_up(), "catch-up")

    def begin(self) -> None:
        """The ring changed: pull what this shard gained in it (in the background)."""
        self._tasks.spawn(self.migrate(), f"handoff-v{self._plan.topology.version}")

    async def stop(self) -> None:
        await self._tasks.cancel()

    # -- what reads and writes ask -------------------------------------------------------------
    @property
    def handoff_active(self) -> bool:
        """True while keys may still sit on their previous owners (reads/writes look there too)."""
        return self._plan.topology.plan.previous_ring is not None and not self._complete

    def previous_ring(self) -> HashRing | None:
        return self._plan.topology.plan.previous_hash_ring()

    # -- pulling ---------------------------------------------------------------------------------
    async def catch_up(self) -> None:
        """At start: pull every owned key from the peers (anti-entropy by version)."""
        try:
            await self.migrate(full=True)
        finally:
            self.caught_up = True

    async def migrate(self, full: bool = False) -> None:
        """Pull what this shard gained in the current ring (everything it owns when ``full``),
        then wait for every member to finish and purge the copies this shard lost."""
        topo = self._plan.topology
        previous = None if full else self.previous_ring()
        progress = MigrationProgress(
            ring_version=topo.version, state=MigrationState.MIGRATING, started_at=time.time()
        )
        self.migration = progress
        self._complete = False
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
            newly = {p for p in failed if attempts[p] >= self.attempts}
            if newly:
                log.warning("handoff: %s unreachable; asking the other holders for their keys", sorted(newly))
                progress.unreachable |= newly
                done = set()
            elif failed:
                await asyncio.sleep(self.retry_pause_s)
        progress.state = MigrationState.DONE
        progress.finished_at = time.time()
        self.metrics.migration_state.set(2)
        log.info(
            "handoff for ring version %d: %d key(s), %d byte(s) received",
            topo.version,
            progress.keys_received,
            progress.bytes_received,
        )
        current = self._plan.topology
        if current.plan.previous_ring is not None and current.version == topo.version:
            self._tasks.spawn(self._finish_handoff(topo), "handoff-finish")

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
                size = entry_bytes(items)
                progress.keys_received += len(installed)
                progress.bytes_received += size
                self.metrics.migration_keys.inc(len(installed))
                self.metrics.migration_bytes.inc(size)
            if page["next"] is None:
                return True
            request["after"] = page["next"]
            if self.page_pause_s:
                await asyncio.sleep(self.page_pause_s)  # rate limit: foreground first

    def serve_sync_page(self, request: dict[str, Any]) -> dict[str, Any]:
        return serve_page(self.store, self.self_id, request, self.page_size)

    # -- purging ---------------------------------------------------------------------------------
    async def _finish_handoff(self, topo: Topology) -> None:
        """Once every member reports this ring version complete, drop the copies we lost."""
        peers = sorted(set(topo.members) - {self.self_id})
        unreachable_since: dict[str, float] = {}
        while True:
            states = dict(
                zip(peers, await asyncio.gather(*(self._peer_migration(p) for p in peers)), strict=True)
            )
            now = time.monotonic()
            for peer, state in states.items():
                if state is None:
                    unreachable_since.setdefault(peer, now)
                else:
                    unreachable_since.pop(peer, None)
            pending = waiting_for(states, topo.version, unreachable_since, now, self.finish_timeout_s)
            if not pending:
                given_up = sorted(p for p in peers if states[p] is None)
                if given_up:
                    log.warning("handoff v%d: finishing without %s (unreachable)", topo.version, given_up)
                    self.migration.unreachable |= set(given_up)
                break
            await asyncio.sleep(self.poll_s)
        if self._plan.topology.version != topo.version:
            return  # a newer ring took over; its own handoff will purge
        self._complete = True
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
        chunks = hand_over_batches(page, gone, topo.ring, topo.plan.copies)
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
            await self.replicas.send(owner, items)

    async def _peer_migration(self, peer: str) -> dict | None:
        try:
            return await self.executor.request(peer, "GET", "/internal/migration", retries=0, timeout_s=5)
        except (PeerUnavailable, PeerError):
            return None

    # -- read-through ------------------------------------------------------------------------------
    async def fetch_previous(self, collection: str, key: str) -> None:
        """Read-through before coordinating a write during a handoff: install the key's newest
        version from its previous owners so the new version continues from it. A previous
        owner still on the old epoch could yet accept a write of it, so it answers only once it
        runs this epoch (``epoch_behind`` until then: the write fails, 503, and is retried)."""
        previous = self.previous_ring()
        if previous is None:
            return
        epoch = self._plan.topology.version
        for owner in previous.owners(urn(collection, key), self._plan.topology.plan.copies):
            if owner == self.self_id:
                continue
            try:
                reply = await self.executor.request(
                    owner,
                    "GET",
                    internal_path("documents", collection, key),
                    params={"tombstones": "true", "epoch": str(epoch)},
                    retries=0,
                    timeout_s=5,
                )
            except PeerError as exc:
                if getattr(exc, "code", None) == "epoch_behind":
                    raise Unavailable(
                        f"{owner} has not adopted ring version {epoch} yet; retry", code="epoch_changed"
                    ) from None
                continue  # a 404: ask the next one
            except PeerUnavailable:
                continue  # unreachable: ask the next one
            await run_in_threadpool(
                self.store.apply_replicated,
                [
                    Replicated(
                        collection,
                        key,
                        int(reply["version"]),
                        reply["document"],
                        int(reply.get("hlc", 0)),
                        str(reply.get("origin", "")),
                    )
                ],
            )
            return
