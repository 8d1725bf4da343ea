"""Spec: a node's admission per tenant — priority allowance, concurrency, requests/s and
tokens/min refused at once by name with the seconds to wait, nothing taken by a refusal, and a
fair turn at the node's slots. The clock is a variable the test moves."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry
from themis_core.tenant_policy import TenantPolicy
from themis_shard.errors import ThemisError
from themis_shard.tenants.gate import TenantGate, TenantRefused
from themis_shard.tenants.metrics import TenantMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gate(*policies: TenantPolicy, **kw) -> tuple[TenantGate, Clock]:
    clock = Clock()
    return TenantGate({p.name: p for p in policies}, clock=clock, **kw), clock


def test_requests_per_s_refuses_the_excess_with_the_seconds_until_the_bucket_allows() -> None:
    g, clock = gate(TenantPolicy("acme", requests_per_s=2))
    g.check("acme", tokens=1, priority=0)
    g.check("acme", tokens=1, priority=0)
    with pytest.raises(TenantRefused) as refused:
        g.check("acme", tokens=1, priority=0)
    exc = refused.value
    assert exc.status == 429 and exc.limit == "requests_per_s"
    assert "tenant 'acme'" in exc.message and exc.headers == {"Retry-After": "1"}
    clock.now = 0.5
    g.check("acme", tokens=1, priority=0)  # one request's worth refilled


def test_tokens_per_min_charges_what_the_request_may_generate() -> None:
    g, _ = gate(TenantPolicy("acme", tokens_per_min=600))
    g.check("acme", tokens=500, priority=0)
    with pytest.raises(TenantRefused) as refused:
        g.check("acme", tokens=200, priority=0)  # 100 left, 100 missing at 10/s → 10 s
    assert refused.value.limit == "tokens_per_min" and refused.value.headers["Retry-After"] == "10"
    g.check("acme", tokens=100, priority=0)  # the refusal took nothing
    with pytest.raises(ThemisError, match="whole tokens_per_min 600") as big:
        g.check("acme", tokens=601, priority=0)
    assert big.value.status == 400 and big.value.code == "over_tenant_limit"


def test_a_refusal_on_one_limit_takes_nothing_from_the_other() -> None:
    g, _ = gate(TenantPolicy("acme", requests_per_s=2, tokens_per_min=60))
    g.check("acme", tokens=50, priority=0)  # one request and 10 tokens left
    with pytest.raises(TenantRefused, match="tokens_per_min"):
        g.check("acme", tokens=20, priority=0)
    g.check("acme", tokens=10, priority=0)  # the refusal spent neither the request nor tokens


def test_priority_above_the_allowance_is_refused_by_name() -> None:
    g, _ = gate(TenantPolicy("acme", max_priority=0))
    with pytest.raises(ThemisError) as refused:
        g.check("acme", tokens=1, priority=5)
    assert refused.value.status == 403 and refused.value.code == "priority_not_allowed"
    assert "priority 5 is above tenant 'acme''s max_priority 0" in refused.value.message
    g.check("acme", tokens=1, priority=0)
    g.check("default", tokens=1, priority=1000)  # no policy, no limit


def test_concurrency_and_metrics_per_tenant() -> None:
    registry = CollectorRegistry()
    g, _ = gate(TenantPolicy("acme", concurrency=1), metrics=TenantMetrics(registry))

    async def scenario() -> None:
        await g.acquire("acme", tokens=7, priority=0)
        with pytest.raises(TenantRefused, match="concurrency"):
            await g.acquire("acme", tokens=7, priority=0)
        await g.acquire("other", tokens=3, priority=0)  # another tenant is not held back
        g.release("acme")
        await g.acquire("acme", tokens=7, priority=0)

    asyncio.run(scenario())
    sample = registry.get_sample_value
    assert sample("themis_tenant_requests_total", {"tenant": "acme", "outcome": "admitted"}) == 2
    assert sample("themis_tenant_requests_total", {"tenant": "acme", "outcome": "throttled"}) == 1
    assert sample("themis_tenant_throttled_total", {"tenant": "acme", "limit": "concurrency"}) == 1
    assert sample("themis_tenant_tokens_total", {"tenant": "acme"}) == 14
    assert sample("themis_tenant_inflight", {"tenant": "acme"}) == 1
    assert sample("themis_tenant_inflight", {"tenant": "other"}) == 1


def test_contended_slots_go_round_robin_between_tenants_not_in_arrival_order() -> None:
    g, _ = gate(max_inflight=1)
    served: list[str] = []

    async def request(tenant: str) -> None:
        await g.acquire(tenant, tokens=1, priority=0)
        served.append(tenant)
        await asyncio.sleep(0)
        g.release(tenant)

    async def scenario() -> None:
        await g.acquire("flood", tokens=1, priority=0)  # holds the one slot
        tasks = [asyncio.create_task(request("flood")) for _ in range(5)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(request("steady")))
        await asyncio.sleep(0)
        g.release("flood")
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
    assert served.index("steady") <= 1  # not behind the flood's five


def test_a_waiter_that_goes_away_gives_its_place_and_its_slot_back() -> None:
    g, _ = gate(max_inflight=1)

    async def scenario() -> None:
        await g.acquire("a", tokens=1, priority=0)
        gone = asyncio.create_task(g.acquire("b", tokens=1, priority=0))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        g.release("a")
        await asyncio.wait_for(g.acquire("c", tokens=1, priority=0), 1)  # the slot is free

    asyncio.run(scenario())
