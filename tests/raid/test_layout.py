"""The layout as a specification: every unit placed once, a stripe's units on distinct shards
(so parity never shares a shard with its stripe's data), redundancy rotating, tolerance = m."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from themis_shard.raid.layout import LayoutError, RaidLayout
from themis_shard.raid.settings import RaidSettings

UNIT = 4096


@st.composite
def layouts(draw) -> tuple[RaidLayout, int]:
    mode = draw(st.sampled_from(["raid0", "raid1", "raid5", "raid6"]))
    n = draw(st.integers({"raid0": 1, "raid1": 2, "raid5": 3, "raid6": 3}[mode], 12))
    settings = RaidSettings(unit_size=UNIT)
    if mode == "raid6":
        m = draw(st.integers(1, n - 1))
        k = draw(st.integers(1, n - m))
        settings = RaidSettings(unit_size=UNIT, data_units=k, parity_units=m)
    copies = draw(st.integers(2, n)) if mode == "raid1" else 2
    layout = RaidLayout.build(mode, [f"s{i}" for i in range(n)], settings, copies=copies)
    size = draw(st.integers(0, layout.stripe_bytes * 3 * n + 7))
    return layout, size


@given(layouts())
def test_every_unit_is_placed_exactly_once(case):
    layout, size = case
    held = [ref for shard in layout.shards for ref in layout.units_on(shard, size)]
    everything = sorted((r.stripe, r.index) for r in layout.units(size))
    assert sorted((r.stripe, r.index) for r in held) == everything
    assert len(held) == layout.stripes(size) * layout.width
    for shard in layout.shards:
        assert all(layout.shard_of(r.stripe, r.index) == shard for r in layout.units_on(shard, size))


@given(layouts())
def test_a_stripe_never_puts_two_units_on_one_shard(case):
    layout, size = case
    for s in range(layout.stripes(size)):
        shards = layout.stripe_shards(s)
        assert len(set(shards)) == layout.width
        data = set(shards[: layout.k])
        assert not data & set(shards[layout.k :]), "parity shares a shard with its stripe's data"


@given(layouts())
def test_losing_tolerance_many_shards_leaves_every_stripe_k_units(case):
    layout, size = case
    lost = set(layout.shards[: layout.tolerance])
    for s in range(layout.stripes(size)):
        assert sum(sh not in lost for sh in layout.stripe_shards(s)) >= layout.k


@given(layouts())
def test_parity_rotates_so_no_shard_is_a_parity_hot_spot(case):
    layout, _ = case
    if layout.m == 0:
        return
    n = len(layout.shards)
    parity = Counter(layout.shard_of(s, layout.k) for s in range(n))
    assert len(parity) == n  # over N consecutive stripes every shard holds the first parity unit once
    if n > 1:
        assert layout.shard_of(0, layout.k) != layout.shard_of(1, layout.k)


@given(layouts())
def test_data_spans_tile_the_file(case):
    layout, size = case
    covered = 0
    for s in range(layout.stripes(size)):
        for u in range(layout.k):
            start, end = layout.data_span(s, u, size)
            assert start == min(covered, size)
            covered = max(covered, end)
    assert covered == size


def test_raid5_is_n_minus_1_data_plus_one_xor_parity():
    layout = RaidLayout.build("raid5", ["a", "b", "c", "d"], RaidSettings(unit_size=UNIT))
    assert (layout.k, layout.m, layout.codec, layout.tolerance) == (3, 1, "xor", 1)
    assert [layout.shard_of(s, 3) for s in range(4)] == ["d", "a", "b", "c"]


def test_raid6_defaults_to_two_rs_parity_units():
    layout = RaidLayout.build("raid6", ["a", "b", "c", "d", "e"], RaidSettings(unit_size=UNIT))
    assert (layout.k, layout.m, layout.codec, layout.tolerance) == (3, 2, "rs", 2)


@pytest.mark.parametrize(
    ("mode", "shards", "settings", "message"),
    [
        ("raid5", ["a", "b"], {}, "needs at least 3 shards"),
        ("raid6", ["a", "b", "c", "d"], {"data_units": 3, "parity_units": 2}, "needs 5 shards"),
        ("raid6", ["a", "b"], {}, "needs at least 3"),
        ("raid1", ["a", "b"], {"mirrors": 3}, "needs 3 shards"),
        ("raid5", ["a", "a", "b"], {}, "duplicate shard ids"),
        ("raid7", ["a", "b", "c"], {}, "unknown RAID mode"),
    ],
)
def test_unsatisfiable_layouts_are_refused_clearly(mode, shards, settings, message):
    with pytest.raises(LayoutError, match=message):
        RaidLayout.build(mode, shards, RaidSettings(unit_size=UNIT, **settings))


def test_unit_size_must_be_aligned():
    with pytest.raises(ValueError, match="multiple of 64"):
        RaidSettings(unit_size=1000)
    with pytest.raises(LayoutError, match="multiple of 64"):
        RaidLayout("raid5", ("a", "b", "c"), 2, 1, 1000)
