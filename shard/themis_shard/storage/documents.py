"""The document store: JSON documents in RocksDB with per-document versions.

Layout (rocksdict, raw mode, bytes keys): column family ``docs`` maps
``collection NUL key`` → ``version(8 bytes) + JSON``; ``collections`` maps a name to its
declaration; ``meta`` holds per-collection counters (document count and a change generation
that the vector index records when it persists, so a crash is detected on start).

Durability: every commit is part of one ``WriteBatch`` written with ``sync=True``, so an
acknowledged write survives ``kill -9`` (the WAL is never disabled). Commits are validated and
staged under one lock — the current versions, including those of writes staged but not yet
durable, are checked there, so conditional writes (``If-Match``) and transactions are
first-committer-wins — and then concurrent commits share one synced write (``group_commit``):
the lock is not held through the fsync, and a commit returns once the write that carries it is
durable. Readers see a write only once it is durable.

Deletes leave a tombstone (a version with no body), so versions only ever grow per key and
another shard's copy can be reconciled by comparing stamps (:meth:`apply_replicated`): each
record carries ``(version, hybrid clock, minting shard)`` (``stamps.py``), a total order, so
replicas that exchanged records keep the same winner whatever order they arrived in.

History: with ``history_versions`` > 0, the record a write supersedes (document or tombstone)
is kept in the ``history`` column family (``history.py``) in the same atomic write, and versions
more than ``history_versions`` behind the newest are compacted away in it too; so a document can
be read at a version it recently had (:meth:`get_version`, :meth:`as_of`). Purging a key or
dropping its tombstone drops its history with it.

Transactions (rocksdict has none): :class:`Transaction` reads from a RocksDB snapshot taken at
``begin`` (snapshot isolation), buffers writes, and at commit validates — under the commit lock —
that every key it read or writes still has the version it saw; any change means another
transaction committed first and this one fails with 409 and writes nothing. The batch is then
applied atomically. This is optimistic MVCC: readers never block, conflicts abort the later
committer. A :class:`Check` is a read validation a client sends with its writes (the version it
read must still be the stored one), checked under the same lock.

Why one ~980-line module: every path that writes (commits, replicated records, coordinated
installs, bulk ingest, purges) stages under the one commit lock and the one group-commit writer
over the same column families; split apart, the lock would leak. The pure parts (stamps,
history, the hints codec, group commit, the WAL fsync) are modules of their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocksdict import Checkpoint, Options, Rdict, WriteBatch, WriteOptions

from ..errors import BadRequest, Conflict, NotFound, ThemisError
from . import codec, history
from .collections import CollectionConfig
from .group_commit import GroupCommit, Op, Ops
from .health import GuardedDB, StorageHealth
from .names import check_collection, check_key, split_storage_key, storage_key
from .stamps import HybridClock, Stamp, wins
from .wal_sync import WalSync

#: how many bytes of records one unsynced write of ``ingest`` carries
INGEST_BATCH_BYTES = 16 << 20

_CFS = ("docs", "collections", "meta", "hints", "intents", "txn_log", "inflight", "history")


@dataclass(frozen=True)
class Write:
    """One mutation: ``document`` None deletes. ``if_version``: 0 = must not exist."""

    collection: str
    key: str
    document: dict[str, Any] | None
    if_version: int | None = None
    #: the document's JSON, when it was encoded and checked already (``prepare``)
    encoded: bytes | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Check:
    """A read validation in a transaction: the key's live version must be ``version`` (0 = must
    not exist). It writes nothing; a cross-shard transaction locks the key through prepare."""

    collection: str
    key: str
    version: int


@dataclass(frozen=True)
class Change:
    """A committed mutation, as seen by observers (vector index, replication)."""

    collection: str
    key: str
    version: int
    document: dict[str, Any] | None
    previous_version: int
    hlc: int = 0
    origin: str = ""

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.version, self.hlc, self.origin)


@dataclass(frozen=True)
class Replicated:
    """A version decided elsewhere: ``document`` None is a delete (tombstone) at ``version``."""

    collection: str
    key: str
    version: int
    document: dict[str, Any] | None
    hlc: int = 0
    origin: str = ""
    #: ``document``'s JSON as ``prepare`` encoded and checked it (None elsewhere): its install
    #: here stores it without encoding again. Never on the wire.
    body: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.version, self.hlc, self.origin)


@dataclass(frozen=True)
class Tombstone:
    collection: str
    key: str
    version: int
    document: None = None
    hlc: int = 0
    origin: str = ""


@dataclass(frozen=True)
class StoredDocument:
    collection: str
    key: str
    version: int
    document: dict[str, Any]
    hlc: int = 0
    origin: str = ""


class StampWatcher(Protocol):
    """Told of every record change as it is staged (under the commit lock, in commit order):
    ``(storage key, record before, record after)``, None for "no record". ``reset``: what was
    staged and not yet durable was discarded (a failed write), or records were loaded around
    staging (``ingest``) — the watcher's view must be rebuilt (``staged_records``)."""

    def staged(self, changes: list[tuple[bytes, bytes | None, bytes | None]]) -> None: ...

    def reset(self) -> None: ...


class StoreObserver:
    """Hooks around a commit. ``validate`` runs before anything is written and may raise a
    4xx error to reject the whole commit; ``apply`` runs after the durable write, in commit
    order, under the commit lock."""

    def validate(self, config: CollectionConfig, write: Write) -> None:  # pragma: no cover - default
        return None

    def apply(self, changes: list[Change], generations: dict[str, int]) -> None:  # pragma: no cover
        return None

    def watches(self, collection: str) -> bool:  # pragma: no cover - default
        """Does ``apply`` do work for this collection? (Work that may be long — a vector index's
        insert, its persisting — is kept off the caller's thread: see ``group_commit``.)"""
        return True


