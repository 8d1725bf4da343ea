"""Termination: a shard holding a prepared intent finds its transaction's decision, or reaches
one, and commits or aborts accordingly — whether or not the coordinator ever comes back.

Every ``resolve_interval_s``, for each intent older than ``resolve_after_s`` (after a restart,
all of them), in this order:

1. this shard's own log: a decision it learned before (a crash between learning and applying);
2. the coordinator: its logged decision is final; while it still runs the transaction within
   ``timeout_s`` of the prepare, or does not answer within it, wait;
3. then (at once when the coordinator answers that it runs it no more): *fence* every decider
   (``decisions.deciders``, named in the intent). A decider answers the COMMIT it accepted, a
   decision it learned, or promises never to accept COMMIT. A COMMIT anywhere commits; once
   every decider is fenced, no COMMIT can ever be made final, so the transaction aborts. The
   coordinator needs one decider's COMMIT before phase 2, and a decider's log is
   first-writer-wins, so the two can never disagree.

So an in-doubt intent is settled within ``TxnSettings.in_doubt_bound_s`` of its prepare as long
as its deciders answer — with the coordinator gone for good (its volume lost, scaled in), or
just paused (its late COMMIT finds the fences and becomes an abort). Only a decider that is
unreachable while no answering shard knows a COMMIT keeps it waiting (it may hold the one COMMIT);
``themis txn resolve`` runs the same steps at once, without the timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool

from ...storage.intents import Decision, IntentStore, TxnLog, now_ms
from ..placement.views import TopologySource
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .decisions import Status, in_doubt, termination
from .metrics import TxnMetrics
from .participant import Participant

log = logging.getLogger(__name__)


class InDoubtResolver:
    def __init__(
        self,
        participant: Participant,
        intents: IntentStore,
        txn_log: TxnLog,
        executor: RemoteExecutor,
        topology: TopologySource,
        status_here: Callable[[str], Status],
        fence_here: Callable[[str], Awaitable[Status]],
        metrics: TxnMetrics,
        *,
        resolve_after_s: float,
        timeout_s: float,
        call_timeout_s: float,
    ) -> None:
        """``status_here`` / ``fence_here``: this shard's own answers (``Transactions``)."""
        self.participant = participant
        self.intents = intents
        self.log = txn_log
        self.executor = executor
        self._plan = topology
        self.status_here = status_here
        self.fence_here = fence_here
        self.metrics = metrics
        self.resolve_after_s = resolve_after_s
        self.timeout_s = timeout_s
        self.call_timeout_s = call_timeout_s

    async def _ask(self, shard: str, what: str, txn: str) -> Status | None:
        """``shard``'s status of ``txn`` (``what``: ``status``, or ``fence`` it); None: no answer."""
        if shard == self._plan.topology.self_id:
            return await (
                self.fence_here(txn) if what == "fence" else run_in_threadpool(self.status_here, txn)
            )
        try:
            reply = await self.executor.request(
                shard,
                "POST",
                f"/internal/txn/{what}",
                json_body={"txn": txn},
                idempotent=True,  # fencing twice is fencing once
                retries=0,
                timeout_s=self.call_timeout_s,
            )
            return Status.from_json(reply)
        except (PeerUnavailable, PeerError, KeyError, TypeError, ValueError) as exc:
            log.info("%s did not answer about in-doubt %s (%s)", shard, txn, str(exc))
            return None

    async def find(self, txn: str, force: bool = False) -> Decision | None:
        """The decision of ``txn``, held here as an intent, by the steps above; None while it
        must wait. ``force``: fence at once (an operator's resolve), not after the timeout."""
        own = await run_in_threadpool(self.log.get, txn)
        if own is not None and own.decision.final:
            return own.decision
        intents = self.intents.of(txn)
        if not intents:
            return None
        first = min(intents, key=lambda i: i.created_ms)
        waited = (now_ms() - first.created_ms) / 1000 >= self.timeout_s
        coordinator = await self._ask(first.coordinator, "status", txn)
        if coordinator is not None and coordinator.decision is not None and coordinator.decision.final:
            return coordinator.decision
        # A coordinator that answers and runs it no more will not decide it (it restarted, or
        # its abort was missed here): fence now rather than after the timeout.
        finished = coordinator is not None and not coordinator.running
        if not (waited or force or finished):
            return None
        deciders = first.deciders or (first.coordinator,)  # intents of an older version
        answers = await asyncio.gather(*(self._ask(d, "fence", txn) for d in deciders))
        return termination(dict(zip(deciders, answers, strict=True)), deciders)

    async def settle(self, txn: str, force: bool = False) -> Decision | None:
        """Find the decision of ``txn`` and apply it here (commit or abort its intents)."""
        decision = await self.find(txn, force)
        if not self.intents.of(txn):  # nothing (left) to apply here
            return decision
        if decision is Decision.COMMIT:
            await self.participant.commit(txn)
        elif decision is Decision.ABORT:
            await self.participant.abort(txn)
        else:
            return None
        self.metrics.resolved.labels(decision=decision.value).inc()
        log.warning("in-doubt transaction %s resolved: %s", txn, decision.value)
        return decision

    async def settle_id(self, txn_id: str, force: bool = False) -> dict[str, Decision | None]:
        """``settle`` every attempt at a client's transaction id held here, by name."""
        return {name: await self.settle(name, force) for name in sorted(self.intents.names_of(txn_id))}

    async def resolve(self) -> int:
        """Settle every in-doubt intent that can be settled now; returns how many transactions."""
        now = now_ms()
        txns = sorted({i.txn for i in self.intents.all() if in_doubt(i, now, self.resolve_after_s)})
        resolved = 0
        for txn in txns:
            if await self.settle(txn) is not None:
                resolved += 1
        return resolved
