"""The document store's format versions: one marker per RocksDB column family.

``meta`` holds ``format:<column family>`` → version (8 bytes, big-endian) for every column
family (documents, collections, counters, hints, 2PC intents and coordinator log, in-flight
writes, superseded document versions). :func:`open_formats` runs before anything else touches
the store: a column family newer than this code stops the shard
(:class:`~themis_core.data_format.FormatTooNew`); an older one is migrated forward one step at
a time, each step's rewrites and its new marker in one synced WriteBatch, so a crash mid-upgrade
resumes from the last finished step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from rocksdict import WriteBatch
from themis_core.data_format import UNMARKED, check

from .documents import DocumentStore

log = logging.getLogger(__name__)

#: The layout this code reads and writes, per column family.
CURRENT: Mapping[str, int] = {
    "docs": 1,
    "collections": 1,
    "meta": 1,
    "hints": 1,
    "intents": 1,
    "txn_log": 1,
    "inflight": 1,
    "history": 1,
}

#: One step (column family, from version) → a function that adds the step's rewrites of that
#: column family to the batch; the step's result is ``from version + 1``. None yet: format 1 is
#: what 0.1.0 wrote unmarked, so upgrading from it only records the markers.
Migration = Callable[[DocumentStore, WriteBatch], None]
MIGRATIONS: Mapping[tuple[str, int], Migration] = {}


def _key(cf: str) -> bytes:
    return f"format:{cf}".encode()


def stored_formats(store: DocumentStore) -> dict[str, int | None]:
    meta, _, _, _ = store.column_family("meta")
    return {cf: (int.from_bytes(raw, "big") if (raw := meta.get(_key(cf))) else None) for cf in CURRENT}


def open_formats(
    store: DocumentStore,
    current: Mapping[str, int] = CURRENT,
    migrations: Mapping[tuple[str, int], Migration] = MIGRATIONS,
) -> dict[str, int]:
    """Refuse newer column families, migrate older ones, mark them all; the versions now stored."""
    found = {cf: v if v is not None else UNMARKED for cf, v in stored_formats(store).items() if cf in current}
    for cf, version in found.items():
        check(f"{store.path} column family {cf!r}", version, current[cf])
    _, meta_handle, db, sync = store.column_family("meta")
    for cf, version in found.items():
        while version < current[cf]:
            step = migrations.get((cf, version))
            if step is None:
                raise RuntimeError(f"no migration of column family {cf!r} from format {version}")
            batch = WriteBatch(raw_mode=True)
            step(store, batch)
            version += 1
            batch.put(_key(cf), version.to_bytes(8, "big"), meta_handle)
            db.write(batch, sync)
            log.info("%s: column family %s migrated to format %d", store.path, cf, version)
    unmarked = [cf for cf, v in stored_formats(store).items() if v is None and cf in current]
    if unmarked:
        batch = WriteBatch(raw_mode=True)
        for cf in unmarked:
            batch.put(_key(cf), current[cf].to_bytes(8, "big"), meta_handle)
        db.write(batch, sync)
    return {cf: current[cf] for cf in found}
