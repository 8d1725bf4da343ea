"""In-doubt resolution: a participant holding a prepared intent asks its coordinator what became
of it, and commits or aborts accordingly.

Runs every ``resolve_interval_s`` for intents older than ``resolve_after_s`` — after a restart
every intent qualifies, so a participant killed between prepare and commit finishes the
transaction as soon as its coordinator answers. The wait is bounded by the coordinator: once a
transaction is past its timeout, or the coordinator restarted without a decision, the answer is
a (presumed) abort. An unreachable coordinator leaves the intent in doubt, its keys locked: that
is the price of two-phase commit, visible in ``themis_txn_in_doubt``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from ...storage.intents import IntentStore, now_ms
from ..remote import PeerError, PeerUnavailable, RemoteExecutor
from ..views import TopologySource
from .decisions import Answer, in_doubt
from .metrics import TxnMetrics
from .participant import Participant

log = logging.getLogger(__name__)


class InDoubtResolver:
    def __init__(
        self,
        participant: Participant,
        intents: IntentStore,
        executor: RemoteExecutor,
        topology: TopologySource,
        local_decision: Callable[[str], Answer],
        metrics: TxnMetrics,
        *,
        resolve_after_s: float,
        call_timeout_s: float,
    ) -> None:
        """``local_decision``: this shard's own coordinator (``Coordinator.decision``)."""
        self.participant = participant
        self.intents = intents
        self.executor = executor
        self._plan = topology
        self.local_decision = local_decision
        self.metrics = metrics
        self.resolve_after_s = resolve_after_s
        self.call_timeout_s = call_timeout_s

    async def ask(self, coordinator: str, txn: str) -> Answer:
        if coordinator == self._plan.topology.self_id:
            return await run_in_threadpool(self.local_decision, txn)
        try:
            reply = await self.executor.request(
                coordinator,
                "POST",
                "/internal/txn/decision",
                json_body={"txn": txn},
                idempotent=True,
                retries=0,
                timeout_s=self.call_timeout_s,
            )
            return Answer(reply["decision"])
        except (PeerUnavailable, PeerError, KeyError, ValueError) as exc:
            log.info("coordinator %s of in-doubt %s did not answer (%s)", coordinator, txn, str(exc))
            return Answer.PENDING

    async def resolve(self) -> int:
        """Resolve every in-doubt intent the coordinator has an answer for; returns how many."""
        resolved = 0
        for intent in self.intents.all():
            if not in_doubt(intent, now_ms(), self.resolve_after_s):
                continue
            answer = await self.ask(intent.coordinator, intent.txn)
            if answer is Answer.PENDING:
                continue
            if answer is Answer.COMMIT:
                await self.participant.commit(intent.txn)
            else:
                await self.participant.abort(intent.txn)
            self.metrics.resolved.labels(decision=answer.value).inc()
            log.warning("in-doubt transaction %s resolved: %s", intent.txn, answer.value)
            resolved += 1
        return resolved
