"""The coordinator: the shard that received a cross-shard transaction runs both phases.

Phase 1 asks every participant (the primary of each key group, this shard included when it is
one) to prepare, in parallel. Only when all voted yes does it log COMMIT durably (``TxnLog``,
first decision wins); then phase 2 tells every participant. The client's 200 comes after the
logged decision and one round of phase 2: a participant that missed it gets it from the re-drive
loop (``redrive``) or asks (``decision``). Any refusal aborts; aborts are not logged (presumed
abort), so an unknown transaction is an aborted one once it is not running here any more.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from ...errors import Unavailable
from ...storage.documents import Change, Check, Replicated, Write
from ...storage.hints import decode_items
from ...storage.intents import Decision, TxnLog
from ..documents import check_to_json, refusal, write_to_json
from ..fencing import WriteConcern
from ..remote import PeerError, PeerUnavailable, RemoteExecutor
from ..views import TopologySource
from .decisions import Answer, Group, answer_for, client_error, coordinator_decision, participant_groups
from .metrics import TxnMetrics
from .participant import Participant
from .settings import TxnSettings

log = logging.getLogger(__name__)


def as_change(r: Replicated) -> Change:
    """A committed record as the client's result (previous_version is not known here)."""
    return Change(r.collection, r.key, r.version, r.document, max(r.version - 1, 0), r.hlc, r.origin)


class Coordinator:
    def __init__(
        self,
        participant: Participant,
        txn_log: TxnLog,
        executor: RemoteExecutor,
        topology: TopologySource,
        settings: TxnSettings,
        metrics: TxnMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.participant = participant
        self.log = txn_log
        self.executor = executor
        self._plan = topology
        self.settings = settings
        self.metrics = metrics
        self._clock = clock
        #: transactions running here, by id → when they started (the decision's timeout)
        self._in_flight: dict[str, float] = {}
        #: transactions whose phase 2 is being sent right now (the re-drive loop skips them)
        self._finishing: set[str] = set()

    # -- the two phases --------------------------------------------------------------------
    async def run(self, writes: list[Write], checks: list[Check], concern: WriteConcern) -> list[Change]:
        """Commit on every participant or on none; results in the order of ``writes``."""
        topo = self._plan.topology
        groups = participant_groups(writes, checks, topo)
        txn = uuid.uuid4().hex
        self._in_flight[txn] = self._clock()
        try:
            votes = await asyncio.gather(
                *(self._prepare(p, g, txn, topo.epoch, concern) for p, g in groups.items()),
                return_exceptions=True,
            )
            errors = [v for v in votes if isinstance(v, BaseException)]
            decision = coordinator_decision(not isinstance(v, BaseException) for v in votes)
            if decision is Decision.COMMIT:
                if self.settings.pause_after_prepare_s:  # fault injection (off by default)
                    pause = self.settings.pause_after_prepare_s
                    log.warning(
                        "txn %s prepared; pausing %.1f s before deciding (fault injection)", txn, pause
                    )
                    await asyncio.sleep(pause)
                decision = (await run_in_threadpool(self.log.decide, txn, Decision.COMMIT, groups)).decision
        finally:
            self._in_flight.pop(txn, None)
        await self._phase_two(txn, decision, list(groups))
        if decision is Decision.COMMIT:
            self.metrics.outcomes.labels(kind="cross", outcome="committed").inc()
            out: dict[int, Change] = {}
            for participant, vote in zip(groups, votes, strict=True):
                for position, record in zip(groups[participant].positions, vote, strict=True):
                    out[position] = as_change(record)
            return [out[i] for i in range(len(writes))]
        self.metrics.outcomes.labels(kind="cross", outcome="aborted").inc()
        if not errors:
            raise Unavailable(
                f"transaction {txn} outlived its timeout and was presumed aborted; nothing was written",
                code="transaction_timeout",
            )
        raise client_error(errors)

    async def _prepare(
        self, participant: str, group: Group, txn: str, epoch: int, concern: WriteConcern
    ) -> list[Replicated]:
        me = self._plan.topology.self_id
        if participant == me:
            return await self.participant.prepare(txn, me, epoch, group.writes, group.checks, concern)
        # A participant is the keys' one primary (no failover): a breaker opened by failures that
        # are over (it restarted) must not abort every transaction for a minute.
        await self.executor.revive(participant)
        try:
            reply = await self.executor.request(
                participant,
                "POST",
                "/internal/txn/prepare",
                json_body={
                    "txn": txn,
                    "coordinator": me,
                    "epoch": epoch,
                    "writes": [write_to_json(w) for w in group.writes],
                    "checks": [check_to_json(c) for c in group.checks],
                    "concern": concern.value,
                },
                idempotent=False,
                retries=0,
                timeout_s=self.settings.call_timeout_s,
            )
        except PeerUnavailable as exc:
            code = exc.code if exc.status == 503 and exc.code else "coordinator_unavailable"
            raise Unavailable(
                f"participant {participant} could not prepare ({exc.reason}: {exc.message}); the "
                "transaction was aborted, nothing was written",
                code=code,
            ) from None
        except PeerError as exc:
            raise refusal(exc) from None
        return decode_items(reply["records"])

    async def _phase_two(self, txn: str, decision: Decision, participants: list[str]) -> bool:
        self._finishing.add(txn)
        try:
            acks = await asyncio.gather(*(self._finish(p, txn, decision) for p in participants))
            if decision is Decision.COMMIT and all(acks):
                await run_in_threadpool(self.log.mark_done, txn)
            return all(acks)
        finally:
            self._finishing.discard(txn)

    async def _finish(self, participant: str, txn: str, decision: Decision) -> bool:
        try:
            if participant == self._plan.topology.self_id:
                await (self.participant.commit if decision is Decision.COMMIT else self.participant.abort)(
                    txn
                )
                return True
            await self.executor.revive(participant)
            await self.executor.request(
                participant,
                "POST",
                f"/internal/txn/{decision.value}",
                json_body={"txn": txn},
                idempotent=True,
                retries=1,
                timeout_s=self.settings.call_timeout_s,
            )
            return True
        except (PeerUnavailable, PeerError) as exc:
            log.warning("participant %s missed the %s of %s (%s)", participant, decision.value, txn, str(exc))
            return False

    # -- recovery --------------------------------------------------------------------------
    def decision(self, txn: str) -> Answer:
        """What a participant asking about ``txn`` is told (blocking: may log a presumed abort)."""
        logged = self.log.get(txn)
        answer = answer_for(
            logged.decision if logged else None,
            self._in_flight.get(txn),
            self._clock(),
            self.settings.timeout_s,
        )
        if answer is None:
            answer = Answer(self.log.decide(txn, Decision.ABORT).decision.value)
        return answer

    async def redrive(self) -> None:
        """Send phase 2 again for every logged COMMIT some participant has not acknowledged
        (after a restart: all of them)."""
        for entry in await run_in_threadpool(self.log.pending_commits):
            if entry.txn in self._finishing:
                continue
            if await self._phase_two(entry.txn, Decision.COMMIT, list(entry.participants)):
                log.info("re-drove the commit of %s to %s", entry.txn, ", ".join(entry.participants))
