"""Stored document values: an 8-byte big-endian version followed by strict JSON.

A value with no JSON after the version is a tombstone: the key was deleted at that version.
Tombstones keep versions monotonic across delete and re-create, which is what lets replicas
and catch-up compare versions alone ("the higher version wins") and still see deletes.

Strict means no NaN/Infinity (they are not JSON and would poison vector indexes) — checked
when encoding, so no write path can store them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import BadRequest, PayloadTooLarge

_VERSION_BYTES = 8


def encode(version: int, document: dict[str, Any], max_bytes: int) -> bytes:
    try:
        body = json.dumps(document, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
    except ValueError as exc:
        raise BadRequest("documents may not contain NaN or Infinity", code="invalid_number") from exc
    except TypeError as exc:
        raise BadRequest(f"document is not JSON-serialisable: {exc}", code="invalid_document") from exc
    if len(body) > max_bytes:
        raise PayloadTooLarge(
            f"document is {len(body)} bytes; the limit is {max_bytes}", code="document_too_large"
        )
    return version.to_bytes(_VERSION_BYTES, "big") + body


def encode_tombstone(version: int) -> bytes:
    return version.to_bytes(_VERSION_BYTES, "big")


def is_tombstone(raw: bytes) -> bool:
    return len(raw) == _VERSION_BYTES


def decode(raw: bytes) -> tuple[int, dict[str, Any] | None]:
    """(version, document); the document is None for a tombstone."""
    version = int.from_bytes(raw[:_VERSION_BYTES], "big")
    return version, (None if len(raw) == _VERSION_BYTES else json.loads(raw[_VERSION_BYTES:]))


def decode_version(raw: bytes | None) -> int:
    """The stored version, tombstones included; 0 means "never written"."""
    return 0 if raw is None else int.from_bytes(raw[:_VERSION_BYTES], "big")


def live_version(raw: bytes | None) -> int:
    """The version of a live document; 0 when absent or deleted (what If-Match compares)."""
    return 0 if raw is None or len(raw) == _VERSION_BYTES else int.from_bytes(raw[:_VERSION_BYTES], "big")


def check_finite(values: list[Any]) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise BadRequest("vectors must be lists of finite numbers", code="invalid_vector")
