"""Spec: the token bucket (clock passed in) and weighted fair queueing over tenants, deterministic."""

from __future__ import annotations

import math

import pytest
from themis_shard.tenants.fair import FairQueue
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


def order(queue: FairQueue[str]) -> list[str]:
    out = []
    while (item := queue.pop()) is not None:
        out.append(item)
    return out


def test_a_flooding_tenant_does_not_delay_another_behind_its_backlog() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(100):
        queue.push("flood", f"f{i}", cost=10)
    for _ in range(50):
        queue.pop()  # the flood has been served alone for a while
    queue.push("steady", "s0", cost=10)
    assert queue.pop() == "s0"  # next, not after the flood's other 50
    assert len(order(queue)) == 50


def test_equal_weights_share_cost_equally_and_weights_share_proportionally() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(30):
        queue.push("a", f"a{i}", cost=10)
        queue.push("b", f"b{i}", cost=10, weight=2)
    first = order(queue)[:30]
    assert sum(x.startswith("b") for x in first) == 20  # 2:1 while both wait


def test_cost_is_what_is_shared_not_request_count() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(10):
        queue.push("big", f"big{i}", cost=100)
        queue.push("small", f"small{i}", cost=10)
    first = order(queue)[:11]
    assert sum(x.startswith("small") for x in first) == 10  # ten small ones cost one big one


def test_a_latecomer_gets_its_share_from_now_on_not_a_burst_to_catch_up() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(10):
        queue.push("a", f"a{i}", cost=10)
    assert order_of(queue, 5) == ["a0", "a1", "a2", "a3", "a4"]
    for i in range(5):
        queue.push("b", f"b{i}", cost=10)
    assert order_of(queue, 6) == ["b0", "a5", "b1", "a6", "b2", "a7"]  # alternating, not b0..b4


def order_of(queue: FairQueue[str], n: int) -> list[str]:
    return [queue.pop() for _ in range(n)]  # type: ignore[misc]


def test_a_removed_item_is_never_served() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a0")
    queue.push("b", "b0")
    assert queue.remove("a", "a0") and not queue.remove("a", "a0")
    assert order(queue) == ["b0"] and len(queue) == 0
