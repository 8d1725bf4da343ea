"""Spec: scatter-gather batch inference — the splitting policy (pure) and the gather (async)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from themis_shard.cluster.routing.scatter import BatchItem, gather, jain_fairness, loads_of, split_batch

SHARDS = ["s0", "s1", "s2", "s3"]

items_strategy = st.lists(
    st.tuples(st.sampled_from(["legal", "medical", None]), st.permutations(SHARDS)), min_size=1, max_size=120
)


def make(raw) -> list[BatchItem]:
    return [BatchItem(i, d, tuple(pref)) for i, (d, pref) in enumerate(raw)]


@settings(max_examples=60, deadline=None)
@given(raw=items_strategy, n=st.integers(1, 4))
def test_every_item_goes_to_exactly_one_available_shard_within_the_fair_share(raw, n) -> None:
    shards = SHARDS[:n]
    items = make(raw)
    a = split_batch(items, shards)
    assigned = sorted(i for ix in a.by_shard.values() for i in ix)
    assert assigned == list(range(len(items)))
    assert set(a.by_shard) <= set(shards)
    cap = -(-len(items) // n)
    assert max(loads_of(a, shards).values()) <= cap


@settings(max_examples=60, deadline=None)
@given(raw=items_strategy)
def test_load_stays_fair_even_when_one_domain_dominates(raw) -> None:
    items = make([("legal", SHARDS)] * 60 + list(raw))
    loads = list(loads_of(split_batch(items, SHARDS), SHARDS).values())
    assert jain_fairness(loads) >= 0.75


def test_a_group_stays_on_its_best_shard_when_it_fits_the_cap() -> None:
    items = make([("legal", ("s2", "s0", "s1", "s3"))] * 3 + [("medical", ("s1", "s0", "s2", "s3"))] * 3)
    a = split_batch(items, SHARDS, slack=2.0)  # cap ⌈6/4·2⌉ = 3
    assert a.by_shard == {"s2": [0, 1, 2], "s1": [3, 4, 5]}
    assert a.fallbacks[0][0] == "s0"  # the retry goes to the group's next-best shard


def test_a_big_group_spills_to_its_next_best_shards_in_order() -> None:
    items = make([("legal", ("s2", "s0", "s1", "s3"))] * 8)
    a = split_batch(items, SHARDS)
    assert loads_of(a, SHARDS) == {"s0": 2, "s1": 2, "s2": 2, "s3": 2}
    assert a.by_shard["s2"] == [0, 1]


def run(coro):
    return asyncio.run(coro)


def test_gather_keeps_request_order_and_retries_a_failed_shard_once_elsewhere() -> None:
    items = make([(None, ("s0", "s1"))] * 2 + [(None, ("s1", "s0"))] * 2)
    a = split_batch(items, ["s0", "s1"])
    calls = []

    async def send(shard, indices):
        calls.append((shard, indices))
        if shard == "s1":
            raise ConnectionError("down")
        return [{"text": f"item {i} on {shard}"} for i in indices]

    results, stats = run(gather(a, 4, send, timeout_s=5))
    assert [r["text"] for r in results] == [f"item {i} on s0" for i in range(4)]
    assert stats.retried == 2 and stats.failed_items == 0


def test_items_that_fail_twice_become_error_entries_in_place() -> None:
    a = split_batch(make([(None, ("s0", "s1"))] * 3), ["s0", "s1"])

    async def send(shard, indices):
        raise ConnectionError(f"{shard} down")

    results, stats = run(gather(a, 3, send, timeout_s=5))
    assert all(r["error"]["code"] == "shard_unavailable" for r in results)
    assert stats.failed_items == 3


def test_the_collective_timeout_bounds_the_whole_batch() -> None:
    a = split_batch(make([(None, ("s0", "s1"))] * 2), ["s0"])

    async def send(shard, indices):
        await asyncio.sleep(10)

    results, stats = run(gather(a, 2, send, timeout_s=0.2))
    assert stats.seconds < 2
    assert [r["error"]["code"] for r in results] == ["timeout", "timeout"]


def test_splitting_needs_a_shard() -> None:
    with pytest.raises(ValueError):
        split_batch(make([(None, ("s0",))]), [])
