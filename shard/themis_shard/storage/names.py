"""Names and addresses: collection names, document keys and URNs (API.md).

Collection names are ``[a-z0-9_-]{1,64}``; keys are URL-safe (RFC 3986 unreserved characters)
and at most 256 bytes. Neither may contain the NUL byte that separates them in storage keys,
which these rules guarantee.
"""

from __future__ import annotations

import re

from ..errors import BadRequest

COLLECTION_PATTERN = r"^[a-z0-9_-]{1,64}$"
#: Not "." or "..": path segments every URL library removes or resolves.
KEY_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._~-]{1,256}$"
URN_PATTERN = "^urn:themis:" + COLLECTION_PATTERN[1:-1] + ":" + KEY_PATTERN[1:]
COLLECTION_RE = re.compile(COLLECTION_PATTERN)
KEY_RE = re.compile(KEY_PATTERN)
URN_PREFIX = "urn:themis:"


def check_collection(name: str) -> str:
    if not isinstance(name, str) or not COLLECTION_RE.fullmatch(name):
        raise BadRequest(
            f"invalid collection name {name!r}: use 1-64 of [a-z0-9_-]", code="invalid_collection_name"
        )
    return name


def check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise BadRequest(
            f"invalid document key {key!r}: use 1-256 URL-safe characters [A-Za-z0-9._~-], "
            "not '.' or '..' (URLs normalise them away)",
            code="invalid_key",
        )
    return key


def urn(collection: str, key: str) -> str:
    return f"{URN_PREFIX}{collection}:{key}"


def parse_urn(value: str) -> tuple[str, str]:
    """``urn:themis:{collection}:{key}`` → (collection, key), validated."""
    if not isinstance(value, str) or not value.startswith(URN_PREFIX):
        raise BadRequest(f"invalid URN {value!r}: expected urn:themis:<collection>:<key>", code="invalid_urn")
    collection, sep, key = value[len(URN_PREFIX) :].partition(":")
    if not sep:
        raise BadRequest(f"invalid URN {value!r}: expected urn:themis:<collection>:<key>", code="invalid_urn")
    return check_collection(collection), check_key(key)


def storage_key(collection: str, key: str) -> bytes:
    return collection.encode() + b"\x00" + key.encode()


_URN_PREFIX_BYTES = URN_PREFIX.encode()


def storage_key_urn(skey: bytes) -> bytes:
    """``urn(collection, key)`` as UTF-8, from the storage key: what the ring hashes."""
    return _URN_PREFIX_BYTES + skey.replace(b"\x00", b":", 1)


def split_storage_key(raw: bytes) -> tuple[str, str]:
    collection, _, key = raw.partition(b"\x00")
    return collection.decode(), key.decode()
