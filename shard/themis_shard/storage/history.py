"""Where superseded document versions live: column family ``history``, one record per
(collection, key, version), the record exactly as it was stored (stamp and body, or a tombstone).

Answers tied to document versions (``rag/``) read a source at the version they cited; the store
keeps the last ``history_versions`` superseded versions of each key and compacts older ones in
the same write that supersedes them, so history is bounded per key. Pure key arithmetic.
"""

from __future__ import annotations

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
