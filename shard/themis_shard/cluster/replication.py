"""Replica delivery: push versions to a peer now, or keep them as a durable hint and replay later.

Synchronous replication, hint replay and the pre-purge hand-over of a resharding all end in
the same push to ``POST /internal/replicate``; the receiver keeps only newer versions, so a
push delivered twice is harmless. When a peer cannot be reached the versions go to the
``HintLog`` (same RocksDB, synced) and the replay loop delivers them once the peer's breaker
lets calls through again.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.concurrency import run_in_threadpool

from ..storage.documents import Replicated
from ..storage.hints import HintLog, encode_items
from .remote import PeerError, PeerUnavailable, RemoteExecutor
from .tasks import Tasks
from .views import TopologySource

log = logging.getLogger(__name__)

#: Hint records taken per read while replaying to one peer.
REPLAY_BATCH = 100


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
        self._hints = hints

    def refresh(self) -> None:
        for peer, n in self._hints.pending().items():
            self._hinted.labels(peer=peer).set(n)


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
    ) -> None:
        self.executor = executor
        self.hints = hints
        self._plan = topology
        self.metrics = ReplicationMetrics(registry, hints)
        self._tasks = Tasks()

    async def push(self, peer: str, items: list, *, retries: int) -> None:
        """Install versions on ``peer`` (the higher version wins there, so a replay is harmless).
        Raises PeerUnavailable / PeerError."""
        await self.executor.request(
            peer,
            "POST",
            "/internal/replicate",
            json_body={"items": encode_items(items)},
            idempotent=True,
            retries=retries,
        )

    async def send(self, peer: str, items: list[Replicated]) -> None:
        """Push to ``peer``; when it cannot be reached, keep a durable hint (replayed later)."""
        try:
            await self.push(peer, items, retries=1)
            self.metrics.replication.labels(outcome="replicated").inc(len(items))
        except (PeerUnavailable, PeerError) as exc:
            log.warning("replica %s missed %d version(s) (%s); keeping a hint", peer, len(items), exc)
            await run_in_threadpool(self.hints.add, peer, items)
            self.metrics.replication.labels(outcome="hinted").inc(len(items))

    async def replay_hints(self) -> None:
        """Deliver the hints of every reachable peer, oldest first; stop at a peer's first failure."""
        self.metrics.refresh()
        for peer in self.hints.peers():
            if not worth_replaying(peer, self._plan.topology.members, self.executor.open_peers()):
                continue
            while True:
                keys, items = await run_in_threadpool(self.hints.take, peer, REPLAY_BATCH)
                if not keys:
                    break
                try:
                    await self.push(peer, items, retries=0)
                except (PeerUnavailable, PeerError):
                    break
                await run_in_threadpool(self.hints.done, peer, keys)
                log.info("delivered %d hinted version(s) to %s", len(items), peer)

    def start(self, interval_s: float = 1.0) -> None:
        self._tasks.every(interval_s, self.replay_hints, "hint-replay")

    async def stop(self) -> None:
        await self._tasks.cancel()