def _counter(raw: bytes | None) -> int:
    return 0 if raw is None else int.from_bytes(raw, "big", signed=True)


def _counter_bytes(value: int) -> bytes:
    return value.to_bytes(8, "big", signed=True)


def entry(collection: str, key: str, raw: bytes) -> StoredDocument | Tombstone:
    """A stored value as a document or a tombstone, with its stamp."""
    stamp = codec.decode_stamp(raw)
    _, document = codec.decode(raw)
    if document is None:
        return Tombstone(collection, key, stamp.version, None, stamp.hlc, stamp.origin)
    return StoredDocument(collection, key, stamp.version, document, stamp.hlc, stamp.origin)


class DocumentStore:
    def __init__(
        self,
        path: Path,
        max_document_bytes: int = 1 << 20,
        *,
        origin: str = "",
        max_document_depth: int = codec.DEFAULT_MAX_DEPTH,
        clock: HybridClock | None = None,
        health: StorageHealth | None = None,
        history_versions: int = 0,
    ) -> None:
        """``origin``: this shard's id, stamped on the versions it mints (with ``clock``);
        ``health``: where storage faults of every write are mapped and remembered;
        ``history_versions``: superseded versions kept per key (0: none)."""
        self.history_versions = history_versions
        self.path = Path(path)
        self.max_document_bytes = max_document_bytes
        self.max_document_depth = max_document_depth
        self.origin = origin
        self.clock = clock or HybridClock()
        self.path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        self.health = health or StorageHealth()
        self._db = GuardedDB(
            Rdict(str(self.path), options=opts, column_families={cf: Options(raw_mode=True) for cf in _CFS}),
            self.health,
        )
        self._docs = self._db.get_column_family("docs")
        self._colls = self._db.get_column_family("collections")
        self._meta = self._db.get_column_family("meta")
        self._history = self._db.get_column_family("history")
        self._handles = {cf: self._db.get_column_family_handle(cf) for cf in _CFS}
        self._sync = WriteOptions()
        self._sync.sync = True
        self._unsynced = WriteOptions()
        self._unsynced.sync = False
        self._no_wal = WriteOptions()
        self._no_wal.disable_wal = True
        self._wal = WalSync(self._db)  # commits fsync the WAL without the GIL (``wal_sync``)
        self._lock = threading.RLock()
        self._observers: list[StoreObserver] = []
        self._stamp_watchers: list[StampWatcher] = []
        self._configs: dict[str, CollectionConfig] = {
            name.decode(): CollectionConfig.model_validate_json(raw) for name, raw in self._colls.items()
        }
        self._counts = {c: _counter(self._meta.get(f"count:{c}".encode())) for c in self._configs}
        self._generations = {c: _counter(self._meta.get(f"gen:{c}".encode())) for c in self._configs}
        # What staged (not yet durable) commits will make of the above, and of the docs: the
        # next commit is validated against these. Only touched under ``_lock``.
        self._planned_counts = dict(self._counts)
        self._planned_generations = dict(self._generations)
        self._pending: dict[bytes, tuple[bytes | None, int]] = {}
        self._staged_seq = 0
        self._group = GroupCommit(self._write_ops, self._lock, self._forget_planned)
        self.health.attach_probe(self._probe_write)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        self._group.close()  # what is staged is written first
        with self._lock:
            if self._db is None:
                return
            # Column-family handles keep the DB lock after close: drop them first.
            self._docs = self._colls = self._meta = self._history = None
            self._handles = {}
            self._db.close()
            self._db = None

    def _probe_write(self) -> None:
        """One tiny synced write: does the disk take writes again? (``StorageHealth.probe``)"""
        batch = WriteBatch(raw_mode=True)
        batch.put(b"probe", _counter_bytes(time.time_ns()), self._handles["meta"])
        self._db.write(batch, self._sync)

    def column_family(self, name: str):
        """(column family, handle, synced write options) for a neighbour such as the hint log."""
        return self._db.get_column_family(name), self._handles[name], self._db, self._sync

    @property
    def last_group_size(self) -> int:
        """How many commits the last write carried (with one fsync when any needed it)."""
        return self._group.last_group_size

    @property
    def commits_idle(self) -> bool:
        """No synced write in progress or queued: a write staged now pays an fsync alone."""
        return self._group.idle

    async def write_durably(self, fill: Callable[[Ops], None]) -> None:
        """A neighbour's synced write (the in-flight log) carried by the next group commit: it
        shares that fsync with concurrent writes, the loop is free while it waits, and no worker
        thread holds the GIL through an fsync of its own."""
        ops = Ops()
        fill(ops)
        with self._lock:
            item = self._group.stage(ops.ops, _published)
        await self._group.wait_async(item)

    def checkpoint(self, target: Path) -> None:
        """A RocksDB checkpoint of every column family at ``target`` (hard links: cheap, and
        consistent with itself; a backup's cut decides what it must contain)."""
        Checkpoint(self._db.raw).create_checkpoint(str(target))

    def add_observer(self, observer: StoreObserver) -> None:
        self._observers.append(observer)

    def watch_stamps(self, watcher: StampWatcher) -> None:
        self._stamp_watchers.append(watcher)

    def staged_records(self, on_cut: Callable[[], None]) -> Iterator[tuple[bytes, bytes]]:
        """Every record as commits have staged it — durable or not yet — at one cut, with
        ``on_cut()`` called under the commit lock at that cut (a watcher starts collecting the
        changes staged after it there). The records are read afterwards from a snapshot, without
        the lock; writes go on meanwhile."""
        with self._lock:
            snap = self._docs.snapshot()
            pending = {skey: raw for skey, (raw, _) in self._pending.items()}
            on_cut()
        return _overlaid(snap, pending)

    # -- collections -------------------------------------------------------------------------
    def collection(self, name: str) -> CollectionConfig:
        check_collection(name)
        config = self._configs.get(name)
        if config is None:
            raise NotFound(f"collection {name!r} does not exist", code="collection_not_found")
        return config

    def has_collection(self, name: str) -> bool:
        return name in self._configs

    def collections(self) -> list[CollectionConfig]:
        return [self._configs[n] for n in sorted(self._configs)]

    def declare_collection(self, config: CollectionConfig) -> CollectionConfig:
        """Create a collection, or change it when that cannot invalidate stored vectors."""
        check_collection(config.name)
        with self._lock:
            existing = self._configs.get(config.name)
            if (
                existing is not None
                and existing.dimension not in (None, config.dimension)
                and self._counts.get(config.name, 0) > 0
            ):
                raise Conflict(
                    f"collection {config.name!r} holds documents with dimension {existing.dimension}; "
                    f"it cannot change to {config.dimension}",
                    code="dimension_conflict",
                )
            batch = WriteBatch(raw_mode=True)
            batch.put(config.name.encode(), config.model_dump_json().encode(), self._handles["collections"])
            self._db.write(batch, self._sync)
            self._configs[config.name] = config
            for counters in (
                self._counts,
                self._generations,
                self._planned_counts,
                self._planned_generations,
            ):
                counters.setdefault(config.name, 0)
            return config

    def _ensure_collection(self, name: str, batch: WriteBatch) -> CollectionConfig:
        config = self._configs.get(name)
        if config is None:
            config = CollectionConfig(name=name)
            batch.put(name.encode(), config.model_dump_json().encode(), self._handles["collections"])
        return config

    # -- reads -------------------------------------------------------------------------------
    def get(self, collection: str, key: str) -> StoredDocument | None:
        check_collection(collection)
        check_key(key)
        raw = self._docs.get(storage_key(collection, key))
        if raw is None or codec.is_tombstone(raw):
            return None
        found = entry(collection, key, raw)
        return found if isinstance(found, StoredDocument) else None

    def get_entry(self, collection: str, key: str) -> StoredDocument | Tombstone | None:
        """The stored record, tombstones included (None: never written)."""
        raw = self._docs.get(storage_key(collection, key))
        return None if raw is None else entry(collection, key, raw)

    def get_version(self, collection: str, key: str, version: int) -> StoredDocument | Tombstone | None:
        """The key's record at ``version``: the current one or a kept superseded one (None: never
        written, or compacted away)."""
        check_collection(collection)
        check_key(key)
        raw = self._docs.get(storage_key(collection, key))
        if raw is not None and codec.decode_version(raw) == version:
            return entry(collection, key, raw)
        kept = self._history.get(history.version_key(collection, key, version))
        return None if kept is None else entry(collection, key, kept)

    def versions_of(self, collection: str, key: str) -> list[StoredDocument | Tombstone]:
        """Every record of the key still held, oldest first: the kept history, then the current."""
        check_collection(collection)
        check_key(key)
        begin, end = history.key_range(collection, key)
        out: list[StoredDocument | Tombstone] = []
        snap = self._history.snapshot()
        try:
            for raw_key, raw in snap.items(from_key=begin):
                if raw_key >= end:
                    break
                out.append(entry(collection, key, raw))
        finally:
            del snap
        current = self.get_entry(collection, key)
        if current is not None and (not out or out[-1].version < current.version):
            out.append(current)
        return out

    def stamps(self, keys: list[tuple[str, str]]) -> list[Stamp | None]:
        """The stored stamp of many keys in one read (None: never written)."""
        raws = self._docs[[storage_key(c, k) for c, k in keys]] if keys else []
        return [codec.decode_stamp(r) for r in raws]

    def version(self, collection: str, key: str) -> int:
        """The key's stored version, deletes (tombstones) included; 0 if never written."""
        return codec.decode_version(self._docs.get(storage_key(collection, key)))

    def versions(self, keys: list[tuple[str, str]]) -> list[int]:
        """``version`` of many keys in one read (a multi-get)."""
        raws = self._docs[[storage_key(c, k) for c, k in keys]] if keys else []
        return [codec.decode_version(r) for r in raws]

    def live_version(self, collection: str, key: str) -> int:
        return codec.live_version(self._docs.get(storage_key(collection, key)))

    def scan(
        self, collection: str, *, tombstones: bool = False, keep: Callable[[str], bool] | None = None
    ) -> Iterator[StoredDocument | Tombstone]:
        """A collection's documents in key order, from one consistent snapshot. ``keep`` is
        checked on the key before the value is decoded (e.g. "rows this shard owns first")."""
        prefix = collection.encode() + b"\x00"
        for raw_key, raw in self._scan_prefix(prefix):
            _, key = split_storage_key(raw_key)
            if keep is not None and not keep(key):
                continue
            found = entry(collection, key, raw)
            if tombstones or isinstance(found, StoredDocument):
                yield found

    def scan_bodies(self, collection: str) -> Iterator[tuple[str, bytes]]:
        """(key, JSON body) of a collection's live documents, from one snapshot, undecoded: for
        a reader that wants one field of every document and decodes it faster itself (the
        vector index rebuild)."""
        prefix = collection.encode() + b"\x00"
        for raw_key, raw in self._scan_prefix(prefix):
            found = codec.body(raw)
            if found is not None:
                yield raw_key[len(prefix) :].decode(), found

    def scan_all(self) -> Iterator[StoredDocument | Tombstone]:
        """Every document and tombstone of every collection (catch-up, resharding)."""
        for raw_key, raw in self._scan_prefix(b""):
            collection, key = split_storage_key(raw_key)
            yield entry(collection, key, raw)

    def scan_stamps(self) -> Iterator[tuple[str, str, Stamp, bool]]:
        """(collection, key, stamp, is a tombstone) of every record, from one snapshot, without
        decoding a single document body: what digests and garbage collection need."""
        for raw_key, raw in self._scan_prefix(b""):
            collection, key = split_storage_key(raw_key)
            yield collection, key, codec.decode_stamp(raw), codec.is_tombstone(raw)

    def scan_where(self, keep: Callable[[str, str], bool]) -> Iterator[StoredDocument | Tombstone]:
        """The records whose (collection, key) pass ``keep``, tested before the value is decoded."""
        for raw_key, raw in self._scan_prefix(b""):
            collection, key = split_storage_key(raw_key)
            if keep(collection, key):
                yield entry(collection, key, raw)

    def scan_page(
        self, after: bytes | None, limit: int, keep: Callable[[str, str], bool] | None = None
    ) -> tuple[list[StoredDocument | Tombstone], bytes | None]:
        """The entries (documents and tombstones) among the next ``limit`` storage keys after
        ``after`` that pass ``keep(collection, key)`` — tested before the value is decoded — and
        the cursor to continue from (None at the end). Resumable paging for catch-up and
        resharding."""
        out: list[StoredDocument | Tombstone] = []
        last = None
        scanned = 0
        snap = self._docs.snapshot()
        try:
            for raw_key, raw in snap.items(from_key=after or b""):
                if after is not None and raw_key <= after:
                    continue
                if scanned >= limit:
                    return out, last
                scanned += 1
                last = raw_key
                collection, key = split_storage_key(raw_key)
                if keep is not None and not keep(collection, key):
                    continue
                out.append(entry(collection, key, raw))
        finally:
            del snap
        return out, None

    def purge(self, keys: list[tuple[str, str]]) -> int:
        """Physically drop this shard's copies of keys it no longer owns (after a handoff).
        Not a delete: no tombstone, no new version — the owners keep the document."""
        if not keys:
            return 0
        with self._lock:
            batch = Ops()
            changes: list[Change] = []
            count_delta: dict[str, int] = {}
            deleted: dict[bytes, bytes | None] = {}
            for collection, key in keys:
                skey = storage_key(collection, key)
                raw = self._raw(skey)
                if raw is None:
                    continue
                batch.delete(skey, self._handles["docs"])
                batch.delete_range(*history.key_range(collection, key), self._handles["history"])
                deleted[skey] = None
                if codec.live_version(raw):
                    count_delta[collection] = count_delta.get(collection, 0) - 1
                    changes.append(
                        Change(collection, key, codec.decode_version(raw), None, codec.live_version(raw))
                    )
            touched = {c for c, _ in keys}
            item = self._stage(batch, deleted, touched, count_delta, changes)
        self._group.wait(item)
        return len(changes)

    def _scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        snap = self._docs.snapshot()
        try:
            for raw_key, raw in snap.items(from_key=prefix):
                if not raw_key.startswith(prefix):
                    break
                yield raw_key, raw
        finally:
            del snap

    def count(self, collection: str) -> int:
        return self._counts.get(collection, 0)

    def generation(self, collection: str) -> int:
        return self._generations.get(collection, 0)

    # -- bulk load ---------------------------------------------------------------------------
    def ingest(self, records: Iterable[tuple[bytes, bytes]], batch_bytes: int = INGEST_BATCH_BYTES) -> int:
        """Load stored records verbatim — ``(storage key, value)`` as another store of this format
        holds them, stamp and version included — into keys this store does not hold (a restore
        into a new store, before any observer is attached: the vector index rebuilds from the store
        when it opens). Nothing is decoded or re-stamped, and no write waits for an fsync: the
        batches skip the WAL and, at the end, the memtables are flushed to synced SST files and
        the counters written with one synced write. So a crash mid-ingest leaves a partial
        store; the caller loads into a scratch directory it renames into place once this
        returned. A key this store already holds is a ``ValueError`` (nothing is overwritten).
        The number of live documents loaded."""
        loaded = 0
        with self._lock:
            if self._pending or self._observers:
                raise ValueError("ingest needs a store nothing else writes to or watches")
            docs = self._handles["docs"]
            counts: dict[str, int] = {}
            batch, keys, size = WriteBatch(raw_mode=True), [], 0
            for skey, raw in records:
                batch.put(skey, raw, docs)
                keys.append(skey)
                size += len(skey) + len(raw)
                collection = skey.partition(b"\x00")[0].decode()
                live = not codec.is_tombstone(raw)
                counts[collection] = counts.get(collection, 0) + live
                loaded += live
                if size >= batch_bytes:
                    self._ingest_batch(batch, keys)
                    batch, keys, size = WriteBatch(raw_mode=True), [], 0
            self._ingest_batch(batch, keys)
            self._docs.flush(True)  # the column family's own flush: the db's is the default's
            final = WriteBatch(raw_mode=True)
            for c in sorted(counts):
                self._ensure_collection(c, final)
                self._configs.setdefault(c, CollectionConfig(name=c))
                self._counts[c] = self._counts.get(c, 0) + counts[c]
                self._generations[c] = self._generations.get(c, 0) + 1
                final.put(f"gen:{c}".encode(), _counter_bytes(self._generations[c]), self._handles["meta"])
                final.put(f"count:{c}".encode(), _counter_bytes(self._counts[c]), self._handles["meta"])
            self._db.write(final, self._sync)
            self._planned_counts = dict(self._counts)
            self._planned_generations = dict(self._generations)
            for watcher in self._stamp_watchers:
                watcher.reset()
        return loaded

    def _ingest_batch(self, batch: WriteBatch, keys: list[bytes]) -> None:
        if not keys:
            return
        if len(set(keys)) != len(keys) or any(v is not None for v in self._docs[keys]):
            raise ValueError("ingest loads only keys the store does not hold")
        self._db.write(batch, self._no_wal)

    # -- staging and group commit -------------------------------------------------------------
    def _raw(self, skey: bytes) -> bytes | None:
        """A key's newest record, staged or durable (under ``_lock``: what a commit checks)."""
        pending = self._pending.get(skey)
        return pending[0] if pending is not None else self._docs.get(skey)

    def _stage(
        self,
        batch: Ops,
        docs: dict[bytes, bytes | None],
        touched: set[str],
        count_delta: dict[str, int],
        changes: list[Change],
        started: float | None = None,
        synced: bool = True,
        befores: dict[bytes, bytes | None] | None = None,
    ):
        """Queue ``batch`` (plus the touched collections' counters) for the next synced write;
        ``docs`` are its new records, visible to later commits' checks at once and to readers
        once durable; ``befores``: the records they replace, where the caller read them already.
        Under ``_lock``; the caller waits for the item without it."""
        generations = {c: self._planned_generations.get(c, 0) + 1 for c in touched}
        counts = {c: self._planned_counts.get(c, 0) + count_delta.get(c, 0) for c in touched}
        for c in sorted(touched):
            batch.put(f"gen:{c}".encode(), _counter_bytes(generations[c]), self._handles["meta"])
            batch.put(f"count:{c}".encode(), _counter_bytes(counts[c]), self._handles["meta"])
        self._planned_generations.update(generations)
        self._planned_counts.update(counts)
        self._staged_seq += 1
        seq = self._staged_seq
        if self._stamp_watchers:
            known = befores or {}
            changed = [
                (skey, known[skey] if skey in known else self._raw(skey), raw) for skey, raw in docs.items()
            ]
            for watcher in self._stamp_watchers:
                watcher.staged(changed)
        for skey, raw in docs.items():
            self._pending[skey] = (raw, seq)

        def publish() -> None:  # by the group's leader, under ``_lock``, once durable
            for c in touched:
                if c not in self._configs:
                    self._configs[c] = CollectionConfig(name=c)
            self._generations.update(generations)
            self._counts.update(counts)
            for skey in docs:
                if self._pending.get(skey, (None, 0))[1] == seq:
                    del self._pending[skey]
            for observer in self._observers:
                observer.apply(changes, generations)
            if started is not None:
                self.last_commit_seconds = time.perf_counter() - started

        # only an unsynced item may be written by its caller: then no observer may have work
        quiet = not synced and not any(o.watches(c) for o in self._observers for c in touched)
        return self._group.stage(batch.ops, publish, synced, by_caller=quiet)

    def _write_ops(self, ops: list[Op], synced: bool = True) -> None:
        """One write of every staged operation, synced unless no item needed it (the group's
        leader, no lock held)."""
        batch = WriteBatch(raw_mode=True)
        for kind, key, value, handle in ops:
            if kind == "put":
                batch.put(key, value, handle)
            elif kind == "delete_range":
                batch.delete_range(key, value, handle)
            else:
                batch.delete(key, handle)
        self._db.write(batch, self._unsynced)
        if synced:
            with self.health.guard():  # an fsync error is the disk's refusal too
                self._wal.sync()

    def _forget_planned(self) -> None:
        """A synced write failed: every staged commit failed with it (``GroupCommit``)."""
        self._pending.clear()
        for watcher in self._stamp_watchers:
            watcher.reset()
        self._planned_counts = dict(self._counts)
        self._planned_generations = dict(self._generations)

    # -- writes ------------------------------------------------------------------------------
    def put(self, collection: str, key: str, document: dict[str, Any], if_version: int | None = None) -> int:
        return self.commit([Write(collection, key, document, if_version)])[0].version

    def delete(self, collection: str, key: str, if_version: int | None = None) -> int:
        """Delete (leaving a tombstone); returns the tombstone's version. 404 when absent."""
        return self.commit([Write(collection, key, None, if_version)])[0].version

    def begin(self) -> Transaction:
        return Transaction(self)

    def commit(
        self,
        writes: list[Write],
        expected: dict[tuple[str, str], int] | None = None,
        checks: tuple[Check, ...] | list[Check] = (),
    ) -> list[Change]:
        """Apply ``writes`` atomically and durably, or nothing (409 / 4xx).

        Each write gets the key's next version (deletes too: they leave a tombstone).
        ``expected`` maps (collection, key) to the stored version a transaction saw at its
        snapshot; every such key must still have it (first committer wins). ``checks`` must
        hold as well (409 ``version_conflict``), under the same lock.
        """
        staged = self._stage_commit(writes, expected, checks)
        if staged is None:
            return []
        self._group.wait(staged[0])
        return staged[1]

    async def commit_async(
        self,
        writes: list[Write],
        expected: dict[tuple[str, str], int] | None = None,
        checks: tuple[Check, ...] | list[Check] = (),
    ) -> list[Change]:
        """``commit`` for a coroutine: planned and staged here (under the lock, briefly, as a
        coordinator's ``prepare``), and the event loop is free while the synced write that
        carries it is in progress; no worker thread waits for it."""
        staged = self._stage_commit(writes, expected, checks)
        if staged is None:
            return []
        await self._group.wait_async(staged[0])
        return staged[1]

    def _stage_commit(
        self,
        writes: list[Write],
        expected: dict[tuple[str, str], int] | None,
        checks: tuple[Check, ...] | list[Check],
    ):
        """``commit``'s planning and staging: (item to wait for, changes), or None (nothing to
        write)."""
        if not writes and not checks:
            return None
        with self._lock:
            installs = self._plan(writes, expected, checks)
            if not installs:
                return None
            return self._install(installs)

    def prepare(self, writes: list[Write], checks: tuple[Check, ...] | list[Check] = ()) -> list[Replicated]:
        """The records ``commit`` would install — validated, versioned and stamped — without
        installing them: a coordinator sends them to the other owners first and installs them
        here (``apply_replicated``) only once enough owners hold them. The caller serialises
        writes to these keys (``KeyLocks``) so nothing commits in between. ``checks`` are
        validated with them (409 when one fails)."""
        return self.prepare_with_previous(writes, checks)[0]

    def prepare_with_previous(
        self, writes: list[Write], checks: tuple[Check, ...] | list[Check] = ()
    ) -> tuple[list[Replicated], list[dict[str, Any] | None]]:
        """``prepare``, and for each record the live document it replaces (None: absent or
        deleted), read in the same view as the versions were: staged records included, which a
        durable read would miss while a repair's install is still being written."""
        if not writes and not checks:
            return [], []
        raws: dict[tuple[str, str], bytes | None] = {}
        with self._lock:
            installs = self._plan(writes, None, checks, raws)
        previous = [_live_document(raws[(w.collection, w.key)]) for w, _, _ in installs]
        return [
            Replicated(
                w.collection,
                w.key,
                stamp.version,
                w.document,
                stamp.hlc,
                stamp.origin,
                body=None
                if w.document is None
                else codec.encode_body(w.document, self.max_document_bytes, self.max_document_depth),
            )
            for w, stamp, _ in installs
        ], previous

    def _plan(
        self,
        writes: list[Write],
        expected: dict[tuple[str, str], int] | None,
        checks: tuple[Check, ...] | list[Check] = (),
        raws: dict[tuple[str, str], bytes | None] | None = None,
    ) -> list[tuple[Write, Stamp, int]]:
        """Validate ``writes`` and ``checks`` against the stored versions (under the lock) and
        stamp the writes; ``raws`` gets each written key's record as read (staged or durable)."""
        for w in writes:
            check_collection(w.collection)
            check_key(w.key)
            if w.document is not None and not isinstance(w.document, dict):
                raise BadRequest("a document must be a JSON object", code="invalid_document")
        for c in checks:
            check_collection(c.collection)
            check_key(c.key)
            live = codec.live_version(self._raw(storage_key(c.collection, c.key)))
            if live != c.version:
                raise Conflict(
                    f"{c.collection}/{c.key} is at version {live}, not {c.version} (check)",
                    code="version_conflict",
                )
        for (collection, key), seen in (expected or {}).items():
            if codec.decode_version(self._raw(storage_key(collection, key))) != seen:
                raise Conflict(
                    f"{collection}/{key} changed since the transaction began", code="transaction_conflict"
                )
        pending: dict[tuple[str, str], tuple[int, bool]] = {}
        installs: list[tuple[Write, Stamp, int]] = []
        for w in writes:
            config = self._configs.get(w.collection) or CollectionConfig(name=w.collection)
            state = pending.get((w.collection, w.key))
            if state is None:
                raw = self._raw(storage_key(w.collection, w.key))
                if raws is not None:
                    raws[(w.collection, w.key)] = raw
                state = (codec.decode_version(raw), codec.live_version(raw) != 0)
            stored, exists = state
            live = stored if exists else 0
            if w.if_version is not None and w.if_version != live:
                raise Conflict(
                    f"{w.collection}/{w.key} is at version {live}, not {w.if_version}",
                    code="version_conflict",
                )
            if w.document is None and not exists:
                raise NotFound(f"document {w.collection}/{w.key} does not exist", code="document_not_found")
            for observer in self._observers:
                observer.validate(config, w)
            pending[(w.collection, w.key)] = (stored + 1, w.document is not None)
            installs.append((w, Stamp(stored + 1, self.clock.now(), self.origin), live))
        return installs

    def apply_replicated(
        self, items: list[Replicated], also: Callable[[Ops], None] | None = None
    ) -> list[Change]:
        """Install versions decided by another shard (replication, hints, catch-up).

        Idempotent and order-insensitive: an item applies only when its stamp is higher than
        the stored one (tombstones included), so replays and stale copies are no-ops and two
        records of one version resolve the same way everywhere (``stamps.wins``). ``also`` adds
        to the same synced batch (a committed transaction drops its intent atomically with it).
        """
        staged = self._stage_checked(items, also)
        if staged is None:
            return []
        self._group.wait(staged[0])
        return staged[1]

    async def apply_replicated_async(
        self, items: list[Replicated], synced: bool = True, also: Callable[[Ops], None] | None = None
    ) -> list[Change]:
        """``apply_replicated`` for a coroutine: staged here (under the lock, briefly), and the
        event loop is free while the synced write that carries it is in progress. ``synced=False``:
        the caller holds the records durably elsewhere (an in-flight entry, which ``also`` may
        drop in the same write), so the write needs no fsync of its own."""
        staged = self._stage_checked(items, also, synced)
        if staged is None:
            return []
        await self._group.wait_async(staged[0])
        return staged[1]

    def _stage_checked(
        self, items: list[Replicated], also: Callable[[Ops], None] | None, synced: bool = True
    ):
        for item in items:
            check_collection(item.collection)
            check_key(item.key)
        with self._lock:
            return self._stage_replicated(items, also, synced)

    def _stage_replicated(
        self, items: list[Replicated], also: Callable[[Ops], None] | None, synced: bool = True
    ):
        """``apply_replicated``'s staging, under ``_lock``: (item, changes), or None.

        An item that is not newer than a record staged by another writer and not yet durable
        (the same record, sent twice: a coordinator's replication and a repair) installs
        nothing, but its caller must still wait for that record's write before it calls the
        item installed: an empty item is staged behind it, and fails if that write fails."""
        installs: list[tuple[Write, Stamp, int]] = []
        newest: dict[tuple[str, str], Stamp] = {}
        behind_staged = False
        for item in items:
            ident = (item.collection, item.key)
            stamp = item.stamp
            self.clock.observe(stamp.hlc)
            skey = storage_key(*ident)
            raw = self._raw(skey)
            stored = newest.get(ident) or codec.decode_stamp(raw)
            if not wins(stamp, stored):
                behind_staged = behind_staged or skey in self._pending
                continue
            w = Write(item.collection, item.key, item.document, encoded=item.body)
            config = self._configs.get(item.collection) or CollectionConfig(name=item.collection)
            for observer in self._observers:
                observer.validate(config, w)
            newest[ident] = stamp
            installs.append((w, stamp, codec.live_version(raw)))
        if installs:
            return self._install(installs, also, synced)
        if also is not None or behind_staged:
            batch = Ops()
            if also is not None:
                also(batch)
            return self._stage(batch, {}, set(), {}, [], synced=synced), []
        return None

    def tombstones(self, older_than_hlc: int) -> list[Tombstone]:
        """Tombstones stamped before ``older_than_hlc`` (candidates for garbage collection); no
        live document's body is decoded on the way."""
        return [
            Tombstone(c, k, stamp.version, None, stamp.hlc, stamp.origin)
            for c, k, stamp, dead in self.scan_stamps()
            if dead and stamp.hlc < older_than_hlc
        ]

    def drop_tombstones(self, items: list[Tombstone]) -> int:
        """Physically remove tombstones that are still exactly these records (a newer write to
        the key since keeps it). Not a write: no version, no hint."""
        with self._lock:
            batch = Ops()
            dropped: dict[bytes, bytes | None] = {}
            for t in items:
                skey = storage_key(t.collection, t.key)
                raw = self._raw(skey)
                if (
                    raw is not None
                    and codec.is_tombstone(raw)
                    and codec.decode_stamp(raw) == Stamp(t.version, t.hlc, t.origin)
                ):
                    batch.delete(skey, self._handles["docs"])
                    batch.delete_range(*history.key_range(t.collection, t.key), self._handles["history"])
                    dropped[skey] = None
            if not dropped:
                return 0
            item = self._stage(batch, dropped, set(), {}, [])
        self._group.wait(item)
        return len(dropped)

    def apply_coordinated(
        self, items: list[Replicated]
    ) -> tuple[list[Change], list[StoredDocument | Tombstone]]:
        """A coordinator's write arriving at an owner: all of it, or — when this owner already
        holds a higher stamp for one of its keys (the coordinator was behind) — none of it, and
        those newer records for the coordinator to catch up from."""
        [answer] = self.apply_coordinated_many([items])
        if isinstance(answer, ThemisError):
            raise answer
        return answer

    def apply_coordinated_many(
        self, messages: list[list[Replicated]]
    ) -> list[tuple[list[Change], list[StoredDocument | Tombstone]] | ThemisError]:
        """Several coordinated writes at once (one replication batch): each all-or-nothing as
        in ``apply_coordinated`` and answered on its own (a refused one is its error), all
        staged under one hold of the lock so they share one synced write."""
        answers = self._stage_coordinated_many(messages)
        for answer in answers:
            if not isinstance(answer, ThemisError) and answer[0] is not None:
                self._group.wait(answer[0][0])
        return _coordinated_answers(answers)

    async def apply_coordinated_many_async(
        self, messages: list[list[Replicated]]
    ) -> list[tuple[list[Change], list[StoredDocument | Tombstone]] | ThemisError]:
        """``apply_coordinated_many`` for a coroutine (see ``apply_replicated_async``)."""
        answers = self._stage_coordinated_many(messages)
        for answer in answers:
            if not isinstance(answer, ThemisError) and answer[0] is not None:
                await self._group.wait_async(answer[0][0])
        return _coordinated_answers(answers)

    def _stage_coordinated_many(self, messages: list[list[Replicated]]) -> list:
        answers: list = []
        with self._lock:
            for items in messages:
                try:
                    answers.append(self._stage_coordinated(items))
                except ThemisError as exc:
                    answers.append(exc)
        return answers

    def _stage_coordinated(self, items: list[Replicated]):
        """Under ``_lock``: (staged or None, newer records held here)."""
        for item in items:
            check_collection(item.collection)
            check_key(item.key)
        newer = []
        for item in items:
            raw = self._raw(storage_key(item.collection, item.key))
            stored = codec.decode_stamp(raw)
            if stored is not None and stored > item.stamp:
                newer.append(entry(item.collection, item.key, raw))
        if newer:
            return None, newer
        return self._stage_replicated(items, None), []

    def _keep_superseded(
        self, batch: Ops, collection: str, key: str, previous: bytes | None, stamp: Stamp
    ) -> None:
        """Keep the record ``stamp`` supersedes in the history and compact the versions more than
        ``history_versions`` behind ``stamp``, in the same batch (nothing when history is off)."""
        if self.history_versions <= 0:
            return
        handle = self._handles["history"]
        if previous is not None:
            batch.put(history.version_key(collection, key, codec.decode_version(previous)), previous, handle)
        oldest_kept = stamp.version - self.history_versions
        if oldest_kept > 1:
            batch.delete_range(*history.below(collection, key, oldest_kept), handle)

    def _install(
        self,
        installs: list[tuple[Write, Stamp, int]],
        also: Callable[[Ops], None] | None = None,
        synced: bool = True,
    ):
        """Stage (write, stamp, previous live version) triples as one atomic part of the next
        synced write (with whatever ``also`` adds to it): (item to wait for, changes)."""
        started = time.perf_counter()
        batch = Ops()
        docs: dict[bytes, bytes | None] = {}
        befores: dict[bytes, bytes | None] = {}
        live: dict[tuple[str, str], bool] = {}
        count_delta: dict[str, int] = {}
        changes: list[Change] = []
        for w, stamp, previous in installs:
            self._ensure_collection(w.collection, batch)
            ident = (w.collection, w.key)
            was_live = live.get(ident, previous != 0)
            skey = storage_key(w.collection, w.key)
            if skey in docs:
                before = docs[skey]
            else:
                before = befores[skey] = self._raw(skey)
            self._keep_superseded(batch, w.collection, w.key, before, stamp)
            if w.document is None:
                value = codec.encode_tombstone(stamp)
            elif w.encoded is not None:
                value = codec.stamped(stamp, w.encoded)
            else:
                value = codec.encode(stamp, w.document, self.max_document_bytes, self.max_document_depth)
            batch.put(skey, value, self._handles["docs"])
            docs[skey] = value
            now_live = w.document is not None
            count_delta[w.collection] = count_delta.get(w.collection, 0) + (now_live - was_live)
            live[ident] = now_live
            changes.append(
                Change(w.collection, w.key, stamp.version, w.document, previous, stamp.hlc, stamp.origin)
            )
        touched = {w.collection for w, _, _ in installs}
        if also is not None:
            also(batch)
        return self._stage(batch, docs, touched, count_delta, changes, started, synced, befores), changes


