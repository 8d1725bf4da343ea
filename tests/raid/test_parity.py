"""Codecs: redundancy restores any ≤ m lost units bit-exactly; more is refused, never guessed."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
from themis_shard.raid.parity import NotEnoughUnits, crc32, make_codec, xor_into

UNIT = 64 << 10
CASES = [("none", 4, 0), ("mirror", 1, 2), ("xor", 3, 1), ("xor", 7, 1), ("rs", 2, 2), ("rs", 4, 3)]


def units(k: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, UNIT, dtype=np.uint8) for _ in range(k)]


@pytest.mark.parametrize(("kind", "k", "m"), CASES)
def test_any_m_lost_units_are_restored_bit_exact(kind, k, m):
    codec = make_codec(kind, k, m, UNIT)
    data = units(k)
    stripe = data + [p.copy() for p in codec.encode(data)]
    for lost in itertools.combinations(range(k + m), m):
        present = {i: u for i, u in enumerate(stripe) if i not in lost}
        got = codec.reconstruct(present, lost)
        for i in lost:
            assert np.array_equal(got[i], stripe[i]), (kind, lost, i)


@pytest.mark.parametrize(("kind", "k", "m"), CASES)
def test_more_than_m_lost_units_is_refused(kind, k, m):
    codec = make_codec(kind, k, m, UNIT)
    data = units(k)
    stripe = data + [p.copy() for p in codec.encode(data)]
    lost = range(m + 1)
    with pytest.raises(NotEnoughUnits):
        codec.reconstruct({i: u for i, u in enumerate(stripe) if i not in lost}, lost)


def test_xor_parity_is_the_xor_of_the_data_and_reuses_its_buffer():
    codec = make_codec("xor", 3, 1, UNIT)
    data = units(3, seed=1)
    p1 = codec.encode(data)[0]
    assert np.array_equal(p1, data[0] ^ data[1] ^ data[2])
    p2 = codec.encode(units(3, seed=2))[0]
    assert p1.ctypes.data == p2.ctypes.data  # same output buffer: no allocation per stripe


def test_xor_into_handles_lengths_that_are_not_word_multiples():
    a, b = np.arange(13, dtype=np.uint8), np.full(13, 7, dtype=np.uint8)
    assert np.array_equal(xor_into(np.empty(13, np.uint8), [a, b]), a ^ b)
    with pytest.raises(ValueError, match="differ in length"):
        xor_into(np.empty(12, np.uint8), [a, b])


def test_crc32_matches_zlib():
    data = units(1)[0]
    assert crc32(data) == zlib.crc32(data.tobytes())
