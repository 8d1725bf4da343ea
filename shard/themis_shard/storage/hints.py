"""Hinted handoff: replica writes that could not be delivered, kept durably until they can.

When a coordinator cannot reach one of a key's other owners it stores the replicated versions
here (same RocksDB, column family ``hints``, synced through the store's group commit: the
fsync shared with concurrent writes, none held by a worker thread with the GIL) and
acknowledges the client; a background task replays them when the peer answers again. Replays
are idempotent (the receiver keeps only newer versions), so a hint delivered twice is harmless.
"""

from __future__ import annotations

import itertools
import json
import threading
import time

from .documents import DocumentStore, Replicated
from .record_wire import decode_items, encode_items


class HintLog:
    def __init__(self, store: DocumentStore) -> None:
        self._store = store
        self._cf, self._handle, _, _ = store.column_family("hints")
        self._lock = threading.Lock()
        self._seq = itertools.count(time.time_ns())
        self._pending: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        #: hint key → the lowest stamp in it: the watermark without decoding every hint
        self._lowest: dict[bytes, int] = {}
        for raw_key, raw in self._cf.items():
            peer = raw_key.partition(b"\x00")[0].decode()
            self._pending[peer] = self._pending.get(peer, 0) + 1
            self._bytes[peer] = self._bytes.get(peer, 0) + len(raw)
            self._lowest[raw_key] = _lowest_hlc(decode_items(json.loads(raw)))

    @staticmethod
    def encode(items: list[Replicated]) -> bytes:
        return json.dumps(encode_items(items)).encode()

    @classmethod
    def size_of(cls, items: list[Replicated]) -> int:
        """Bytes a hint of ``items`` takes (what the budget counts)."""
        return len(cls.encode(items))

    async def add(self, peer: str, items: list[Replicated]) -> None:
        """Keep ``items`` for ``peer``, durably once this returns. The hint rides the document
        store's next group commit (its fsync shared with concurrent writes, no worker thread).
        Its stamps count in the tombstone-GC watermark from before it is staged: a watermark
        read while it is on its way must not let a tombstone it could resurrect be dropped."""
        key = peer.encode() + b"\x00" + next(self._seq).to_bytes(8, "big")
        value = self.encode(items)
        with self._lock:
            self._lowest[key] = _lowest_hlc(items)
        try:
            await self._store.write_durably(lambda ops: ops.put(key, value, self._handle))
        except BaseException:
            with self._lock:
                self._lowest.pop(key, None)
            raise
        with self._lock:
            self._pending[peer] = self._pending.get(peer, 0) + 1
            self._bytes[peer] = self._bytes.get(peer, 0) + len(value)

    def pending_bytes(self) -> dict[str, int]:
        return dict(self._bytes)

    def oldest_hlc(self) -> int | None:
        """The lowest hybrid-clock stamp of any pending hint (None: no hints): no record older
        than it can still arrive from this shard's hints (the tombstone-GC watermark). Kept as
        hints come and go: no hint is read for it."""
        with self._lock:
            return min(self._lowest.values(), default=None)

    def peers(self) -> list[str]:
        return [p for p, n in self._pending.items() if n > 0]

    def pending(self) -> dict[str, int]:
        return dict(self._pending)

    def take(self, peer: str, limit: int = 100) -> tuple[list[bytes], list[list[Replicated]]]:
        """Up to ``limit`` hints for ``peer`` (oldest first), not yet removed: their keys, and
        each hint's records as one group (one write's records, to be installed together)."""
        prefix = peer.encode() + b"\x00"
        keys: list[bytes] = []
        groups: list[list[Replicated]] = []
        for raw_key, raw in self._cf.items(from_key=prefix):
            if not raw_key.startswith(prefix) or len(keys) >= limit:
                break
            keys.append(raw_key)
            groups.append(decode_items(json.loads(raw)))
        return keys, groups

    async def done(self, peer: str, keys: list[bytes]) -> None:
        """Forget delivered hints, durably (through the group commit, as ``add``); they leave
        the watermark only once that write is done."""
        freed = 0
        for key in keys:
            raw = self._cf.get(key)
            freed += len(raw) if raw is not None else 0

        def deletes(ops) -> None:
            for key in keys:
                ops.delete(key, self._handle)

        await self._store.write_durably(deletes)
        with self._lock:
            for key in keys:
                self._lowest.pop(key, None)
            self._pending[peer] = max(0, self._pending.get(peer, 0) - len(keys))
            self._bytes[peer] = max(0, self._bytes.get(peer, 0) - freed)


def _lowest_hlc(items: list[Replicated]) -> int:
    return min((item.hlc for item in items), default=1 << 63)
