"""In-flight writes to several owners: what a coordinator finishes or undoes after a crash.

A transaction whose keys share a primary but not their other owners reaches those owners in
separate messages. A coordinator killed between them leaves some owners holding part of it, and
anti-entropy would then spread that part: a transfer debited but never credited. So before it
sends such a write, the coordinator logs here (same RocksDB, column family ``inflight``,
synced) the records and their burns (the previous documents, one version up), and removes the
entry once it installed or burned them. At start-up, before serving, a leftover entry is
resolved by what this shard holds: every record installed here (one atomic batch) → the write
may have been acknowledged, so the records are sent to the owners again; otherwise it was not
acknowledged, and the burns are installed and sent instead. Both are idempotent.

On the write path the entry rides the store's group commit (``add_async``: one fsync shared with
concurrent writes), and its removal is not synced (``drop``): it follows the install or the burns
in the WAL, so a crash loses it only after they are durable, and recovery then repeats
idempotent work.
"""

from __future__ import annotations

import itertools
import json
import time

from rocksdict import WriteBatch

from .documents import DocumentStore, Replicated
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

    def drop(self, key: bytes) -> None:
        """Remove an entry whose records or burns are durable already (no fsync of its own)."""
        self._store.write_unsynced(lambda ops: ops.delete(key, self._handle))

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
