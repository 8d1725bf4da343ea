"""Where superseded document versions live: column family ``history``, one record per
(collection, key, version), the record exactly as it was stored (stamp and body, or a tombstone).

Answers tied to document versions (``rag/``) read a source at the version they cited; the store
keeps the last ``history_versions`` superseded versions of each key and compacts older ones in
the same write that supersedes them, so history is bounded per key. Pure: key arithmetic, and
picking a version (or the version as of a hybrid time) among a key's held records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import NotFound, ThemisError
from .names import storage_key


def version_key(collection: str, key: str, version: int) -> bytes:
    """``collection NUL key NUL version(8 bytes, big-endian)``: a key's versions sort in order."""
    return storage_key(collection, key) + b"\x00" + version.to_bytes(8, "big")


def key_range(collection: str, key: str) -> tuple[bytes, bytes]:
    """``[begin, end)`` covering every kept version of one key (keys never hold NUL)."""
    skey = storage_key(collection, key)
    return skey + b"\x00", skey + b"\x01"


def below(collection: str, key: str, version: int) -> tuple[bytes, bytes]:
    """``[begin, end)`` covering the kept versions of one key older than ``version``."""
    return key_range(collection, key)[0], version_key(collection, key, version)


def split_version(raw_key: bytes) -> int:
    return int.from_bytes(raw_key[-8:], "big")


class Record(Protocol):
    """A stored record as ``documents.entry`` returns it (document None: a delete)."""

    version: int
    hlc: int
    document: dict[str, Any] | None


def at_version(records: Sequence[Record], name: str, version: int, hlc: int | None = None) -> Record:
    """The record of ``version`` among a key's held ``records`` (oldest first). 410
    ``version_compacted`` when it is no longer held, or when the record now holding that number
    has another stamp (``hlc``: the key was deleted, its tombstone collected and the number
    reused); 404 ``version_not_found`` for a version never written here or one that is a delete."""
    for record in records:
        if record.version != version:
            continue
        if hlc is not None and record.hlc != hlc:
            break
        if record.document is None:
            raise NotFound(f"{name}@{version} is a delete, not a document", code="version_not_found")
        return record
    else:
        if version > (records[-1].version if records else 0):
            raise NotFound(f"{name}@{version} was never written (here)", code="version_not_found")
    raise ThemisError(
        f"{name}@{version} is no longer held: compacted away (THEMIS_DOCUMENT_HISTORY_VERSIONS "
        "superseded versions are kept per document)",
        code="version_compacted",
        status=410,
    )


def as_of(records: Sequence[Record], name: str, hlc: int) -> Record | None:
    """The key's record as it stood at hybrid time ``hlc``: the newest held record stamped at or
    before it (None: the key did not exist then, or was deleted). 410 ``snapshot_unavailable``
    when every held record is newer and older ones were compacted away."""
    before = [r for r in records if r.hlc <= hlc]
    if before:
        return before[-1] if before[-1].document is not None else None
    if not records or records[0].version == 1:
        return None
    raise ThemisError(
        f"{name} has no version at or before HLC {hlc} any more (compacted away)",
        code="snapshot_unavailable",
        status=410,
    )
