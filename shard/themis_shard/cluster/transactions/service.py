"""The transactions part of a cluster member: participant, coordinator and recovery, built with
their collaborators, and their background task (in-doubt resolution and commit re-drive)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from starlette.concurrency import run_in_threadpool

from ...storage.documents import Change, Check, DocumentStore, Write
from ...storage.intents import IntentStore, TxnLog, now_ms
from ..fencing import KeyLocks, WriteConcern
from ..remote import RemoteExecutor
from ..replication import Replication
from ..tasks import Tasks
from ..views import TopologySource
from .coordinator import Coordinator
from .metrics import TxnMetrics
from .participant import Participant
from .recovery import InDoubtResolver
from .settings import TxnSettings


class Transactions:
    def __init__(
        self,
        store: DocumentStore,
        locks: KeyLocks,
        executor: RemoteExecutor,
        topology: TopologySource,
        replication: Replication,
        settings: TxnSettings,
        registry: CollectorRegistry,
    ) -> None:
        self.settings = settings
        self.metrics = TxnMetrics(registry)
        self.intents = IntentStore(store)
        self.log = TxnLog(store)
        self.participant = Participant(
            store,
            self.intents,
            locks,
            executor,
            topology,
            replication,
            self.metrics,
            call_timeout_s=settings.call_timeout_s,
        )
        self.coordinator = Coordinator(self.participant, self.log, executor, topology, settings, self.metrics)
        self.resolver = InDoubtResolver(
            self.participant,
            self.intents,
            executor,
            topology,
            self.coordinator.decision,
            self.metrics,
            resolve_after_s=settings.resolve_after_s,
            call_timeout_s=settings.call_timeout_s,
        )
        self._tasks = Tasks()

    async def run(self, writes: list[Write], checks: list[Check], concern: WriteConcern) -> list[Change]:
        """A cross-shard transaction, coordinated here (``DistributedDocuments`` calls it)."""
        return await self.coordinator.run(writes, checks, concern)

    async def recover(self) -> None:
        await self.coordinator.redrive()
        await self.resolver.resolve()

    async def prune(self) -> None:
        cutoff = now_ms() - int(self.settings.log_retention_s * 1000)
        await run_in_threadpool(self.log.prune, cutoff)

    def start(self) -> None:
        self._tasks.every(self.settings.resolve_interval_s, self.recover, "txn-recovery")
        self._tasks.every(min(self.settings.log_retention_s, 600.0), self.prune, "txn-log-prune")

    async def stop(self) -> None:
        await self._tasks.cancel()
