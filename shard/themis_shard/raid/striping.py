"""Cut a model file into stripes, compute redundancy and crcs, and build its manifest.

The reader reuses one stripe buffer (first-touch allocation is the slow part); each yielded
stripe's arrays are valid until the next one is read. Deterministic: every shard that stripes
the same file with the same layout produces the same units and the same manifest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .layout import RaidLayout
from .manifest import Manifest
from .parity import Codec, crc32, make_codec


@dataclass
class Stripe:
    index: int
    units: list[np.ndarray]  # k data then m redundancy units, all unit_size long
    crcs: list[int]


def codec_for(layout: RaidLayout, xp: Any = np) -> Codec:
    """The layout's codec; ``xp`` = cupy computes parity on the GPU (same bytes)."""
    return make_codec(layout.codec, layout.k, layout.m, layout.unit_size, xp)


def iter_stripes(
    f: BinaryIO,
    layout: RaidLayout,
    size: int,
    codec: Codec | None = None,
    hasher: hashlib._Hash | None = None,
) -> Iterator[Stripe]:
    codec = codec or codec_for(layout)
    buf = np.zeros(layout.stripe_bytes, dtype=np.uint8)
    view = memoryview(buf)
    remaining = size
    for s in range(layout.stripes(size)):
        want = min(layout.stripe_bytes, remaining)
        got = 0
        while got < want:
            n = f.readinto(view[got:want])
            if not n:
                raise ValueError(f"file ended after {size - remaining + got} of {size} bytes (truncated?)")
            got += n
        if want < layout.stripe_bytes:
            buf[want:] = 0  # zero padding of the last stripe; the manifest keeps the true size
        if hasher is not None:
            hasher.update(view[:want])
        remaining -= want
        data = [buf[i * layout.unit_size : (i + 1) * layout.unit_size] for i in range(layout.k)]
        units = data + codec.encode(data)
        yield Stripe(s, units, [crc32(u) for u in units])


def stripe_file(path: Path, layout: RaidLayout, name: str, on_stripe=None, xp: Any = np) -> Manifest:
    """Stripe ``path``; ``on_stripe(stripe)`` sees every stripe (to store or send units)."""
    size = path.stat().st_size
    hasher = hashlib.sha256()
    rows = []
    with path.open("rb") as f:
        for stripe in iter_stripes(f, layout, size, codec_for(layout, xp), hasher=hasher):
            rows.append(tuple(stripe.crcs))
            if on_stripe is not None:
                on_stripe(stripe)
    return manifest_for(layout, name, size, hasher.hexdigest(), rows)


def manifest_for(layout: RaidLayout, name: str, size: int, sha256: str, rows) -> Manifest:
    return Manifest(
        name=name,
        sha256=sha256,
        size=size,
        mode=layout.mode,
        shards=layout.shards,
        data_units=layout.k,
        parity_units=layout.m,
        unit_size=layout.unit_size,
        crc32=tuple(tuple(r) for r in rows),
    )


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
