"""A shard's part of a backup: a RocksDB checkpoint and its trained adapters, staged on disk.

The checkpoint (``rocksdict.Checkpoint``) is one consistent point of every column family —
documents, collections, intents and the coordinator log — made of hard links to the immutable
SST files, so it costs little space and no pause of writes. The staged files are served one by
one to whoever runs the backup, then dropped (``drop``, or the next ``take`` of the same id).
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

from themis_core.cluster_backup.manifest import FileEntry, check_backup_id

from ..errors import NotFound
from ..storage.documents import DocumentStore

CHUNK = 1 << 20
#: a staged snapshot this old belongs to a backup that died
STALE_S = 24 * 3600.0


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class SnapshotStore:
    def __init__(self, root: Path, store: DocumentStore, adapters_dir: Path) -> None:
        """``root``: where snapshots are staged (on the data volume: hard links need it);
        ``adapters_dir``: the trained adapters (``<weights>/trained``)."""
        self.root = Path(root)
        self.store = store
        self.adapters_dir = Path(adapters_dir)

    def _dir(self, backup_id: str) -> Path:
        return self.root / check_backup_id(backup_id)

    def take(self, backup_id: str) -> list[FileEntry]:
        """Checkpoint the store and copy the adapters (again, if this id was taken before).
        Snapshots staged more than ``STALE_S`` ago are dropped first: their backup died before
        it dropped them, and their hard links would keep deleted SST files on disk."""
        self._drop_stale()
        target = self._dir(backup_id)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        self.store.checkpoint(target / "db")
        if self.adapters_dir.is_dir():
            (target / "adapters").mkdir()
            for adapter in sorted(self.adapters_dir.glob("*.gguf")):
                shutil.copyfile(adapter, target / "adapters" / adapter.name)
        return [
            FileEntry(path=p.relative_to(target).as_posix(), size=p.stat().st_size, sha256=sha256_of(p))
            for p in sorted(target.rglob("*"))
            if p.is_file()
        ]

    def _drop_stale(self) -> None:
        if not self.root.is_dir():
            return
        cutoff = time.time() - STALE_S
        for staged in self.root.iterdir():
            if staged.is_dir() and staged.stat().st_mtime < cutoff:
                shutil.rmtree(staged, ignore_errors=True)

    def file(self, backup_id: str, path: str) -> Path:
        """A staged file, or 404 (never a path outside the snapshot)."""
        base = self._dir(backup_id).resolve()
        found = (base / path).resolve()
        if not found.is_relative_to(base) or not found.is_file():
            raise NotFound(
                f"backup {backup_id} has no staged file {path!r} here", code="backup_file_not_found"
            )
        return found

    def drop(self, backup_id: str) -> bool:
        target = self._dir(backup_id)
        existed = target.exists()
        shutil.rmtree(target, ignore_errors=True)
        return existed