def _live_document(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None or codec.is_tombstone(raw):
        return None
    return codec.decode(raw)[1]


def _coordinated_answers(
    answers: list,
) -> list[tuple[list[Change], list[StoredDocument | Tombstone]] | ThemisError]:
    """Staged coordinated writes (now durable) as (changes, newer) answers, errors as they are."""
    out: list[tuple[list[Change], list[StoredDocument | Tombstone]] | ThemisError] = []
    for answer in answers:
        if isinstance(answer, ThemisError):
            out.append(answer)
        elif answer[0] is None:
            out.append(([], answer[1]))
        else:
            out.append((answer[0][1], []))
    return out


class Transaction:
    """Snapshot-isolated reads, buffered writes, first-committer-wins commit."""

    def __init__(self, store: DocumentStore) -> None:
        self._store = store
        self._snapshot = store._docs.snapshot()
        self._seen: dict[tuple[str, str], int] = {}
        self._writes: list[Write] = []
        self._buffer: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._done = False

    def _snapshot_get(self, collection: str, key: str) -> bytes | None:
        try:
            return self._snapshot[storage_key(collection, key)]
        except Exception:  # rocksdict raises a bare Exception("key not found")
            return None

    def _see(self, collection: str, key: str) -> bytes | None:
        raw = self._snapshot_get(collection, key)
        self._seen.setdefault((collection, key), codec.decode_version(raw))
        return raw

    def get(self, collection: str, key: str) -> dict[str, Any] | None:
        check_collection(collection)
        check_key(key)
        if (collection, key) in self._buffer:
            return self._buffer[(collection, key)]
        raw = self._see(collection, key)
        return None if raw is None else codec.decode(raw)[1]

    def put(self, collection: str, key: str, document: dict[str, Any]) -> None:
        check_collection(collection)
        check_key(key)
        self._see(collection, key)
        self._writes.append(Write(collection, key, document))
        self._buffer[(collection, key)] = document

    def delete(self, collection: str, key: str) -> None:
        check_collection(collection)
        check_key(key)
        self._see(collection, key)
        self._writes.append(Write(collection, key, None))
        self._buffer[(collection, key)] = None

    def commit(self) -> list[Change]:
        if self._done:
            raise BadRequest("transaction already finished", code="transaction_finished")
        self._done = True
        try:
            return self._store.commit(self._writes, expected=self._seen)
        finally:
            self._release()

    def abort(self) -> None:
        self._done = True
        self._release()

    def _release(self) -> None:
        self._snapshot = None

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._done:
            self.abort() if exc_type else self.commit()


def _overlaid(snap: Any, pending: dict[bytes, bytes | None]) -> Iterator[tuple[bytes, bytes]]:
    """``snap``'s records with ``pending`` laid over them (None: gone); keys only pending last."""
    try:
        for skey, raw in snap.items():
            if skey in pending:
                raw = pending.pop(skey)
                if raw is None:
                    continue
            yield skey, raw
    finally:
        del snap
    for skey in sorted(pending):
        if pending[skey] is not None:
            yield skey, pending[skey]


def _published() -> None:
    """What a neighbour's entry publishes once durable: nothing (its owner keeps its own state)."""
