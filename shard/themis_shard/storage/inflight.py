"""In-flight writes: the coordinator's own durable copy of a write while its owners take it.

A coordinated write (w=majority or all) is durable on every owner it waits for before it is
acknowledged. The coordinator does not fsync its own install after the others answered:
while the records travel, it logs them here (same RocksDB, column family ``inflight``, through
the group commit), and once the owners took them it installs them without an fsync of its own
(``DocumentStore.apply_replicated_async(synced=False)``) and drops the entry, unsynced. Its own
fsync thus overlaps the other owners' (as a Raft leader appends to its log while it replicates),
and the install is in the OS before the answer, so it survives ``kill -9``; the entry covers a
machine that loses the OS's pages (the WAL recovers a prefix, so a surviving drop means a
surviving install).

A transaction whose keys share a primary but not their other owners reaches those owners in
separate messages. A coordinator killed between them leaves some owners holding part of it, and
anti-entropy would then spread that part: a transfer debited but never credited. So such an
entry is durable before the first message leaves.

At start-up, before serving, a leftover entry is rolled forward: its records are installed here
unless this shard holds them or anything newer, and what it then holds is sent to the owners
again. A write whose coordinator died before answering is thus applied everywhere, all of it
(a client that got no answer cannot tell it from a write that committed just before the crash).
A write that failed was burned first (the previous document one version up, which beats the
records everywhere) or had its entry dropped durably before the failure was answered, so rolling
forward never applies a write that was reported as not applied. Every step is idempotent.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable

from rocksdict import WriteBatch

from .documents import DocumentStore, Replicated
from .group_commit import Ops
from .record_wire import decode_items, encode_items


class InflightLog:
    def __init__(self, store: DocumentStore) -> None:
        self._cf, self._handle, self._db, self._sync = store.column_family("inflight")
        self._seq = itertools.count(time.time_ns())
        self._store = store

    def add(self, records: list[Replicated], burns: list[Replicated]) -> bytes:
        key, value = self._entry(records, burns)
        batch = WriteBatch(raw_mode=True)
        batch.put(key, value, self._handle)
        self._db.write(batch, self._sync)
        return key

    async def add_async(self, records: list[Replicated], burns: list[Replicated]) -> bytes:
        """``add`` from a coroutine: durable when it returns, written by the group commit."""
        key, value = self._entry(records, burns)
        await self._store.write_durably(lambda ops: ops.put(key, value, self._handle))
        return key

    def dropping(self, key: bytes) -> Callable[[Ops], None]:
        """The entry's removal as part of another batch: the install it covers (atomic with it,
        and one write instead of two)."""
        return lambda ops: ops.delete(key, self._handle)

    async def drop_durably(self, key: bytes) -> None:
        """Remove the entry of a write about to be answered as failed: durable before the answer,
        so that recovery can never roll it forward."""
        await self._store.write_durably(lambda ops: ops.delete(key, self._handle))

    def _entry(self, records: list[Replicated], burns: list[Replicated]) -> tuple[bytes, bytes]:
        key = next(self._seq).to_bytes(8, "big")
        return key, json.dumps({"records": encode_items(records), "burns": encode_items(burns)}).encode()

    def remove(self, key: bytes) -> None:
        batch = WriteBatch(raw_mode=True)
        batch.delete(key, self._handle)
        self._db.write(batch, self._sync)

    def entries(self) -> list[tuple[bytes, list[Replicated], list[Replicated]]]:
        found = []
        for key, raw in self._cf.items():
            entry = json.loads(raw)
            found.append((key, decode_items(entry["records"]), decode_items(entry["burns"])))
        return found
