"""A participant: the primary of a group of keys in a cross-shard transaction (and its replicas).

Prepare validates the group's conditions (``if_version`` and checks) under the coordinator's
per-key locks, stamps the records exactly as a single-shard write would, writes a durable
primary intent (which locks the keys until the decision) and then sends a replica intent to the
keys' other owners; it votes yes only once the write concern's number of owners hold the intent.
Commit installs the records (stamps decide, as for any replicated write) and drops the intent,
then tells the replicas, or hints the records to a replica it cannot reach. Abort drops it.
"""

from __future__ import annotations

import asyncio
import logging

from ...errors import Conflict, Unavailable
from ...storage.documents import Check, DocumentStore, Replicated, Write
from ...storage.group_commit import Ops
from ...storage.intents import Decision, Intent, IntentStore, Role, TxnLog, client_id
from ...storage.record_wire import encode_items
from ..placement.views import TopologySource
from ..replication.delivery import Replication, delivery_of
from ..replication.fencing import Delivery, KeyLocks, WriteConcern, fence_refusal, required_acks
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .decisions import enough_copies
from .metrics import TxnMetrics

log = logging.getLogger(__name__)


class Participant:
    def __init__(
        self,
        store: DocumentStore,
        intents: IntentStore,
        txn_log: TxnLog,
        locks: KeyLocks,
        executor: RemoteExecutor,
        topology: TopologySource,
        replication: Replication,
        metrics: TxnMetrics,
        *,
        call_timeout_s: float = 10.0,
    ) -> None:
        """``locks``: the same per-key locks single-shard writes take (``DistributedDocuments``)."""
        self.store = store
        self.intents = intents
        self.log = txn_log
        self.locks = locks
        self.executor = executor
        self._plan = topology
        self.replication = replication
        self.metrics = metrics
        self.call_timeout_s = call_timeout_s
        self.refresh()

    def refresh(self) -> None:
        self.metrics.in_doubt.set(len(self.intents))

    def _others(self, records: tuple[Replicated, ...] | list[Replicated]) -> dict[str, list[Replicated]]:
        """The records each other owner of their keys keeps."""
        topo = self._plan.topology
        per_peer: dict[str, list[Replicated]] = {}
        for r in records:
            for owner in topo.owners(r.collection, r.key):
                if owner != topo.self_id:
                    per_peer.setdefault(owner, []).append(r)
        return per_peer

    # -- phase 1 -----------------------------------------------------------------------------
    async def prepare(
        self,
        txn: str,
        coordinator: str,
        epoch: int,
        writes: list[Write],
        checks: list[Check],
        concern: WriteConcern,
        deciders: tuple[str, ...] = (),
    ) -> list[Replicated]:
        """Vote yes (return the stamped records) or raise: 409 on a failed condition or a key
        locked by another transaction, 409 fence codes from another epoch, 409
        ``transaction_id_in_use`` for an id this shard has seen before, 503 when too few owners
        could keep the intent. A refusal leaves nothing prepared here."""
        topo = self._plan.topology
        self._refuse_known(txn)
        keys = sorted({(w.collection, w.key) for w in writes} | {(c.collection, c.key) for c in checks})
        refusal = fence_refusal(topo, epoch, topo.self_id, keys)
        if refusal is not None:
            raise refusal
        async with self.locks.hold(keys):
            self._refuse_known(txn)
            held = self.intents.holders(keys)
            if held:
                (collection, key), other = next(iter(held.items()))
                raise Conflict(
                    f"{collection}/{key} is locked by transaction {other}, which is being committed",
                    code="transaction_conflict",
                )
            # inline: validation and stamping take microseconds; a worker-thread hop costs more
            records = self.store.prepare(writes, checks)
            intent = Intent(
                txn,
                coordinator,
                epoch,
                Role.PRIMARY,
                tuple(records),
                tuple(checks),
                topo.self_id,
                deciders=tuple(deciders),
            )
            per_peer = self._others(records)
            peers = sorted(per_peer)
            # the local intent and the replicas' copies are written at the same time
            _, *answers = await asyncio.gather(
                self.intents.put(intent),
                *(self._prepare_replica(p, intent, per_peer[p]) for p in peers),
            )
        self.refresh()
        delivered = dict(zip(peers, answers, strict=True))
        need = required_acks(concern, topo.plan.copies)
        if not enough_copies({(r.collection, r.key) for r in records}, topo, delivered, need):
            await self.abort(txn)
            held_by = 1 + sum(d is Delivery.HELD for d in delivered.values())
            raise Unavailable(
                f"{topo.self_id} could keep this transaction's intent on {held_by} owner(s) and "
                f"w={concern.value} needs {need}; nothing was written",
                code="replicas_unavailable",
            )
        return records

    async def _prepare_replica(self, peer: str, intent: Intent, records: list[Replicated]) -> Delivery:
        await self.executor.revive(peer)
        try:
            await self.executor.request(
                peer,
                "POST",
                "/internal/txn/replica",
                json_body={
                    "txn": intent.txn,
                    "coordinator": intent.coordinator,
                    "primary": self._plan.topology.self_id,
                    "epoch": intent.epoch,
                    "records": encode_items(records),
                    "deciders": list(intent.deciders),
                },
                idempotent=True,  # storing the same intent twice is harmless
                retries=0,
                timeout_s=self.call_timeout_s,
            )
        except (PeerUnavailable, PeerError) as exc:
            log.warning("owner %s did not keep the intent of %s: %s", peer, intent.txn, str(exc))
            return delivery_of(exc)
        return Delivery.HELD

    def _refuse_known(self, txn: str) -> None:
        """409 for an attempt at a transaction id this shard knows already: one it prepared, or
        any other attempt at the id (an intent of any role, a logged fate, a fence). An id is
        one attempt: a resent request must not apply twice, and a fenced one never starts."""
        txn_id = client_id(txn)
        found = self.log.known(txn_id)
        me = self._plan.topology.self_id
        if found is not None or any(i.txn != txn or i.primary == me for i in self.intents.of_id(txn_id)):
            state = found.decision.value if found is not None else "prepared"
            raise Conflict(
                f"transaction id {txn_id} is taken ({state} here); nothing was written: "
                "GET /v1/transactions/{id} tells its outcome, a new attempt needs a new id",
                code="transaction_id_in_use",
            )

    async def prepare_replica(
        self,
        txn: str,
        coordinator: str,
        primary: str,
        epoch: int,
        records: list[Replicated],
        deciders: tuple[str, ...] = (),
    ) -> None:
        """Keep a copy of a primary's intent (fenced like a replicated write; locks nothing)."""
        refusal = fence_refusal(self._plan.topology, epoch, primary, [(r.collection, r.key) for r in records])
        if refusal is not None:
            raise refusal
        intent = Intent(
            txn, coordinator, epoch, Role.REPLICA, tuple(records), (), primary, deciders=tuple(deciders)
        )
        await self.intents.put(intent)  # the same again is harmless
        self.refresh()

    # -- phase 2 -----------------------------------------------------------------------------
    # A decision is per transaction, so either one applies to every intent of it held here: the
    # shard's own primary intent and the replica intents it keeps for other participants.
    async def commit(self, txn: str) -> None:
        """Install the records of every intent of ``txn`` here and drop them (idempotent)."""
        for intent in self.intents.of(txn):
            async with self.locks.hold(intent.keys):
                if intent not in self.intents.of(txn):  # resolved meanwhile (phase 2 and the resolver)
                    continue
                await self._install(intent)
            self.refresh()
            if intent.role is Role.PRIMARY:
                per_peer = self._others(intent.records)
                await asyncio.gather(*(self._commit_replica(p, txn, per_peer[p]) for p in sorted(per_peer)))

    async def _install(self, intent: Intent) -> None:
        """The records, the intent's removal and the decision in one synced batch: installed,
        unlocked and known, or (after a crash) still prepared — never half."""

        def also(ops: Ops) -> None:
            self.intents.drop_into(intent, ops)
            self.log.settle_into(ops, intent.txn, Decision.COMMIT)

        await self.store.apply_replicated_async(list(intent.records), also=also)
        self.intents.forget(intent)

    async def _commit_replica(self, peer: str, txn: str, records: list[Replicated]) -> None:
        try:
            await self._tell(peer, "commit", txn)
        except (PeerUnavailable, PeerError) as exc:
            log.warning("owner %s missed the commit of %s (%s); hinting the records", peer, txn, str(exc))
            await self.replication.hint(peer, records)

    async def abort(self, txn: str) -> None:
        """Drop every intent of ``txn`` here and release its keys (idempotent); replicas are
        told, best effort (one that misses it finds the decision itself: ``recovery.py``)."""
        for intent in self.intents.of(txn):
            await self.intents.delete(intent, lambda ops, t=txn: self.log.settle_into(ops, t, Decision.ABORT))
            self.refresh()
            if intent.role is Role.PRIMARY:
                for peer in sorted(self._others(intent.records)):
                    try:
                        await self._tell(peer, "abort", txn)
                    except (PeerUnavailable, PeerError) as exc:
                        log.info("owner %s missed the abort of %s (%s); it will ask", peer, txn, str(exc))

    async def _tell(self, peer: str, what: str, txn: str) -> None:
        await self.executor.request(
            peer,
            "POST",
            f"/internal/txn/{what}",
            json_body={"txn": txn},
            idempotent=True,
            retries=1,
            timeout_s=self.call_timeout_s,
        )
