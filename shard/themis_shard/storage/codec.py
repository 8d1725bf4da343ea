"""Stored document values: a header (version and stamp) followed by strict JSON.

Layout: ``version (8 bytes, big-endian) · 0x01 · hlc (8 bytes) · len(origin) (1 byte) · origin
· JSON``. The stamp (``stamps.Stamp``: version, hybrid clock, minting shard) is what replicas
compare, so it is stored with the value and travels with every copy. Values written before
stamps existed (``version · JSON``) still decode, with the zero stamp (``hlc`` 0, origin "").

A value with no JSON after the header is a tombstone: the key was deleted at that version.
Tombstones keep versions monotonic across delete and re-create, which is what lets replicas
and catch-up compare stamps alone ("the higher stamp wins") and still see deletes.

Strict means no NaN/Infinity (they are not JSON and would poison vector indexes) and no nesting
deeper than ``max_depth`` (deeper documents could be stored but not serialised back by the
API) — both checked when encoding, so no write path can store them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import BadRequest, PayloadTooLarge, lone_surrogate
from .stamps import Stamp

_VERSION_BYTES = 8
_STAMPED = 0x01
#: The API serialises documents through pydantic, which refuses nesting deeper than ~250.
DEFAULT_MAX_DEPTH = 128


def depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0, ``{}`` is 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level + 1)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level + 1)
            stack.extend((v, level + 1) for v in item)
    return deepest


def check_depth(value: Any, max_depth: int, what: str = "document") -> None:
    """400 ``<what>_too_deep`` past ``max_depth``: a value nested deeper than the API can
    serialise back is refused by name wherever it enters (documents, AQL values and results)."""
    found = depth(value)
    if found > max_depth:
        raise BadRequest(
            f"{what.replace('_', ' ')} nesting depth is {found}; the limit is {max_depth}",
            code=f"{what}_too_deep",
        )


def _header(stamp: Stamp) -> bytes:
    origin = stamp.origin.encode()
    if len(origin) > 255:
        raise ValueError("origin id longer than 255 bytes")
    return (
        stamp.version.to_bytes(_VERSION_BYTES, "big")
        + bytes((_STAMPED,))
        + stamp.hlc.to_bytes(8, "big")
        + bytes((len(origin),))
        + origin
    )


def _body_offset(raw: bytes) -> int:
    if len(raw) > _VERSION_BYTES and raw[_VERSION_BYTES] == _STAMPED:
        return _VERSION_BYTES + 10 + raw[_VERSION_BYTES + 9]
    return _VERSION_BYTES


def encode_body(document: dict[str, Any], max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> bytes:
    """The JSON of a document, checked (NaN/Infinity, size, depth)."""
    check_depth(document, max_depth)
    try:
        body = json.dumps(document, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:  # a ValueError too: before the NaN case
        raise lone_surrogate(exc) or BadRequest(str(exc), code="invalid_document") from None
    except ValueError as exc:
        raise BadRequest("documents may not contain NaN or Infinity", code="invalid_number") from exc
    except TypeError as exc:
        raise BadRequest(f"document is not JSON-serialisable: {exc}", code="invalid_document") from exc
    if len(body) > max_bytes:
        raise PayloadTooLarge(
            f"document is {len(body)} bytes; the limit is {max_bytes}", code="document_too_large"
        )
    return body


def encode(
    version: int | Stamp, document: dict[str, Any], max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH
) -> bytes:
    stamp = version if isinstance(version, Stamp) else Stamp(version)
    return _header(stamp) + encode_body(document, max_bytes, max_depth)


def stamped(stamp: Stamp, body: bytes) -> bytes:
    """A body that ``encode_body`` returned, under its stamp: ``encode`` without encoding again."""
    return _header(stamp) + body


def encode_tombstone(version: int | Stamp) -> bytes:
    return _header(version if isinstance(version, Stamp) else Stamp(version))


def is_tombstone(raw: bytes) -> bool:
    return len(raw) == _body_offset(raw)


def decode(raw: bytes) -> tuple[int, dict[str, Any] | None]:
    """(version, document); the document is None for a tombstone."""
    version = int.from_bytes(raw[:_VERSION_BYTES], "big")
    offset = _body_offset(raw)
    return version, (None if len(raw) == offset else json.loads(raw[offset:]))


def body(raw: bytes) -> bytes | None:
    """The JSON of a stored value, undecoded; None for a tombstone."""
    offset = _body_offset(raw)
    return None if len(raw) == offset else raw[offset:]


def decode_stamp(raw: bytes | None) -> Stamp | None:
    """The stored stamp (tombstones included); None means "never written"."""
    if raw is None:
        return None
    version, hlc, origin = stamp_parts(raw)
    return Stamp(version, hlc, origin.decode())


def stamp_parts(raw: bytes) -> tuple[int, int, bytes]:
    """(version, hlc, origin as stored) without building a ``Stamp``: for hashing many records."""
    version = int.from_bytes(raw[:_VERSION_BYTES], "big")
    if len(raw) > _VERSION_BYTES and raw[_VERSION_BYTES] == _STAMPED:
        n = raw[_VERSION_BYTES + 9]
        hlc = int.from_bytes(raw[_VERSION_BYTES + 1 : _VERSION_BYTES + 9], "big")
        return version, hlc, raw[_VERSION_BYTES + 10 : _VERSION_BYTES + 10 + n]
    return version, 0, b""


def decode_version(raw: bytes | None) -> int:
    """The stored version, tombstones included; 0 means "never written"."""
    return 0 if raw is None else int.from_bytes(raw[:_VERSION_BYTES], "big")


def live_version(raw: bytes | None) -> int:
    """The version of a live document; 0 when absent or deleted (what If-Match compares)."""
    return 0 if raw is None or is_tombstone(raw) else int.from_bytes(raw[:_VERSION_BYTES], "big")


def check_finite(values: list[Any]) -> None:
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise BadRequest("vectors must be lists of finite numbers", code="invalid_vector")
