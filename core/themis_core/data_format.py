"""Data-format versions of what a shard keeps on disk, and the rule every store follows.

Each persisted structure carries the version of its layout: the document store per RocksDB
column family (``storage/formats.py``), the vector index files, the KV-prefix disk tier, the
trained-adapter record, the RAID manifest and the cluster plan. On open a shard

* refuses data **newer** than itself with :class:`FormatTooNew`, which names the store and both
  versions (a downgrade past a format change must be a restore, never a guess), and
* migrates **older** data forward, step by step, recording the new version with each step.

Data written before markers existed (release 0.1.0) is unmarked and is format 1: the first
marked layout is byte-for-byte the one 0.1.0 wrote, so stamping it is its whole migration.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: The marker file of a directory store (vector indexes, the KV-prefix disk tier).
MARKER = "FORMAT"
#: What unmarked data (written by Themis 0.1.0) is.
UNMARKED = 1


class FormatTooNew(RuntimeError):
    """Data written by a newer Themis than this one: the shard stops rather than misread it."""

    def __init__(self, store: str, found: int, supported: int) -> None:
        super().__init__(
            f"{store} has data format {found}, but this Themis reads formats up to {supported}: "
            "it was written by a newer version. Run that version (or newer), or restore a backup "
            "taken by this one; nothing was changed."
        )
        self.store, self.found, self.supported = store, found, supported


def check(store: str, found: int, supported: int) -> None:
    if found > supported:
        raise FormatTooNew(store, found, supported)


def directory_format(path: Path, store: str, supported: int) -> int:
    """The format of the directory store at ``path``, stamped with ``supported`` when unmarked
    (new or written by 0.1.0). Raises :class:`FormatTooNew` for a newer one; returns an older
    one for the caller to migrate (and then :func:`stamp`)."""
    marker = path / MARKER
    try:
        found = int(json.loads(marker.read_text())["format"])
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)
        stamp(path, UNMARKED if any(path.iterdir()) else supported)
        found = UNMARKED if any(p.name != MARKER for p in path.iterdir()) else supported
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatTooNew(store, 1 << 30, supported) from exc  # unreadable: never guess
    check(store, found, supported)
    return found


def stamp(path: Path, version: int) -> None:
    """Record ``version`` atomically (write, fsync, rename)."""
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / f"{MARKER}.tmp"
    with tmp.open("w") as f:
        json.dump({"format": version}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / MARKER)
