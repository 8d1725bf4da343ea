"""Durable two-phase-commit state: prepare intents (participants) and the coordinator log.

Both live in the document store's RocksDB, in their own column families, written with the same
synced ``WriteBatch`` as documents, so they survive ``kill -9`` exactly as acknowledged writes do.

* ``intents``: (txn id, primary) → an :class:`Intent`: the stamped records a participant will install on
  commit, the read checks it validated, the coordinator to ask for the decision, the epoch it was
  prepared in and when. A *primary* intent locks its keys (no other write or prepare may touch
  them until it is resolved); a *replica* intent is the copy an owner keeps so that a commit
  acknowledged at the write concern has that many durable copies even if the primary dies.
* ``txn_log``: txn id → a :class:`LogEntry`, what this shard knows of the transaction's fate, in
  one of three roles (``cluster.transactions`` has the protocol):
  - a *decider* (``accept``): the coordinator makes COMMIT final by logging it, first writer
    wins, on one decider; a ``FENCED`` entry (``fence``: written by whoever terminates a
    transaction whose coordinator went quiet) makes this shard refuse that COMMIT for good;
  - the *coordinator* and every *participant* (``settle``, ``settle_into``): the final decision
    once known (a ``FENCED`` entry gives way to it; a final one never changes);
  Finished entries are pruned after a retention period (``prune``), so the log stays bounded.

Every attempt at a client's transaction id is a transaction of its own, named
``{id}@{nonce}`` (:func:`attempt_name`; ``@`` is never in a client's id): intents, log entries and
phase-2 messages name the attempt, so one attempt's outcome never speaks for another's, while the
id itself stays one attempt's (``TxnLog.known``: any entry of any attempt, or a fence of the bare
id, spends it). Entries and intents of an older version carry the bare id as their name.

The classes do I/O only; the decisions are in ``cluster.transactions.decisions``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rocksdict import WriteBatch, WriteOptions

from .decision_gate import DecisionGate
from .documents import Check, DocumentStore, Replicated
from .group_commit import Ops
from .record_wire import decode_items, encode_items

log = logging.getLogger(__name__)


class Role(StrEnum):
    PRIMARY = "primary"  # validated the conditions and holds the key locks
    REPLICA = "replica"  # keeps a copy of the primary's records for durability


class Decision(StrEnum):
    COMMIT = "commit"
    ABORT = "abort"
    #: not a decision: a promise by this shard never to accept COMMIT as a decider
    FENCED = "fenced"

    @property
    def final(self) -> bool:
        return self is not Decision.FENCED


#: joins a client's transaction id and an attempt's nonce (``api/transactions.py`` never admits it in an id)
ATTEMPT_SEP = "@"


def attempt_name(txn_id: str, nonce: str) -> str:
    """The name one attempt at ``txn_id`` goes by inside the cluster."""
    return f"{txn_id}{ATTEMPT_SEP}{nonce}"


def client_id(name: str) -> str:
    """The client's transaction id an attempt's name belongs to (a bare id: itself)."""
    return name.split(ATTEMPT_SEP, 1)[0]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Intent:
    txn: str
    coordinator: str
    epoch: int
    role: Role
    records: tuple[Replicated, ...]
    checks: tuple[Check, ...] = ()
    #: the primary participant of the records (this shard itself for a primary intent): one
    #: shard may hold a primary intent and replica intents of several primaries in one txn
    primary: str = ""
    created_ms: int = field(default_factory=now_ms)
    #: the shards that may hold the final COMMIT (``decisions.deciders``), in the order the
    #: coordinator tries them: a terminator fences all of them
    deciders: tuple[str, ...] = ()

    @property
    def ident(self) -> bytes:
        return self.txn.encode() + b"\x00" + self.primary.encode()

    @property
    def keys(self) -> list[tuple[str, str]]:
        """Every key the intent covers, written or checked."""
        return sorted(
            {(r.collection, r.key) for r in self.records} | {(c.collection, c.key) for c in self.checks}
        )


def encode_checks(checks: Iterable[Check]) -> list[dict[str, Any]]:
    return [{"collection": c.collection, "key": c.key, "version": c.version} for c in checks]


def decode_checks(raw: Iterable[dict[str, Any]]) -> list[Check]:
    return [Check(str(c["collection"]), str(c["key"]), int(c["version"])) for c in raw]


def encode_intent(i: Intent) -> bytes:
    return json.dumps(
        {
            "txn": i.txn,
            "coordinator": i.coordinator,
            "epoch": i.epoch,
            "role": i.role.value,
            "records": encode_items(list(i.records)),
            "checks": encode_checks(i.checks),
            "primary": i.primary,
            "created_ms": i.created_ms,
            "deciders": list(i.deciders),
        }
    ).encode()


def decode_intent(raw: bytes) -> Intent:
    d = json.loads(raw)
    return Intent(
        d["txn"],
        d["coordinator"],
        int(d["epoch"]),
        Role(d["role"]),
        tuple(decode_items(d["records"])),
        tuple(decode_checks(d["checks"])),
        d.get("primary", ""),
        int(d["created_ms"]),
        tuple(d.get("deciders", ())),
    )


class IntentStore:
    """Prepared intents on this shard, and the keys they lock (kept in memory, rebuilt from
    RocksDB on open).

    A replica's copy of a primary's intent locks its keys too. Writes are refused only where
    they are coordinated, on a key's primary, so while the replica is not its primary the lock
    costs nothing; but when a failover makes it the primary, no write may overtake the
    transaction before it is resolved: the intent's records carry the version they were prepared
    at, and a write installed on top first would outrank them when the transaction commits
    here — half a transaction lost (a debit without its credit, found by the nemesis)."""

    def __init__(self, store: DocumentStore) -> None:
        self._store = store
        self._cf, self._handle, _, _ = store.column_family("intents")
        self._lock = threading.Lock()
        self._intents: dict[bytes, Intent] = {}
        self._holders: dict[tuple[str, str], set[str]] = {}
        for _, raw in self._cf.items():
            intent = decode_intent(raw)
            self._remember(intent)

    def _remember(self, intent: Intent) -> None:
        self._intents[intent.ident] = intent
        for k in intent.keys:
            self._holders.setdefault(k, set()).add(intent.txn)

    async def put(self, intent: Intent) -> None:
        """Write the intent durably and take its keys' locks. Through the store's group commit:
        the fsync is shared with concurrent writes, and no thread holds the GIL through it while
        the event loop waits."""
        value = encode_intent(intent)
        await self._store.write_durably(lambda ops: ops.put(intent.ident, value, self._handle))
        with self._lock:
            self._remember(intent)

    def of(self, txn: str) -> list[Intent]:
        """Every intent of ``txn`` held here (its own primary one, replica ones of others)."""
        return [i for i in list(self._intents.values()) if i.txn == txn]

    async def delete(self, intent: Intent, also: Callable[[Ops], None] | None = None) -> None:
        """Drop the intent (aborted) and release its locks; ``also`` adds to the same batch
        (through the group commit, as ``put``)."""

        def fill(ops: Ops) -> None:
            self.drop_into(intent, ops)
            if also is not None:
                also(ops)

        await self._store.write_durably(fill)
        self.forget(intent)

    def drop_into(self, intent: Intent, batch: Ops) -> None:
        """Add the intent's removal to ``batch`` (committed with its records, atomically);
        ``forget`` it once the batch is durable."""
        batch.delete(intent.ident, self._handle)

    def forget(self, intent: Intent) -> None:
        """Release a removed intent's locks (those no other intent of its transaction holds)."""
        with self._lock:
            if self._intents.pop(intent.ident, None) is None:
                return
            still = {k for i in self._intents.values() if i.txn == intent.txn for k in i.keys}
            for k in intent.keys:
                held = self._holders.get(k)
                if held is not None and k not in still:
                    held.discard(intent.txn)
                    if not held:
                        del self._holders[k]

    def holders(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The keys among ``keys`` locked by a prepared transaction, and by which (the first in
        id order, where several are)."""
        return {k: min(self._holders[k]) for k in keys if k in self._holders}

    def all(self) -> list[Intent]:
        return list(self._intents.values())

    def of_id(self, txn_id: str) -> list[Intent]:
        """Every intent of every attempt at a client's transaction id held here (one pass)."""
        return [i for i in list(self._intents.values()) if client_id(i.txn) == txn_id]

    def names_of(self, txn_id: str) -> set[str]:
        """The attempts of a client's transaction id (its own name included) held here."""
        return {i.txn for i in self.of_id(txn_id)}

    def prepared(self, txn: str) -> bool:
        """Does this shard hold any intent of ``txn``?"""
        return any(i.txn == txn for i in list(self._intents.values()))

    def __len__(self) -> int:
        return len(self._intents)


@dataclass(frozen=True)
class LogEntry:
    txn: str
    decision: Decision
    participants: tuple[str, ...] = ()
    #: every participant acknowledged phase 2 (nothing left to re-drive)
    done: bool = False
    at_ms: int = field(default_factory=now_ms)


def encode_entry(e: LogEntry) -> bytes:
    return json.dumps(
        {
            "txn": e.txn,
            "decision": e.decision.value,
            "participants": list(e.participants),
            "done": e.done,
            "at_ms": e.at_ms,
        }
    ).encode()


def decode_entry(raw: bytes) -> LogEntry:
    d = json.loads(raw)
    return LogEntry(
        d["txn"], Decision(d["decision"]), tuple(d["participants"]), bool(d["done"]), int(d["at_ms"])
    )


class TxnLog:
    """What this shard knows of each transaction's fate (see the module docstring)."""

    def __init__(self, store: DocumentStore, gate: DecisionGate | None = None) -> None:
        #: no COMMIT entry becomes durable while it is closed (a backup's cut: decision_gate.py)
        self.gate = gate or DecisionGate()
        self._cf, self._handle, self._db, self._sync = store.column_family("txn_log")
        self._unsynced = WriteOptions()  # still through the WAL (never disabled), not fsynced
        self._lock = threading.Lock()
        #: COMMIT decisions not yet acknowledged by every participant (rebuilt on open)
        self._pending: set[str] = {
            e.txn
            for e in (decode_entry(raw) for _, raw in self._cf.items())
            if e.decision is Decision.COMMIT and not e.done
        }

    def _write(self, entry: LogEntry, sync: bool = True) -> None:
        batch = WriteBatch(raw_mode=True)
        batch.put(entry.txn.encode(), encode_entry(entry), self._handle)
        if entry.decision is Decision.COMMIT:  # every COMMIT this shard logs, whatever its role
            with self.gate.passage():
                self._db.write(batch, self._sync if sync else self._unsynced)
        else:
            self._db.write(batch, self._sync if sync else self._unsynced)

    def get(self, txn: str) -> LogEntry | None:
        raw = self._cf.get(txn.encode())
        return None if raw is None else decode_entry(raw)

    def _entries(self, txn_id: str) -> Iterator[LogEntry]:
        """The bare id's own entry (an older version's transaction, or a fence by a client's
        question), then each attempt's, lazily (one seek: the attempts' names sort together
        after ``{id}@``)."""
        bare = self.get(txn_id)
        if bare is not None:
            yield bare
        prefix = (txn_id + ATTEMPT_SEP).encode()
        for key, raw in self._cf.items(from_key=prefix):
            if not key.startswith(prefix):
                return
            yield decode_entry(raw)

    def entries_of(self, txn_id: str) -> list[LogEntry]:
        """Every entry of a client's transaction id (``_entries``)."""
        return list(self._entries(txn_id))

    def known(self, txn_id: str) -> LogEntry | None:
        """An entry that spends a client's transaction id here, if any (``_entries``)."""
        return next(self._entries(txn_id), None)

    def accept(self, txn: str, participants: Iterable[str] = ()) -> LogEntry:
        """As a decider: make COMMIT final here unless something is logged already (a fence, or
        a decision); return the entry that stands (COMMIT only if this call or an earlier one
        logged it). Another attempt at the same client id logged here, or a fence of the bare
        id, fences this one: an id commits at most one attempt wherever its deciders meet."""
        with self._lock:
            found = self.get(txn)
            if found is not None:
                return found
            spent = client_id(txn) != txn and self.known(client_id(txn)) is not None
            if spent:
                entry = LogEntry(txn, Decision.FENCED, done=True)
            else:
                entry = LogEntry(txn, Decision.COMMIT, tuple(sorted(participants)), done=True)
            self._write(entry)
            return entry

    def fence(self, txn: str) -> LogEntry:
        """Promise never to accept COMMIT for ``txn`` (unless this shard already did: then the
        COMMIT is returned); return the entry that stands."""
        with self._lock:
            found = self.get(txn)
            if found is not None:
                return found
            entry = LogEntry(txn, Decision.FENCED, done=True)
            self._write(entry)
            return entry

    def settle(
        self,
        txn: str,
        decision: Decision,
        participants: Iterable[str] = (),
        redrive: bool = False,
        sync: bool = True,
    ) -> LogEntry:
        """Record the final ``decision`` (``redrive``: this shard coordinates it and re-sends
        phase 2 until every participant acknowledged). A final entry already here stands.
        ``sync=False``: through the WAL, not fsynced (survives ``kill -9``, not a power loss):
        for an ABORT whose loss only costs a participant that asks the fencing round."""
        with self._lock:
            found = self.get(txn)
            if found is not None and found.decision.final:
                if found.decision is not decision:
                    log.error(
                        "txn %s: told %s but %s is logged here; keeping it", txn, decision, found.decision
                    )
                return found
            entry = LogEntry(txn, decision, tuple(sorted(participants)), done=not redrive)
            self._write(entry, sync)
            if decision is Decision.COMMIT and redrive:
                self._pending.add(txn)
            return entry

    def settle_into(self, batch: Ops, txn: str, decision: Decision) -> None:
        """Add ``settle``'s record to ``batch`` (a participant's install or drop), unless a final
        entry is here already."""
        found = self.get(txn)
        if found is not None and found.decision.final:
            if found.decision is not decision:
                log.error("txn %s: told %s but %s is logged here; keeping it", txn, decision, found.decision)
            return
        batch.put(txn.encode(), encode_entry(LogEntry(txn, decision, done=True)), self._handle)

    def mark_done(self, txn: str) -> None:
        with self._lock:
            found = self.get(txn)
            if found is not None and not found.done:  # not synced: a lost mark only re-drives
                self._write(
                    LogEntry(found.txn, found.decision, found.participants, True, found.at_ms), sync=False
                )
            self._pending.discard(txn)

    def prune(self, older_than_ms: int) -> int:
        """Forget finished entries logged before ``older_than_ms`` (fences, aborts, and commits
        every participant acknowledged). An id is remembered this long: asked about later, it
        is unknown."""
        with self._lock:
            batch = WriteBatch(raw_mode=True)
            dropped = 0
            for raw_key, raw in self._cf.items():
                e = decode_entry(raw)
                if e.at_ms < older_than_ms and (e.done or e.decision is not Decision.COMMIT):
                    batch.delete(raw_key, self._handle)
                    dropped += 1
            if dropped:
                self._db.write(batch, self._sync)
            return dropped

    def pending_commits(self) -> list[LogEntry]:
        """COMMIT decisions whose phase 2 has not been acknowledged by every participant."""
        found = (self.get(txn) for txn in sorted(self._pending))
        return [e for e in found if e is not None]
