"""Record digests and the tombstone list, kept current as writes are staged: what anti-entropy
compares and tombstone collection reads, without a scan of the store per round.

A record's hash is a 16-byte BLAKE2b of its storage key and stamp (``record_hash``), and a
leaf's digest is the XOR of its records' hashes: a write updates its leaf with two XORs (the
record it replaces out, its own in), in whatever order writes come, and equal leaves mean equal
records. Which leaf a record is in is the caller's ``Partition`` (anti-entropy's: the ring's
vnode ranges), named by a key; a new partition (a ring change) costs one rebuild.

Kept current through the store's ``StampWatcher`` seam: every record change is told here under
the store's commit lock, in commit order, as it is staged. So the digests describe what commits
have staged — exactly what a snapshot taken under that lock shows with the staged records laid
over it (``DocumentStore.staged_records``). A rebuild reads that cut without the lock, then
applies the changes staged since the cut. A failed write (its staged records discarded) or a
bulk load makes the digests stale, and the next reader rebuilds them.

The same view holds every tombstone's stamp: the candidates for garbage collection.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from ..errors import Unavailable
from . import codec
from .documents import DocumentStore, Tombstone
from .names import split_storage_key
from .stamps import Stamp

log = logging.getLogger(__name__)

DIGEST_BYTES = 16
#: Rebuilds in a row spoiled by failed writes before a reader is refused (the disk refuses
#: writes; the next round tries again).
MAX_SPOILED_REBUILDS = 3


def record_hash(skey: bytes, stamp: Stamp) -> bytes:
    """The digest of one record: its storage key and stamp (equal stamps, equal records)."""
    return _digest(skey, stamp.version, stamp.hlc, stamp.origin.encode())


def _digest(skey: bytes, version: int, hlc: int, origin: bytes) -> bytes:
    data = skey + b"\x00%d\x00%d\x00" % (version, hlc) + origin
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def _stored_hash(skey: bytes, raw: bytes) -> int:
    """``record_hash`` of a stored record, as an int, read from its header alone."""
    return int.from_bytes(_digest(skey, *codec.stamp_parts(raw)), "big")


@dataclass(frozen=True)
class Partition:
    """How records group into leaves: ``leaf_of(storage key)``. Equal keys, equal grouping."""

    key: Hashable
    leaf_of: Callable[[bytes], int] = field(compare=False, hash=False)


class RecordDigests:
    """Per-leaf digests and tombstones of one store; thread-safe."""

    def __init__(self, store: DocumentStore) -> None:
        self._store = store
        self._mu = threading.Lock()  # guards everything below
        self._building = threading.Lock()  # one rebuild at a time
        self._partition: Partition | None = None
        self._leaves: dict[int, int] = {}
        self._tombstones: dict[bytes, Stamp] = {}
        self._current = False
        #: changes staged since a rebuild's cut (None: no rebuild in progress)
        self._since_cut: list[tuple[bytes, bytes | None, bytes | None]] | None = None
        self._spoiled = False
        #: how many times the view was built from a scan
        self.rebuilds = 0
        store.watch_stamps(self)

    # -- the store's StampWatcher seam --------------------------------------------------------
    def staged(self, changes: list[tuple[bytes, bytes | None, bytes | None]]) -> None:
        with self._mu:
            if self._since_cut is not None:
                self._since_cut.extend(changes)
            elif self._current:
                self._fold(changes)

    def reset(self) -> None:
        with self._mu:
            self._current = False
            self._spoiled = True

    # -- readers -------------------------------------------------------------------------------
    def leaves(self, partition: Partition) -> dict[int, bytes]:
        """Leaf → digest of its records under ``partition``; empty leaves are left out."""
        self._ensure(partition)
        with self._mu:
            return {leaf: d.to_bytes(DIGEST_BYTES, "big") for leaf, d in self._leaves.items() if d}

    def tombstones(self, older_than_hlc: int) -> list[Tombstone]:
        """Tombstones stamped before ``older_than_hlc``, as staged (what ``drop_tombstones``
        checks against)."""
        self._ensure(None)
        with self._mu:
            held = [(skey, s) for skey, s in self._tombstones.items() if s.hlc < older_than_hlc]
        out = []
        for skey, stamp in held:
            collection, key = split_storage_key(skey)
            out.append(Tombstone(collection, key, stamp.version, None, stamp.hlc, stamp.origin))
        return out

    # -- building and folding ------------------------------------------------------------------
    def _fresh(self, partition: Partition | None) -> bool:
        return self._current and (partition is None or self._partition == partition)

    def _ensure(self, partition: Partition | None) -> None:
        """Current for ``partition`` (None: any), rebuilding from the store if not."""
        with self._mu:
            if self._fresh(partition):
                return
        with self._building:
            for _ in range(MAX_SPOILED_REBUILDS):
                with self._mu:
                    if self._fresh(partition):
                        return
                self._rebuild(partition)
            with self._mu:
                if self._fresh(partition):
                    return
        raise Unavailable(
            "record digests could not be rebuilt: writes kept failing during the rebuild",
            code="digests_unavailable",
        )

    def _rebuild(self, partition: Partition | None) -> None:
        def cut() -> None:  # under the store's commit lock
            with self._mu:
                self._since_cut = []
                self._spoiled = False
                self._current = False  # the old view stops following writes

        started = time.perf_counter()
        leaves: dict[int, int] = {}
        tombstones: dict[bytes, Stamp] = {}
        try:
            n = _add_all(self._store.staged_records(cut), partition, leaves, tombstones)
        except BaseException:
            with self._mu:
                self._since_cut = None
            raise
        with self._mu:
            since, self._since_cut = self._since_cut or [], None
            if self._spoiled:  # records the cut showed were discarded since
                return
            self._partition, self._leaves, self._tombstones = partition, leaves, tombstones
            self._fold(since)
            self._current = True
            self.rebuilds += 1
        log.info(
            "record digests built from %d record(s) in %.0f ms", n, (time.perf_counter() - started) * 1000
        )

    def _fold(self, changes: list[tuple[bytes, bytes | None, bytes | None]]) -> None:
        """Apply staged changes (under ``_mu``)."""
        leaf_of = self._partition.leaf_of if self._partition is not None else None
        leaves, tombstones = self._leaves, self._tombstones
        for skey, before, after in changes:
            h = 0
            if before is not None:
                h ^= _stored_hash(skey, before)
                if codec.is_tombstone(before):
                    tombstones.pop(skey, None)
            if after is not None:
                h ^= _stored_hash(skey, after)
                if codec.is_tombstone(after):
                    tombstones[skey] = codec.decode_stamp(after)
            if h and leaf_of is not None:
                leaf = leaf_of(skey)
                leaves[leaf] = leaves.get(leaf, 0) ^ h


def _add_all(
    records: Iterable[tuple[bytes, bytes]],
    partition: Partition | None,
    leaves: dict[int, int],
    tombstones: dict[bytes, Stamp],
) -> int:
    leaf_of = partition.leaf_of if partition is not None else None
    n = 0
    for skey, raw in records:
        n += 1
        if codec.is_tombstone(raw):
            tombstones[skey] = codec.decode_stamp(raw)
        if leaf_of is not None:
            leaf = leaf_of(skey)
            leaves[leaf] = leaves.get(leaf, 0) ^ _stored_hash(skey, raw)
    return n
