"""A synced RocksDB write that does not hold the GIL through the fsync.

rocksdict holds the GIL for the whole of ``db.write(batch, sync=True)``, fsync included
(measured: with one thread doing synced writes, a 1 ms ``time.sleep`` in another thread
oversleeps by ~7 ms, the length of one fsync on a busy disk; the event loop stalls the same
way). So the group's write is split in two: ``db.write(batch, sync=False)`` — RocksDB appends
the record to the current WAL file and hands it to the OS (``write(2)``, as it does for every
write without ``manual_wal_flush``), GIL held for microseconds — and then :meth:`WalSync.sync`
fsyncs the live WAL files itself, with ``os.fsync``, which releases the GIL (the 1 ms sleep then
oversleeps by ~0.1 ms, as when idle). The record is on disk before the write is acknowledged,
exactly as with ``sync=True``. A WAL file that RocksDB created since the last call also gets
its directory entry synced (RocksDB only does that itself on a synced write); one that is gone
by the time it is opened was flushed to an SST file, which RocksDB syncs before deleting it.
Without WAL files in the directory (another ``wal_dir``) it falls back to ``sync=True``.
"""

from __future__ import annotations

import os
from pathlib import Path


class WalSync:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._known: frozenset[str] = frozenset()

    def live_logs(self) -> list[str]:
        return sorted(e.name for e in os.scandir(self.path) if e.name.endswith(".log"))

    def available(self) -> bool:
        """Does the WAL live in the database directory (the only layout this can sync)?"""
        return bool(self.live_logs())

    def sync(self) -> None:
        """Make everything written to the WAL so far durable (GIL released while it waits)."""
        names = self.live_logs()
        for name in names:
            try:
                fd = os.open(self.path / name, os.O_RDONLY)
            except FileNotFoundError:  # flushed to an SST (synced) and deleted meanwhile
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if frozenset(names) - self._known:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._known = frozenset(names)
