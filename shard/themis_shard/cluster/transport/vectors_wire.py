"""Embeddings between shards as raw float32 rows, not JSON.

Data-local EMBED sends the URNs to the shard that holds the documents and brings their vectors
back: 8 vectors of 384 dimensions are 59 KB of JSON, which the owner wrote from floats and the
caller parsed back into floats before writing them as JSON once more for its client. The model
computes float32, so its rows travel as they are — 12 KB, no text in between — and the caller's
floats are exactly those the owner's ``tolist()`` would have given.

The body is ``MAGIC`` + rows (u32) + dimension (u32), big-endian, then the rows, little-endian
float32. Pure functions; no I/O.
"""

from __future__ import annotations

import struct

import numpy as np

CONTENT_TYPE = "application/x-themis-vectors"
MAGIC = b"TVF4"
_HEAD = struct.Struct(">4sII")


def encode_vectors(rows: np.ndarray) -> bytes:
    """``rows`` (2-D, float32) as one body."""
    if rows.ndim != 2 or rows.dtype != np.float32:
        raise ValueError(f"expected 2-D float32 rows, got {rows.ndim}-D {rows.dtype}")
    return _HEAD.pack(MAGIC, rows.shape[0], rows.shape[1]) + rows.astype("<f4", copy=False).tobytes()


def decode_vectors(body: bytes, rows: int) -> list[list[float]]:
    """The ``rows`` vectors a body carries, as Python floats; ``ValueError`` for a body that is
    not one, or that carries another number of rows or fewer bytes than it says."""
    if len(body) < _HEAD.size:
        raise ValueError(f"a vectors body of {len(body)} bytes has no head")
    magic, count, dimension = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise ValueError("not a vectors body")
    if count != rows:
        raise ValueError(f"{count} vectors for {rows} documents")
    if len(body) != _HEAD.size + 4 * count * dimension:
        raise ValueError(f"{len(body) - _HEAD.size} bytes of data for {count}×{dimension} float32")
    data = np.frombuffer(body, dtype="<f4", offset=_HEAD.size)
    return data.reshape(count, dimension).tolist()
