"""Fenced writes: one coordinator per key per epoch, and how many owners must hold a write.

The rule. The *epoch* is the ring version of the cluster plan. In an epoch, a key's only
coordinator is its **primary**: the first of its owners in ring order. Nothing else — not a
breaker, not a timeout, not gossip — makes another shard coordinate it; a replica takes over
only through a plan change (a new ring without the old primary, i.e. a new epoch). Every shard
computes the primary from the plan alone, so both sides of a partition agree on it without
talking: the side without the primary cannot write the key, it answers 503.

The fence. A write carries its coordinator's epoch and id to every owner. An owner refuses it
(409, nothing applied) when the epoch is not its own (``stale_epoch`` / ``epoch_ahead``), when
the sender is not the key's primary in that epoch (``not_coordinator``), or when it does not own
the key itself (``not_owner``). A coordinator on a stale plan therefore cannot collect the acks
of owners that moved on, and a forwarded write that reaches a shard which is no longer primary
is refused there instead of being coordinated twice. During a resharding the new primary reads
the key through from its previous owners before it writes (``migration.Handoff.fetch_previous``);
the previous owner answers only once it has adopted the new epoch itself and after its own
in-flight write to that key (key lock) finished, so an old-epoch write is either visible to the
new primary or refused.

Durability. The coordinator serialises writes per key (``KeyLocks``), stamps the new records
(``storage.stamps``) and sends them to the other owners *first*; it installs them locally and
acknowledges only once ``required_acks`` owners (itself included) hold them durably. The write
concern is per request: ``all`` (the default: RAID1/5 → 2 copies, RAID6 → 3, what the README
promises), ``majority`` or ``1``. Owners that missed a write acknowledged at a lower concern get
a durable hint. A write that cannot reach enough owners fails with 503 and installs nothing:

* every miss provably not applied (connection refused, breaker open, 409): nothing anywhere;
* an owner that may have applied it (timeout, 5xx) or did (an ack short of the concern): the
  coordinator installs a *burn* record — the previous document again, one version above the
  failed record — and replicates it; it outranks the unacknowledged record wherever they meet,
  so the failed write is never served, on any replica, after any repair. The burn takes a
  version of its own (not the failed one's with a later stamp) because version numbers are
  what ``If-Match`` compares: a client that read the failed record from an owner that took it
  must get a 409, not a write built on a document that never committed (the nemesis suite's
  bank workload lost money that way). Its document is the one the key had when the write was
  prepared, not when it failed: a repair may copy the failed record back here meanwhile.

Failover. The epoch is the *plan* epoch: the ring version, bumped again whenever the plan
authority changes the in-sync set (``plan_authority.in_sync`` argues why that cannot split the brain). A key's
primary is its first in-sync owner that is not rejoining, and a write waits for its in-sync
owners only (``write_owners``): ``w=all`` means every in-sync copy, as Kafka's ``acks=all``
does; out-of-sync owners get hints. ``min_insync`` is the floor below which ``w=all`` and
``majority`` are refused (503 ``not_enough_replicas``, naming it).

Why not Raft per range. A consensus group per vnode range (thousands per shard) with a Python
library (pysyncobj, raftos) means a log, elections and snapshots per range on the write path and
a new failure model for every part that reads the store directly (vector index, AQL, RAID). The
plan is already a single agreed sequence of epochs written by one party (the operator or
``themis``'s supervisor), so leadership per key is taken from it: a dead primary's keys move to
an in-sync copy when the authority fences it (seconds: its lease, then one plan write).

Everything here is pure; ``documents.DistributedDocuments`` drives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum

from ...errors import BadRequest, Conflict, Unavailable
from ..placement.owners import Topology


class WriteConcern(StrEnum):
    ONE = "1"
    MAJORITY = "majority"
    ALL = "all"


DEFAULT_CONCERN = WriteConcern.ALL


def parse_concern(value: str | None) -> WriteConcern:
    if value is None or value == "":
        return DEFAULT_CONCERN
    try:
        return WriteConcern(value)
    except ValueError:
        raise BadRequest(
            f"w must be 1, majority or all, not {value!r}", code="invalid_write_concern"
        ) from None


def required_acks(concern: WriteConcern, copies: int) -> int:
    """Owners (the coordinator included) that must hold a write durably before it is acknowledged."""
    if concern is WriteConcern.ONE:
        return 1
    if concern is WriteConcern.MAJORITY:
        return copies // 2 + 1
    return copies


def primary(topology: Topology, collection: str, key: str) -> str:
    """The key's one coordinator in this epoch: its first in-sync owner in ring order that is
    not still rejoining (the plan keeps at least one in-sync owner per key)."""
    in_sync = topology.in_sync(collection, key)
    settled = [o for o in in_sync if o not in topology.plan.rejoining]
    return (settled or in_sync)[0]


def write_owners(topology: Topology, collection: str, key: str) -> list[str]:
    """The owners a write of the key waits for: its in-sync owners (``w=all`` means all of
    them, as Kafka's ``acks=all`` means every in-sync replica). Owners out of sync get hints."""
    return topology.in_sync(collection, key)


def floor_refusal(
    topology: Topology, concern: WriteConcern, keys: Iterable[tuple[str, str]]
) -> Unavailable | None:
    """503 naming the floor when a key has fewer in-sync copies than ``min_insync`` (``w=1``
    promises one copy only and is not held to it)."""
    floor = topology.plan.min_insync
    if concern is WriteConcern.ONE:
        return None
    for collection, key in keys:
        n = len(write_owners(topology, collection, key))
        if n < floor:
            return Unavailable(
                f"{collection}/{key} has {n} in-sync cop{'y' if n == 1 else 'ies'}, below the floor "
                f"min_insync={floor} (w={concern.value}); nothing was written",
                code="not_enough_replicas",
            )
    return None


FENCE_CODES = frozenset({"stale_epoch", "epoch_ahead", "not_coordinator", "not_owner", "not_in_sync"})


def fence_refusal(
    topology: Topology, epoch: int, sender: str, keys: Iterable[tuple[str, str]]
) -> Conflict | None:
    """Why this owner must refuse a write of ``keys`` coordinated by ``sender`` in ``epoch``
    (None: accept it)."""
    mine = topology.epoch
    if epoch < mine:
        return Conflict(f"write from epoch {epoch}; this shard is at epoch {mine}", code="stale_epoch")
    if epoch > mine:
        return Conflict(f"write from epoch {epoch}; this shard is still at epoch {mine}", code="epoch_ahead")
    for collection, key in keys:
        owners = topology.owners(collection, key)
        if topology.self_id not in owners:
            return Conflict(f"{topology.self_id} does not own {collection}/{key}", code="not_owner")
        if not topology.in_sync_self:
            return Conflict(f"{topology.self_id} is out of sync in epoch {mine}", code="not_in_sync")
        coordinator = primary(topology, collection, key)
        if coordinator != sender:
            return Conflict(
                f"{sender} is not the coordinator of {collection}/{key} in epoch {mine} ({coordinator} is)",
                code="not_coordinator",
            )
    return None


class Delivery(StrEnum):
    """What one owner's answer to a write means."""

    HELD = "held"  # applied durably (or already held)
    NOT_APPLIED = "not_applied"  # provably not applied: refused, or never sent
    FENCED = "fenced"  # refused by the fence (epochs differ while a plan change spreads)
    UNKNOWN = "unknown"  # may have been applied (timeout, 5xx, torn connection)


class Outcome(StrEnum):
    COMMIT = "commit"  # enough owners hold it: install locally, acknowledge
    FAIL = "fail"  # not enough, and no other owner can hold it: 503, nothing anywhere
    BURN = "burn"  # not enough, but some owner may hold it: 503 and outrank it


@dataclass(frozen=True)
class Tally:
    held: int
    not_applied: int
    unknown: int


def tally(deliveries: Iterable[Delivery]) -> Tally:
    found = list(deliveries)
    return Tally(
        found.count(Delivery.HELD),
        found.count(Delivery.NOT_APPLIED) + found.count(Delivery.FENCED),
        found.count(Delivery.UNKNOWN),
    )


def decide(deliveries: Iterable[Delivery], required: int) -> Outcome:
    """The coordinator's decision once every other owner answered (it holds the write itself)."""
    t = tally(deliveries)
    if 1 + t.held >= required:
        return Outcome.COMMIT
    return Outcome.BURN if t.held or t.unknown else Outcome.FAIL


class KeyLocks:
    """One asyncio lock per key in use: a coordinator's writes to one key run one at a time,
    from prepare to install, so no two of them take the same version."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._users: dict[tuple[str, str], int] = {}

    @asynccontextmanager
    async def hold(self, keys: Iterable[tuple[str, str]]) -> AsyncIterator[None]:
        ordered = sorted(set(keys))  # one global order: no deadlock between multi-key writes
        for k in ordered:
            self._users[k] = self._users.get(k, 0) + 1
            self._locks.setdefault(k, asyncio.Lock())
        taken: list[asyncio.Lock] = []
        try:
            for k in ordered:
                await self._locks[k].acquire()
                taken.append(self._locks[k])
            yield
        finally:
            for lock in taken:
                lock.release()
            for k in ordered:
                self._users[k] -= 1
                if not self._users[k]:
                    del self._users[k]
                    del self._locks[k]

    def __len__(self) -> int:
        return len(self._locks)
