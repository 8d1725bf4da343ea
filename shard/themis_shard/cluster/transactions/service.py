"""The transactions part of a cluster member: participant, coordinator and termination, built
with their collaborators, this shard's answers about a transaction (status, fence, listing), and
their background task (in-doubt resolution and commit re-drive)."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry
from starlette.concurrency import run_in_threadpool

from ...storage.documents import Change, Check, DocumentStore, Write
from ...storage.intents import ATTEMPT_SEP, IntentStore, TxnLog, now_ms
from ..placement.views import TopologySource
from ..replication.delivery import Replication
from ..replication.fencing import KeyLocks, WriteConcern
from ..tasks import Tasks
from ..transport.remote import RemoteExecutor
from .admin import ClusterTransactions
from .coordinator import Coordinator
from .decisions import Status
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
        self._plan = topology
        self.metrics = TxnMetrics(registry)
        self.intents = IntentStore(store)
        self.log = TxnLog(store)
        self.participant = Participant(
            store,
            self.intents,
            self.log,
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
            self.log,
            executor,
            topology,
            self.status,
            self.fence,
            self.metrics,
            resolve_after_s=settings.resolve_after_s,
            timeout_s=settings.timeout_s,
            call_timeout_s=settings.call_timeout_s,
        )
        self.cluster = ClusterTransactions(
            self,
            executor,
            topology,
            call_timeout_s=settings.call_timeout_s,
            bound_s=settings.in_doubt_bound_s,
        )
        self._tasks = Tasks()

    async def run(
        self, writes: list[Write], checks: list[Check], concern: WriteConcern, txn_id: str | None = None
    ) -> list[Change]:
        """A transaction coordinated here by two-phase commit (``DistributedDocuments`` calls
        it for keys on several primaries; a client's transaction id always takes it)."""
        return await self.coordinator.run(writes, checks, concern, txn_id)

    # -- this shard's answers ----------------------------------------------------------------
    def status(self, txn: str) -> Status:
        """What this shard knows of ``txn`` (blocking: reads the log): of one attempt, by its
        name; of a client's id, of the bare id and of every attempt at it known here."""
        found = self.log.get(txn)
        own = Status(
            found.decision if found else None, self.coordinator.running(txn), self.intents.prepared(txn)
        )
        if ATTEMPT_SEP in txn:
            return own
        names = (
            {e.txn for e in self.log.entries_of(txn)}
            | self.intents.names_of(txn)
            | self.coordinator.names_of(txn)
        ) - {txn}
        return replace(own, attempts={name: self.status(name) for name in sorted(names)})

    async def fence(self, txn: str) -> Status:
        """Promise never to accept COMMIT for ``txn`` as a decider — unless this shard is
        coordinating it right now (then it says so and promises nothing). For a client's id,
        the promise covers every attempt at it with nothing logged here yet (``TxnLog.accept``)."""
        if not (self.coordinator.running(txn) or self.coordinator.names_of(txn)):
            await run_in_threadpool(self.log.fence, txn)
        return await run_in_threadpool(self.status, txn)

    def listing(self) -> dict:
        """This shard's part of ``themis txn list``: its intents, the transactions it is
        coordinating, and the commits whose phase 2 it is still re-sending."""
        now = now_ms()
        return {
            "intents": [
                {
                    "txn": i.txn,
                    "role": i.role.value,
                    "primary": i.primary,
                    "coordinator": i.coordinator,
                    "deciders": list(i.deciders),
                    "keys": [f"{c}/{k}" for c, k in i.keys],
                    "age_s": round((now - i.created_ms) / 1000, 3),
                }
                for i in self.intents.all()
            ],
            "running": self.coordinator.running_ids(),
            "committing": [e.txn for e in self.log.pending_commits()],
        }

    # -- background ----------------------------------------------------------------------------
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
