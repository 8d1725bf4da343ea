"""The binary format of an exported KV-prefix state, and its validation (pure, no llama.cpp).

Layout (little-endian)::

    b"THKVP1\\n\\0"          8 bytes magic (format 1)
    header_len   u32         ≤ 64 KiB
    header       JSON utf-8  see ``BlobHeader``
    tokens       i32 × n_tokens
    state        state_bytes bytes (llama_state_seq_get_data of one sequence)

The header carries the model fingerprint (architecture, quantisation, file sha256), the context
settings the state depends on (KV types, flash attention, swa_full, kv_unified, n_stream), the
context size it needs (``n_ctx_min``), the hash-chain block and the prefix hash, and a sha256
over tokens + state. ``decode`` checks every field against the importing engine and recomputes
the prefix hash from the tokens before a single byte goes to llama.cpp; anything else raises
``BlobError`` (a 4xx for the route), never anything else.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import numpy as np

from .prefix_cache import block_hashes

MAGIC = b"THKVP1\n\0"
MAX_HEADER = 64 << 10
MEDIA_TYPE = "application/vnd.themis.kv-prefix"
CONTEXT_KEYS = ("type_k", "type_v", "flash_attn", "swa_full", "kv_unified", "n_stream")
MODEL_KEYS = ("architecture", "quantisation", "sha256")


class BlobError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True, slots=True)
class Expect:
    """What the importing side requires."""

    model: dict  # MODEL_KEYS
    context: dict  # CONTEXT_KEYS
    n_ctx: int
    n_vocab: int
    block: int
    seed: bytes
    max_bytes: int = 512 << 20


@dataclass(frozen=True, slots=True)
class Blob:
    header: dict
    tokens: list[int]
    state: bytes

    @property
    def key(self) -> str:
        return self.header["hash"]


def encode(*, model: dict, context: dict, block: int, key: str, tokens, state: bytes) -> bytes:
    tok = np.asarray(tokens, dtype="<i4").tobytes()
    header = {
        "format": 1,
        "model": {k: model[k] for k in MODEL_KEYS},
        "context": {k: context[k] for k in CONTEXT_KEYS},
        "n_ctx_min": len(tokens) + 1,
        "block": block,
        "hash": key,
        "n_tokens": len(tokens),
        "state_bytes": len(state),
        "checksum": hashlib.sha256(tok + state).hexdigest(),
    }
    h = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    return b"".join((MAGIC, struct.pack("<I", len(h)), h, tok, state))


def _int(header: dict, key: str, lo: int = 0) -> int:
    v = header.get(key)
    if type(v) is not int or v < lo:
        raise BlobError("invalid_header", f"header field {key!r} must be an integer ≥ {lo}")
    return v


def decode(data: bytes, expect: Expect) -> Blob:
    """Parse and validate; raises BlobError (status 400/409/413) on anything unacceptable."""
    if len(data) > expect.max_bytes:
        raise BlobError("too_large", f"blob of {len(data)} bytes exceeds {expect.max_bytes}", 413)
    if len(data) < len(MAGIC) + 4 or data[: len(MAGIC)] != MAGIC:
        raise BlobError("not_a_kv_prefix", "not a Themis KV-prefix blob (bad magic)")
    (hlen,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    if hlen > MAX_HEADER or start + hlen > len(data):
        raise BlobError("truncated", "header length out of range")
    try:
        header = json.loads(data[start : start + hlen].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BlobError("invalid_header", f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != 1:
        raise BlobError("invalid_header", "unsupported header format")
    model, context = header.get("model"), header.get("context")
    if not isinstance(model, dict) or not isinstance(context, dict):
        raise BlobError("invalid_header", "header needs 'model' and 'context' objects")
    for k in MODEL_KEYS:
        if model.get(k) != expect.model[k]:
            raise BlobError(
                "incompatible_model",
                f"model {k} {model.get(k)!r} differs from this shard's {expect.model[k]!r}",
                409,
            )
    for k in CONTEXT_KEYS:
        if context.get(k) != expect.context[k] or type(context.get(k)) is not type(expect.context[k]):
            raise BlobError(
                "incompatible_context", f"context {k} {context.get(k)!r} ≠ {expect.context[k]!r}", 409
            )
    n = _int(header, "n_tokens", 1)
    size = _int(header, "state_bytes", 1)
    n_ctx_min = _int(header, "n_ctx_min", n + 1)
    if n_ctx_min > expect.n_ctx:
        raise BlobError("context_too_small", f"needs n_ctx ≥ {n_ctx_min}, this shard has {expect.n_ctx}", 409)
    if _int(header, "block", 1) != expect.block:
        raise BlobError(
            "incompatible_block", f"prefix blocks differ (this shard: {expect.block} tokens)", 409
        )
    if n % expect.block:
        raise BlobError("invalid_header", "n_tokens is not a whole number of blocks")
    key, checksum = header.get("hash"), header.get("checksum")
    if not isinstance(key, str) or not isinstance(checksum, str):
        raise BlobError("invalid_header", "header needs 'hash' and 'checksum' strings")
    body = start + hlen
    if len(data) - body != 4 * n + size:
        raise BlobError("truncated", f"body is {len(data) - body} bytes, header says {4 * n + size}")
    payload = memoryview(data)[body:]
    if hashlib.sha256(payload).hexdigest() != checksum:
        raise BlobError("checksum_mismatch", "checksum does not match the payload")
    tokens = np.frombuffer(payload[: 4 * n], dtype="<i4")
    if tokens.min() < 0 or tokens.max() >= expect.n_vocab:
        raise BlobError("invalid_tokens", "token id out of the vocabulary")
    tok_list = tokens.tolist()
    if block_hashes(tok_list, expect.block, expect.seed)[-1] != key:
        raise BlobError("hash_mismatch", "prefix hash does not match the tokens and settings")
    return Blob(header, tok_list, bytes(payload[4 * n :]))
