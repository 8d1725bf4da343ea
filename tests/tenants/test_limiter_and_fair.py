"""Spec: the token bucket (clock passed in) and deficit round robin over tenants, deterministic."""

from __future__ import annotations

import math

import pytest
from themis_shard.tenants.fair import DeficitRoundRobin
from themis_shard.tenants.limiter import TokenBucket


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_capacity() -> None:
    b = TokenBucket(rate=2.0, capacity=4.0, now=0.0)
    assert b.wait(4, now=0.0) == 0
    b.take(4, now=0.0)
    assert b.wait(1, now=0.0) == pytest.approx(0.5)  # one unit at 2 per second
    assert b.wait(1, now=0.5) == 0
    assert b.level(now=100.0) == 4.0  # never above capacity


def test_a_bucket_says_how_long_until_a_request_fits() -> None:
    b = TokenBucket(rate=100 / 60, capacity=100, now=0.0)  # 100 tokens per minute
    b.take(90, now=0.0)
    assert b.wait(40, now=0.0) == pytest.approx(30 / (100 / 60))  # 30 missing → 18 s
    assert b.wait(101, now=0.0) == math.inf  # more than a whole minute's worth never fits


def order(drr: DeficitRoundRobin[str]) -> list[str]:
    out = []
    while (item := drr.pop()) is not None:
        out.append(item)
    return out


def test_a_flooding_tenant_does_not_delay_another_behind_its_backlog() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin(quantum=10)
    for i in range(100):
        drr.push("flood", f"f{i}", cost=10)
    drr.push("steady", "s0", cost=10)
    served = order(drr)
    assert served.index("s0") <= 1  # served within the first round, not after 100 requests
    assert len(served) == 101


def test_equal_weights_share_cost_equally_and_weights_share_proportionally() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin(quantum=10)
    for i in range(30):
        drr.push("a", f"a{i}", cost=10)
        drr.push("b", f"b{i}", cost=10, weight=2)
    first = order(drr)[:30]
    assert sum(x.startswith("b") for x in first) == 20  # 2:1 while both wait


def test_cost_is_what_is_shared_not_request_count() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin(quantum=100)
    for i in range(10):
        drr.push("big", f"big{i}", cost=100)
        drr.push("small", f"small{i}", cost=10)
    first = order(drr)[:11]
    assert sum(x.startswith("small") for x in first) == 10  # ten small ones cost one big one


def test_an_idle_tenant_keeps_no_credit() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin(quantum=100)
    drr.push("a", "a0", cost=1)
    assert order(drr) == ["a0"]  # 99 of its turn's 100 unused: dropped once "a" has nothing waiting
    for i in range(3):
        drr.push("a", f"a{i + 1}", cost=50)
        drr.push("b", f"b{i}", cost=50)
    assert order(drr) == ["a1", "a2", "b0", "b1", "a3", "b2"]  # kept credit would serve a1..a3 first


def test_a_removed_item_is_never_served() -> None:
    drr: DeficitRoundRobin[str] = DeficitRoundRobin()
    drr.push("a", "a0")
    drr.push("b", "b0")
    assert drr.remove("a", "a0") and not drr.remove("a", "a0")
    assert order(drr) == ["b0"] and len(drr) == 0
