"""Replica delivery: push versions to a peer now, or keep them as a durable hint and replay later.

Synchronous replication, hint replay and the pre-purge hand-over of a resharding all end in
the same push to ``POST /internal/replicate``; the receiver keeps only newer versions, so a
push delivered twice is harmless. When a peer cannot be reached the versions go to the
``HintLog`` (same RocksDB, synced) and the replay loop delivers them once the peer's breaker
lets calls through again. Hints are bounded by bytes per peer (``hint_admitted``): past the
budget a hint is dropped, counted (``themis_hints_dropped_total``) and left to anti-entropy.

A coordinated write uses ``deliver`` instead: one fenced attempt whose answer is classified as
held, provably not applied, or unknown (``fencing.Delivery``) for the coordinator to decide on.
Concurrent deliveries to one peer share requests (``batching``), and so do concurrent sends
(``coalescing``: a w=1 write's background replication, repairs).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.concurrency import run_in_threadpool

from ...storage.documents import Replicated
from ...storage.hints import HintLog
from ...storage.record_wire import decode_items, encode_items
from ..placement.views import TopologySource
from ..tasks import Tasks, until_done
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .batching import ReplicationBatcher, Watch
from .coalescing import PUSH_MAX_BYTES, PushCoalescer, split_by_size
from .fencing import FENCE_CODES, Delivery

log = logging.getLogger(__name__)

#: Hint records taken per read while replaying to one peer.
REPLAY_BATCH = 100
#: PeerUnavailable reasons that prove the request never reached the peer (or, ``peer_auth``,
#: was refused before anything ran: the peer did not accept its signature).
NOT_SENT_REASONS = frozenset({"circuit_open", "connect_error", "unknown_peer", "peer_auth"})
#: A peer's deliberate 5xx codes that say it applied nothing (starting; its disk refused the write).
REFUSED_CODES = frozenset({"starting", "insufficient_storage", "storage_failed"})


def delivery_of(exc: PeerUnavailable | PeerError | None) -> Delivery:
    """How one fenced push ended: no exception = held; a 4xx or an unsent request = not applied."""
    if exc is None:
        return Delivery.HELD
    if isinstance(exc, PeerError) and getattr(exc, "code", None) in FENCE_CODES:
        return Delivery.FENCED
    if isinstance(exc, PeerError) or exc.reason in NOT_SENT_REASONS or exc.code in REFUSED_CODES:
        return Delivery.NOT_APPLIED
    return Delivery.UNKNOWN


def hint_admitted(pending_bytes: int, new_bytes: int, budget_bytes: int) -> bool:
    """Is there room for ``new_bytes`` more hints to a peer? (0 = no budget: unbounded.)"""
    return budget_bytes <= 0 or pending_bytes + new_bytes <= budget_bytes


class ReplicationMetrics:
    def __init__(self, registry: CollectorRegistry, hints: HintLog) -> None:
        self.replication = Counter(
            "themis_replication_items_total",
            "Replica versions sent synchronously or kept as hints",
            ["outcome"],
            registry=registry,
        )
        self._hinted = Gauge(
            "themis_hints_pending", "Hint records waiting for a peer", ["peer"], registry=registry
        )
        self._hinted_bytes = Gauge(
            "themis_hints_bytes", "Bytes of hints waiting for a peer", ["peer"], registry=registry
        )
        self.dropped = Counter(
            "themis_hints_dropped_total",
            "Replica versions not hinted because the peer's hint budget was full (anti-entropy repairs them)",
            ["peer"],
            registry=registry,
        )
        self._hints = hints

    def refresh(self) -> None:
        for peer, n in self._hints.pending().items():
            self._hinted.labels(peer=peer).set(n)
        for peer, n in self._hints.pending_bytes().items():
            self._hinted_bytes.labels(peer=peer).set(n)


def worth_replaying(peer: str, members: list[str], open_peers: frozenset[str]) -> bool:
    """A hinted peer is replayed while it is still a member and its breaker lets calls through
    (a peer that left the plan keeps its hints: it may come back)."""
    return peer in members and peer not in open_peers


class Replication:
    def __init__(
        self,
        executor: RemoteExecutor,
        hints: HintLog,
        topology: TopologySource,
        registry: CollectorRegistry,
        *,
        hint_budget_bytes: int = 0,
    ) -> None:
        """``hint_budget_bytes``: most hint bytes kept per peer (0: unbounded)."""
        self.executor = executor
        self.hints = hints
        self._plan = topology
        self.hint_budget_bytes = hint_budget_bytes
        self.metrics = ReplicationMetrics(registry, hints)
        self._tasks = Tasks()
        self.batcher = ReplicationBatcher(executor)
        self.pushes = PushCoalescer(self._push_gathered)
        self._hinting: set[asyncio.Task] = set()

    async def push(self, peer: str, groups: list[list[Replicated]], *, retries: int) -> None:
        """Install versions on ``peer`` (the higher version wins there, so a replay is harmless),
        each group atomically: a transaction's records never arrive in parts. Raises
        PeerUnavailable / PeerError. Many or large groups go in requests of at most
        ``PUSH_MAX_BYTES`` (a larger group alone), one after the other: a hundred hinted 1 MiB
        documents in one request were over a peer's request limit, refused every time, and held
        that peer's hints back."""
        for run in split_by_size(groups, PUSH_MAX_BYTES):
            await self._post(peer, run, retries)

    async def _push_gathered(self, peer: str, groups: list[list[Replicated]]) -> None:
        """What the coalescer gathered, in one request: it sized each group as it queued it and
        gathers at most ``PUSH_MAX_BYTES`` (a larger group alone), so nothing is sized again."""
        await self._post(peer, [r for group in groups for r in group], 1)

    async def _post(self, peer: str, records: list[Replicated], retries: int) -> None:
        await self.executor.request(
            peer,
            "POST",
            "/internal/replicate",
            json_body={"items": encode_items(records)},
            idempotent=True,
            retries=retries,
        )

    async def send(self, peer: str, items: list[Replicated]) -> bool:
        """Push to ``peer`` (with other sends queued for it); when it cannot be reached, keep a
        durable hint (replayed later). True when ``peer`` took them now."""
        try:
            await self.pushes.send(peer, items)
            self.metrics.replication.labels(outcome="replicated").inc(len(items))
            return True
        except (PeerUnavailable, PeerError) as exc:
            log.warning("replica %s missed %d version(s) (%s); keeping a hint", peer, len(items), exc)
            await self.hint(peer, items)
            return False

    def send_later(self, peer: str, items: list[Replicated]) -> None:
        """``send`` in the background, with no task of its own unless the push fails (the hint
        is then written by one); ``settle`` waits for it."""
        self.pushes.enqueue(peer, items).add_done_callback(partial(self._sent_later, peer, items))

    def _sent_later(self, peer: str, items: list[Replicated], pushed: asyncio.Future[None]) -> None:
        if pushed.cancelled():  # the shard is stopping: anti-entropy covers these records
            return
        failure = pushed.exception()
        if failure is None:
            self.metrics.replication.labels(outcome="replicated").inc(len(items))
            return
        if not isinstance(failure, PeerUnavailable | PeerError):
            log.error("replicating %d version(s) to %s failed", len(items), peer, exc_info=failure)
            return
        log.warning("replica %s missed %d version(s) (%s); keeping a hint", peer, len(items), failure)
        task = asyncio.create_task(self.hint(peer, items), name=f"hint-{peer}")
        self._hinting.add(task)
        task.add_done_callback(self._hinting.discard)

    async def settle(self) -> None:
        """Until what ``send_later`` was given has been delivered or hinted."""
        while True:
            await self.pushes.settle()
            if all(task.done() for task in self._hinting):
                return
            await until_done(self._hinting)

    async def deliver(
        self, peer: str, items: list[Replicated], epoch: int, coordinator: str, watch: Watch | None = None
    ) -> tuple[Delivery, list[Replicated]]:
        """One fenced push of a coordinated write (never retried: the answer must be exact).
        Also returns the newer records the owner holds when it refused the write for them
        (``FENCED``: the coordinator was behind and must catch up before writing). ``watch``
        may end the wait early with a PeerUnavailable (see ``ReplicationBatcher.call``)."""
        failure: PeerUnavailable | PeerError | None = None
        await self.executor.revive(peer)
        try:
            fence = {"epoch": epoch, "coordinator": coordinator}
            reply = await self.batcher.call(peer, {"items": encode_items(items), "fence": fence}, watch)
        except (PeerUnavailable, PeerError) as exc:
            failure = exc
            log.warning("owner %s did not take %d version(s): %s", peer, len(items), exc)
        else:
            newer = decode_items(reply.get("newer") or []) if isinstance(reply, dict) else []
            if newer:  # the owner is ahead of us: it applied nothing
                log.warning("owner %s holds newer versions of %d key(s)", peer, len(newer))
                self.metrics.replication.labels(outcome="superseded").inc(len(items))
                return Delivery.FENCED, newer
        outcome = delivery_of(failure)
        self.metrics.replication.labels(outcome=outcome.value).inc(len(items))
        return outcome, []

    async def hint(self, peer: str, items: list[Replicated]) -> None:
        """Keep ``items`` for ``peer`` durably, within its byte budget (else drop and count)."""
        size = HintLog.size_of(items)
        if not hint_admitted(self.hints.pending_bytes().get(peer, 0), size, self.hint_budget_bytes):
            log.warning("hint budget for %s full; %d version(s) left to anti-entropy", peer, len(items))
            self.metrics.dropped.labels(peer=peer).inc(len(items))
            return
        await self.hints.add(peer, items)
        self.metrics.replication.labels(outcome="hinted").inc(len(items))

    async def replay_hints(self) -> None:
        """Deliver the hints of every reachable peer, oldest first; stop at a peer's first failure."""
        self.metrics.refresh()
        if not self._plan.topology.in_sync_self:
            await self._drop_hints()
            return
        for peer in self.hints.peers():
            if not worth_replaying(peer, self._plan.topology.members, self.executor.open_peers()):
                continue
            while True:
                keys, groups = await run_in_threadpool(self.hints.take, peer, REPLAY_BATCH)
                if not keys:
                    break
                try:
                    await self.push(peer, groups, retries=0)
                except (PeerUnavailable, PeerError):
                    break
                await self.hints.done(peer, keys)
                log.info("delivered %d hinted version(s) to %s", sum(map(len, groups)), peer)

    async def _drop_hints(self) -> None:
        """This shard is out of sync: the hints it holds were minted while it was a primary in
        an older epoch, and the in-sync owners' copies are the truth now (a hint replayed to
        them could outrank a write they acknowledged since). Catch-up takes their records."""
        for peer in self.hints.peers():
            while True:
                keys, groups = await run_in_threadpool(self.hints.take, peer, REPLAY_BATCH)
                if not keys:
                    break
                await self.hints.done(peer, keys)
                log.warning("out of sync: dropped %d hinted version(s) for %s", sum(map(len, groups)), peer)

    def start(self, interval_s: float = 1.0) -> None:
        self._tasks.every(interval_s, self.replay_hints, "hint-replay")

    async def stop(self) -> None:
        await self._tasks.cancel()
