"""Spec: RAID parity through an array module (cupy on a GPU, numpy here) is leopard's, bit for bit.

The GPU path is the same code as the numpy path with ``xp`` swapped, so these tests run it on
the CPU: the table codec must equal ``reed-solomon-leopard`` on every unit it encodes and every
erasure pattern it repairs, and the host-facing wrapper must hand back host arrays.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from themis_shard.raid.parity import (
    LinearRSCodec,
    NotEnoughUnits,
    OnDevice,
    RSCodec,
    XorCodec,
    array_module,
    make_codec,
)


def units(k: int, size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(k)]


GEOMETRY = st.sampled_from([(1, 1), (2, 2), (3, 1), (4, 2), (4, 3), (6, 2), (10, 4)])


@settings(max_examples=25, deadline=None)
@given(GEOMETRY, st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_table_encode_equals_leopard_bit_for_bit(geometry, blocks, seed) -> None:
    k, m = geometry
    data = units(k, 64 * blocks, seed)
    expected = RSCodec(k, m).encode(data)
    got = LinearRSCodec(k, m, np).encode(data)
    for e, g in zip(expected, got, strict=True):
        assert np.array_equal(e, g)


@settings(max_examples=25, deadline=None)
@given(GEOMETRY, st.integers(1, 16), st.integers(0, 2**32 - 1), st.data())
def test_table_reconstruct_equals_the_lost_units_for_any_erasure_pattern(
    geometry, blocks, seed, draw
) -> None:
    k, m = geometry
    data = units(k, 64 * blocks, seed)
    stripe = data + [p.copy() for p in RSCodec(k, m).encode(data)]
    lost = draw.draw(st.lists(st.integers(0, k + m - 1), min_size=1, max_size=m, unique=True))
    present = {i: u for i, u in enumerate(stripe) if i not in lost}
    got = LinearRSCodec(k, m, np).reconstruct(present, lost)
    for i in lost:
        assert np.array_equal(got[i], stripe[i]), (k, m, lost, i)


def test_every_erasure_pattern_of_a_6_plus_2_stripe_is_restored() -> None:
    k, m = 6, 2
    codec = LinearRSCodec(k, m, np)
    data = units(k, 64 * 100, 5)
    stripe = data + codec.encode(data)
    for lost in itertools.combinations(range(k + m), m):
        present = {i: u for i, u in enumerate(stripe) if i not in lost}
        got = codec.reconstruct(present, lost)
        assert all(np.array_equal(got[i], stripe[i]) for i in lost)


def test_more_lost_units_than_parity_is_refused_on_the_table_path_too() -> None:
    codec = LinearRSCodec(4, 2, np)
    stripe = units(6, 64, 1)
    with pytest.raises(NotEnoughUnits):
        codec.reconstruct({i: stripe[i] for i in range(3)}, [3, 4, 5])


def test_units_must_be_whole_64_byte_blocks() -> None:
    with pytest.raises(ValueError, match="multiples of 64"):
        LinearRSCodec(2, 1, np).encode(units(2, 100, 0))


@pytest.mark.parametrize(("kind", "k", "m"), [("xor", 3, 1), ("rs", 4, 2)])
def test_the_device_wrapper_takes_and_returns_host_units(kind, k, m) -> None:
    inner = XorCodec(k, 4096, np) if kind == "xor" else LinearRSCodec(k, m, np)
    codec = OnDevice(inner, np)
    data = units(k, 4096, 3)
    parity = codec.encode(data)
    assert all(isinstance(p, np.ndarray) and p.dtype == np.uint8 for p in parity)
    expected = make_codec(kind, k, m, 4096).encode(data)
    assert all(np.array_equal(p, e) for p, e in zip(parity, expected, strict=True))
    stripe = data + [p.copy() for p in parity]
    got = codec.reconstruct({i: u for i, u in enumerate(stripe) if i != 0}, [0])
    assert np.array_equal(got[0], stripe[0])


def test_without_a_cuda_device_the_array_module_is_numpy() -> None:
    xp = array_module(prefer_gpu=True)
    if xp is not np:
        pytest.skip("a CUDA device is present: cupy is the right answer here")
    assert array_module(prefer_gpu=False) is np


def test_on_the_cpu_make_codec_keeps_leopard_for_reed_solomon() -> None:
    assert isinstance(make_codec("rs", 4, 2, 4096), RSCodec)
    assert isinstance(make_codec("xor", 4, 1, 4096), XorCodec)


def test_a_raid_service_set_to_cpu_parity_computes_with_numpy(tmp_path) -> None:
    from themis_shard.raid.service import RaidService
    from themis_shard.raid.settings import RaidSettings
    from themis_shard.raid.store import UnitStore

    service = RaidService(RaidSettings(parity_device="cpu"), "s0", UnitStore(tmp_path), None, lambda: None)
    assert service.xp is np
