"""Restore a backup into one shard of a new cluster, with any number of shards.

Each shard of the new cluster restores itself on first start (``THEMIS_RESTORE_FROM=DEST/ID``),
before it opens its store: it fetches the backup into a staging directory and checks the
manifest and every file's size and sha256 — a missing, partial, corrupt or too-new backup stops
it there, before anything is written — then reads every source shard's checkpoint and keeps, of
each key, the record of its primary at the cut (``cut.py``; ``fencing.primary``: the first
in-sync owner, so a shard out of sync at the cut, which may miss writes, is never read), plus
the records of committed transactions still prepared at the cut, when the new ring makes this
shard one of the key's owners. So the
data is re-placed by the new ring, and every owner of a key holds the same record (stamps and
versions as in the source). The records are copied as the source stored them, in bulk
(``DocumentStore.ingest``: large unlogged batches, one flush and one synced write at the end;
nothing is decoded, re-encoded or re-stamped), so a restore costs about what reading the
checkpoints does. Collections' settings come from the checkpoints; vector indexes are rebuilt
from the restored documents when the store opens (one bulk FAISS add per collection, no
embedding computed again: the vectors are the documents'); trained adapters are copied back.

The documents are written into ``documents.restoring`` and renamed into place last, with a
``restored.json`` marker: a shard killed mid-restore starts the restore again; a restarted
restored shard does not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import AccessType, Options, Rdict
from themis_core.cluster_backup.destinations import Destination, ObjectMissing, open_destination, split_ref
from themis_core.cluster_backup.manifest import MANIFEST, BackupInvalid, FileEntry, Manifest, parse_manifest
from themis_core.data_format import UNMARKED
from themis_core.plan import ClusterPlan

from ..cluster.placement.owners import Topology
from ..cluster.replication.fencing import primary
from ..storage.codec import is_tombstone
from ..storage.collections import CollectionConfig
from ..storage.documents import DocumentStore
from ..storage.formats import CURRENT
from ..storage.intents import decode_entry, decode_intent
from ..storage.names import split_storage_key
from .cut import committed_txns, rolled_forward

log = logging.getLogger(__name__)

MARKER = "restored.json"


class RestoreRefused(Exception):
    """The target is not empty (a restore never overwrites data)."""


@dataclass
class RestoreStats:
    documents: int = 0
    tombstones: int = 0
    rolled_forward: int = 0
    collections: int = 0
    adapters: int = 0
    #: the backup's bytes checked and staged, and the wall-clock seconds of the whole restore
    backup_bytes: int = 0
    seconds: float = 0.0


def read_manifest(dest: Destination, backup_id: str) -> Manifest:
    try:
        raw = dest.get_bytes(f"{backup_id}/{MANIFEST}")
    except ObjectMissing:
        raise BackupInvalid(
            f"{dest.url} holds no complete backup {backup_id} (no manifest: missing, or it did not finish)"
        ) from None
    return parse_manifest(raw, backup_id)


def _check(path: Path, f: FileEntry, where: str) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    size = path.stat().st_size
    if size != f.size or digest.hexdigest() != f.sha256:
        raise BackupInvalid(
            f"{where} is corrupt: {size} bytes, sha256 {digest.hexdigest()[:12]}…, "
            f"the manifest says {f.size} bytes, {f.sha256[:12]}…"
        )


def fetch_backup(
    dest: Destination,
    backup_id: str,
    staging: Path | None,
    progress: Callable[[int, int], None] | None = None,
) -> Manifest:
    """Check the backup whole (manifest, then every file's size and sha256) and, with
    ``staging``, keep the files there (``staging/<shard>/<path>``); :class:`BackupInvalid` names
    the first thing wrong. ``progress(bytes_done, bytes_total)``."""
    manifest = read_manifest(dest, backup_id)
    total, done = manifest.size, 0
    scratch = staging or Path(os.environ.get("TMPDIR", "/tmp")) / f".themis-verify-{backup_id}-{os.getpid()}"
    try:
        for part in manifest.shards:
            for f in part.files:
                key = manifest.file_key(part.shard_id, f.path)
                local = (scratch / part.shard_id / f.path) if staging else scratch / "file"
                local.parent.mkdir(parents=True, exist_ok=True)
                try:
                    dest.get_file(key, local)
                except ObjectMissing:
                    raise BackupInvalid(
                        f"backup {backup_id} is partial: {dest.url}/{key} is missing"
                    ) from None
                _check(local, f, f"{dest.url}/{key}")
                done += f.size
                if progress:
                    progress(done, total)
    finally:
        if staging is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def _open_checkpoint(path: Path) -> Rdict:
    names = Rdict.list_cf(str(path), Options(raw_mode=True))
    return Rdict(
        str(path),
        options=Options(raw_mode=True),
        column_families={n: Options(raw_mode=True) for n in names},
        access_type=AccessType.read_only(),
    )


def _items(db: Rdict, cf: str) -> Iterator[tuple[bytes, bytes]]:
    try:
        family = db.get_column_family(cf)
    except Exception:  # a column family the source never created
        return iter(())
    return iter(family.items())


def _docs_format(db: Rdict, where: str) -> None:
    """The documents are copied byte for byte, so they must be in the layout this Themis writes."""
    try:
        raw = db.get_column_family("meta").get(b"format:docs")
    except Exception:  # no meta column family: written before markers existed
        raw = None
    found = UNMARKED if raw is None else int.from_bytes(raw, "big")
    if found != CURRENT["docs"]:
        raise BackupInvalid(
            f"{where} holds documents in format {found}; this Themis restores format {CURRENT['docs']} "
            f"(restore it with the Themis that took it)"
        )


def restore_shard(
    manifest: Manifest,
    staging: Path,
    plan: ClusterPlan,
    shard_id: str,
    store: DocumentStore,
    adapters_dir: Path,
) -> RestoreStats:
    """Write into ``store`` (new and empty) what ``shard_id`` owns under ``plan``, from the staged
    backup: each key's record from its source primary's checkpoint, copied verbatim in bulk
    (``DocumentStore.ingest``: the stored bytes, stamp and version included, nothing decoded),
    then the rolled-forward transactions through the replicated write path."""
    source = Topology.of(ClusterPlan.model_validate(manifest.plan), shard_id)
    target = Topology.of(plan, shard_id)
    stats = RestoreStats()
    dbs = {p.shard_id: _open_checkpoint(staging / p.shard_id / "db") for p in manifest.shards}
    try:
        for source_id, db in dbs.items():
            _docs_format(db, f"backup {manifest.backup_id} shard {source_id}")
        committed = committed_txns(
            decode_entry(raw) for db in dbs.values() for _, raw in _items(db, "txn_log")
        )
        for db in dbs.values():
            for _, raw in _items(db, "collections"):
                config = CollectionConfig.model_validate_json(raw)
                if not store.has_collection(config.name):
                    store.declare_collection(config)
                    stats.collections += 1

        def mine(source_id: str, collection: str, key: str) -> bool:
            # the key's coordinator at the cut: its first in-sync owner, not its ring primary
            # (an owner out of sync at the cut was fenced and may miss acknowledged writes)
            return primary(source, collection, key) == source_id and target.owns(shard_id, collection, key)

        def records() -> Iterator[tuple[bytes, bytes]]:
            for source_id, db in dbs.items():
                for raw_key, raw in _items(db, "docs"):
                    if mine(source_id, *split_storage_key(raw_key)):
                        stats.tombstones += is_tombstone(raw)
                        yield raw_key, raw

        stats.documents = store.ingest(records())
        for source_id, db in dbs.items():
            intents = [decode_intent(raw) for _, raw in _items(db, "intents")]
            forward = [
                r
                for r in rolled_forward(intents, committed, source_id)
                if mine(source_id, r.collection, r.key)
            ]
            stats.rolled_forward += len(store.apply_replicated(forward)) if forward else 0
    finally:
        for db in dbs.values():
            db.close()
    adapters_dir.mkdir(parents=True, exist_ok=True)
    for adapter in sorted(staging.glob("*/adapters/*.gguf")):
        if not (adapters_dir / adapter.name).exists():
            shutil.copyfile(adapter, adapters_dir / adapter.name)
            stats.adapters += 1
    return stats


def data_dir_empty(data_dir: Path) -> bool:
    """Nothing a shard stores is there yet (the directory may exist)."""
    return not data_dir.exists() or not any(
        (data_dir / name).exists() and any((data_dir / name).iterdir()) for name in ("documents", "vectors")
    )


def restore_on_start(
    ref: str,
    data_dir: Path,
    plan: ClusterPlan,
    shard_id: str,
    open_store: Callable[[Path], DocumentStore],
    adapters_dir: Path,
) -> RestoreStats | None:
    """Restore ``DEST/ID`` into this shard's empty data directory, once (None: done before, or
    this shard joins a restored cluster whose ring moved on: a later member gets its keys by
    handoff from the others, never from the older backup)."""
    marker = data_dir / MARKER
    if marker.exists():
        return None
    if plan.ring_version != 1:
        log.info(
            "not restoring %s: the cluster's ring is at version %d; joining by handoff",
            ref,
            plan.ring_version,
        )
        return None
    if not data_dir_empty(data_dir):
        raise RestoreRefused(
            f"{data_dir} already holds data; a restore (THEMIS_RESTORE_FROM={ref}) goes into an empty "
            "data directory"
        )
    started = time.perf_counter()
    dest_url, backup_id = split_ref(ref)
    staging = data_dir / ".restore"
    shutil.rmtree(staging, ignore_errors=True)
    manifest = fetch_backup(open_destination(dest_url), backup_id, staging)
    restoring = data_dir / "documents.restoring"
    shutil.rmtree(restoring, ignore_errors=True)
    store = open_store(restoring)
    try:
        stats = restore_shard(manifest, staging, plan, shard_id, store, adapters_dir)
    finally:
        store.close()
    documents = data_dir / "documents"
    if documents.exists():
        shutil.rmtree(documents)  # empty (checked above)
    os.replace(restoring, documents)
    stats.backup_bytes, stats.seconds = manifest.size, round(time.perf_counter() - started, 3)
    marker.write_text(json.dumps({"backup": ref, **stats.__dict__}))
    shutil.rmtree(staging, ignore_errors=True)
    return stats
