"""The coordinator: the shard that received a cross-shard transaction runs both phases.

Phase 1 asks every participant (the primary of each key group, this shard included when it is
one) to prepare, in parallel. Only when all voted yes does it make COMMIT final, by logging it
on one *decider* (another shard, ``decisions.deciders``; first writer wins against a
terminator's fence), then in its own log for the re-drive (through the WAL, not fsynced: the
decider's entry is the one that binds); then phase 2 tells every participant. The client's 200
comes after the decision and one round of phase 2: a participant that missed it gets it from
the re-drive loop (``redrive``) or finds it itself (``recovery.py``). Any refusal aborts. A
decider that cannot say whether it logged the COMMIT leaves the outcome to the participants'
termination: the client hears 503 ``transaction_outcome_unknown`` and can ask
``GET /v1/transactions/{id}``. Each attempt runs under its own name (``attempt_name``), so
whatever becomes of a repeated attempt never touches the first one's intents or outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from ...errors import Conflict, Unavailable
from ...storage.documents import Change, Check, Replicated, Write
from ...storage.intents import Decision, TxnLog, attempt_name, client_id
from ...storage.record_wire import decode_items
from ..documents.coordinator import check_to_json, refusal, write_to_json
from ..placement.owners import candidates
from ..placement.views import TopologySource
from ..replication.delivery import NOT_SENT_REASONS
from ..replication.fencing import WriteConcern
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .decisions import Group, client_error, coordinator_decision, deciders, participant_groups
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
        #: attempts running here, by name → when they started (the decision's timeout)
        self._in_flight: dict[str, float] = {}
        #: the client id of each attempt running here → its name
        self._attempts: dict[str, str] = {}
        #: transactions whose phase 2 is being sent right now (the re-drive loop skips them)
        self._finishing: set[str] = set()

    # -- the two phases --------------------------------------------------------------------
    def running(self, txn: str) -> bool:
        """Is the transaction of this name (an attempt's, or an older version's bare id) being
        run here? An attempt at a client's id: ``names_of``."""
        return txn in self._in_flight

    def running_ids(self) -> list[str]:
        return sorted(self._in_flight)

    def names_of(self, txn_id: str) -> set[str]:
        """The attempt at this client id running here, if one is."""
        return {self._attempts[txn_id]} if txn_id in self._attempts else set()

    async def run(
        self, writes: list[Write], checks: list[Check], concern: WriteConcern, txn_id: str | None = None
    ) -> list[Change]:
        """Commit on every participant or on none; results in the order of ``writes``.
        ``txn_id``: the client's id for the transaction (else a fresh one): one attempt per id,
        run under a name of its own (``attempt_name``), so that what becomes of an attempt
        refused as a repeat never touches the first one's intents or outcome."""
        topo = self._plan.topology
        groups = participant_groups(writes, checks, topo)
        keys = [(w.collection, w.key) for w in writes] + [(c.collection, c.key) for c in checks]
        decider_ids = deciders(topo.self_id, groups, keys, topo)
        txn_id = txn_id or uuid.uuid4().hex
        txn = attempt_name(txn_id, uuid.uuid4().hex[:12])
        # checked and claimed with no await in between: a fence here either sees it running or
        # is seen (the same id again, or asked about before it arrived: never started)
        found = self.log.known(txn_id)
        if found is not None or txn_id in self._attempts:
            raise Conflict(
                f"transaction id {txn_id} is taken ({found.decision.value if found else 'running'}); "
                "nothing was written: GET /v1/transactions/{id} tells its outcome, a new attempt "
                "needs a new id",
                code="transaction_id_in_use",
            )
        self._in_flight[txn] = self._clock()
        self._attempts[txn_id] = txn
        try:
            votes = await asyncio.gather(
                *(self._prepare(p, g, txn, topo.epoch, concern, decider_ids) for p, g in groups.items()),
                return_exceptions=True,
            )
            errors = [v for v in votes if isinstance(v, BaseException)]
            decision = coordinator_decision(not isinstance(v, BaseException) for v in votes)
            if decision is Decision.COMMIT:
                await self._pause(txn, self.settings.pause_after_prepare_s, "prepared", "deciding")
                decision = await self._decide(txn, list(groups), decider_ids)
                await self._pause(txn, self.settings.pause_after_decision_s, "decided", "logging it")
                # the decider's entry is the one that binds; this one re-drives phase 2 and
                # answers the participants' questions first, and losing it to a power cut
                # only leaves both to the deciders (recovery.py): it is not fsynced
                await run_in_threadpool(
                    self.log.settle, txn, decision, groups, decision is Decision.COMMIT, False
                )
            else:  # a participant that misses phase 2, or a client with the id, asks here
                await run_in_threadpool(lambda: self.log.settle(txn, Decision.ABORT, sync=False))
        except Unavailable:
            self.metrics.outcomes.labels(kind="cross", outcome="unknown").inc()
            raise
        finally:
            self._in_flight.pop(txn, None)
            self._attempts.pop(txn_id, None)
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
                f"transaction {txn_id} prepared everywhere but could not be made final: its deciders "
                "were fenced (it outlived its timeout) or none could be reached; it was aborted, "
                "nothing was written",
                code="transaction_timeout",
            )
        raise client_error(errors)

    async def _pause(self, txn: str, seconds: float, what: str, before: str) -> None:
        """Fault injection, off by default: the e2e tests kill shards in this window."""
        if seconds:
            log.warning("txn %s %s; pausing %.1f s before %s (fault injection)", txn, what, seconds, before)
            await asyncio.sleep(seconds)

    async def _decide(self, txn: str, participants: list[str], decider_ids: tuple[str, ...]) -> Decision:
        """Make COMMIT final on the first decider that answers (those believed down last); a
        decider fenced by a terminator answers otherwise, and it is ABORT. A request that may
        have been logged without an answer leaves the outcome to the terminators (503)."""
        me = self._plan.topology.self_id
        for decider in candidates(decider_ids, self.executor.open_peers()):
            if decider == me:
                entry = await run_in_threadpool(self.log.accept, txn, participants)
                return Decision.COMMIT if entry.decision is Decision.COMMIT else Decision.ABORT
            try:
                reply = await self.executor.request(
                    decider,
                    "POST",
                    "/internal/txn/accept",
                    json_body={"txn": txn, "participants": participants},
                    idempotent=False,
                    retries=0,
                    timeout_s=self.settings.call_timeout_s,
                )
            except PeerError as exc:  # refused: nothing logged there
                log.warning("decider %s refused the commit of %s: %s", decider, txn, str(exc))
                continue
            except PeerUnavailable as exc:
                if exc.reason in NOT_SENT_REASONS:
                    continue
                raise Unavailable(
                    f"every participant prepared transaction {client_id(txn)}, but decider {decider} "
                    f"did not confirm its commit ({exc.reason}); its participants settle it within "
                    f"{self.settings.in_doubt_bound_s:.0f} s: GET /v1/transactions/{client_id(txn)} "
                    "tells the outcome",
                    code="transaction_outcome_unknown",
                ) from None
            logged = Decision(reply["decision"])
            return Decision.COMMIT if logged is Decision.COMMIT else Decision.ABORT
        return Decision.ABORT  # no decider was reached: nothing is logged anywhere

    async def _prepare(
        self,
        participant: str,
        group: Group,
        txn: str,
        epoch: int,
        concern: WriteConcern,
        decider_ids: tuple[str, ...],
    ) -> list[Replicated]:
        me = self._plan.topology.self_id
        if participant == me:
            return await self.participant.prepare(
                txn, me, epoch, group.writes, group.checks, concern, decider_ids
            )
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
                    "deciders": list(decider_ids),
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
    async def redrive(self) -> None:
        """Send phase 2 again for every logged COMMIT some participant has not acknowledged
        (after a restart: all of them)."""
        for entry in await run_in_threadpool(self.log.pending_commits):
            if entry.txn in self._finishing:
                continue
            if await self._phase_two(entry.txn, Decision.COMMIT, list(entry.participants)):
                log.info("re-drove the commit of %s to %s", entry.txn, ", ".join(entry.participants))
