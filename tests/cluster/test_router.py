"""Adaptive domain routing: tiers θ1/θ2/θ3, latency penalty, LEAST_LOADED ties, breakers, fallback."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from themis_core.plan import RouterSettings
from themis_shard.cluster.routing.router import (
    AdaptiveShardRouter,
    Capability,
    NoShardAvailable,
    RoutingPolicy,
    rank_by_domain,
    route_by_domain,
)
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.remote import PeerError, PeerUnavailable


def cap(shard: str, alpha: float, lam: float = 0.0, domain: str = "legal", adapter: str = "") -> Capability:
    return Capability(shard, domain, alpha, lam, adapter)


def route(caps, *, loads=None, open_=(), fallback="ring-owner", domain="legal", **kw):
    return route_by_domain(domain, caps, loads or {}, frozenset(open_), fallback_shard=fallback, **kw)


# ---- the paper's unit test (§VII-B Phase 1): three domain scores → the highest-scoring shard --


def test_three_announcements_route_to_the_highest_scoring_shard():
    d = route([cap("s1", 0.82), cap("s2", 0.91), cap("s3", 0.85)])
    assert (d.shard_id, d.tier, d.fallback) == ("s2", 1, False)
    assert d.score == pytest.approx(0.91)


def test_latency_penalty_uses_gamma_per_100_ms_by_default():
    # s1: 0.95 − 0.1·(200/100) = 0.75 ; s2: 0.85 − 0.1·(0/100) = 0.85
    d = route([cap("s1", 0.95, 200.0), cap("s2", 0.85, 0.0)])
    assert d.shard_id == "s2"
    assert d.score == pytest.approx(0.85)


def test_latency_unit_is_a_setting_the_papers_parenthetical_is_unit_1000_ms():
    # With unit = 1000 ms, 200 ms costs only 0.02: s1 scores 0.93 and wins.
    d = route([cap("s1", 0.95, 200.0), cap("s2", 0.85, 0.0)], latency_unit_ms=1000.0)
    assert d.shard_id == "s1"


def test_a_faster_shard_with_negative_latency_delta_gains():
    d = route([cap("s1", 0.85, -100.0), cap("s2", 0.92, 0.0)])
    assert d.shard_id == "s1"  # 0.85 + 0.1 = 0.95 > 0.92


def test_tiers_are_tried_in_order_and_a_higher_tier_wins_even_with_a_lower_score():
    # s1 is in tier 1 (α > 0.8) but slow; s2 is tier 2 with a better score. Tier 1 still wins.
    d = route([cap("s1", 0.81, 500.0), cap("s2", 0.79, 0.0)])
    assert (d.shard_id, d.tier) == ("s1", 1)


@pytest.mark.parametrize(("alpha", "tier"), [(0.81, 1), (0.8, 2), (0.61, 2), (0.6, 3), (0.41, 3)])
def test_thresholds_are_strict(alpha, tier):
    d = route([cap("s1", alpha)])
    assert (d.shard_id, d.tier) == ("s1", tier)


def test_below_theta3_falls_back_to_consistent_hash():
    d = route([cap("s1", 0.4), cap("s2", -0.3)])
    assert (d.shard_id, d.tier, d.fallback) == ("ring-owner", None, True)
    assert "θ3" in d.reason


def test_no_domain_hint_or_unknown_domain_goes_to_the_ring():
    assert route([cap("s1", 0.9)], domain=None).shard_id == "ring-owner"
    assert route([cap("s1", 0.9)], domain="medical").fallback


def test_domains_match_case_insensitively():
    assert route([cap("s1", 0.9, domain="Legal")], domain=" LEGAL ").shard_id == "s1"


def test_least_loaded_wins_among_equal_scores():
    caps = [cap("s1", 0.9), cap("s2", 0.9), cap("s3", 0.9)]
    d = route(caps, loads={"s1": 7, "s2": 2, "s3": 5})
    assert d.shard_id == "s2"


def test_load_does_not_override_a_better_score():
    d = route([cap("s1", 0.95), cap("s2", 0.9)], loads={"s1": 100, "s2": 0})
    assert d.shard_id == "s1"


def test_equal_scores_and_equal_loads_spread_by_request_key():
    caps = [cap(f"s{i}", 0.9) for i in range(4)]
    chosen = {route(caps, tiebreak_key=f"req-{k}").shard_id for k in range(200)}
    assert chosen == {"s0", "s1", "s2", "s3"}


def test_open_breakers_are_skipped_in_every_tier():
    d = route([cap("s1", 0.95), cap("s2", 0.7)], open_={"s1"})
    assert (d.shard_id, d.tier) == ("s2", 2)


def test_open_breaker_on_the_ring_owner_moves_to_its_successor():
    d = route([], fallback=["owner", "successor"], open_={"owner"})
    assert d.shard_id == "successor" and d.fallback


def test_when_everything_is_open_the_owner_is_returned_and_the_reason_says_why():
    d = route([cap("s1", 0.95)], fallback=["owner"], open_={"s1", "owner"})
    assert d.shard_id == "owner" and "open" in d.reason


def test_best_adapter_per_shard_counts_once_in_the_ranking():
    ranked = rank_by_domain(
        "legal",
        [cap("s1", 0.85, adapter="a"), cap("s1", 0.95, adapter="b"), cap("s2", 0.9)],
        {},
        (),
        ["s2", "s3"],
    )
    assert [(d.shard_id, d.adapter_id) for d in ranked] == [("s1", "b"), ("s2", None), ("s3", None)]


def test_ranking_lists_tiers_then_ring_owners_without_duplicates():
    ranked = rank_by_domain(
        "legal", [cap("a", 0.5), cap("b", 0.9), cap("c", 0.7), cap("d", 0.1)], {}, (), ["c", "e"]
    )
    assert [(d.shard_id, d.tier) for d in ranked] == [("b", 1), ("c", 2), ("a", 3), ("e", None)]


def test_non_finite_values_are_ignored():
    d = route([cap("s1", float("nan")), cap("s2", 0.9, float("inf")), cap("s3", 0.7)])
    assert d.shard_id == "s3"


def test_policy_accepts_the_plans_router_settings_and_cluster_settings():
    p = RoutingPolicy.from_settings(RouterSettings(thresholds=(0.9, 0.5, 0.1), gamma=0.3))
    assert p.thresholds == (0.9, 0.5, 0.1) and p.gamma == 0.3 and p.latency_unit_ms == 100.0
    q = RoutingPolicy.from_settings(ClusterSettings(latency_unit_ms=1000))
    assert q.thresholds == (0.8, 0.6, 0.4) and q.gamma == 0.1 and q.latency_unit_ms == 1000


# ---- properties ---------------------------------------------------------------------------

shard_ids = st.sampled_from([f"s{i}" for i in range(8)])
caps_strategy = st.lists(st.builds(cap, shard_ids, st.floats(-1, 1), st.floats(-500, 5000)), max_size=12)
loads_strategy = st.dictionaries(shard_ids, st.integers(0, 50))


@settings(max_examples=150, deadline=None)
@given(caps_strategy, loads_strategy, st.frozensets(shard_ids), st.lists(shard_ids, min_size=1, unique=True))
def test_property_decision_is_an_eligible_shard_and_the_best_of_the_highest_tier(caps, loads, open_, ring):
    policy = RoutingPolicy()
    d = route(caps, loads=loads, open_=open_, fallback=ring)
    live = [c for c in caps if c.shard_id not in open_]
    tiers = enumerate(policy.thresholds, 1)
    top_tier = next((t for t, th in tiers if any(c.accuracy_delta > th for c in live)), None)
    if top_tier is None:
        assert d.fallback and d.shard_id in ring
        if set(ring) - open_:
            assert d.shard_id not in open_
        return
    assert d.tier == top_tier and not d.fallback and d.shard_id not in open_
    theta = policy.thresholds[top_tier - 1]
    best = max(policy.score(c) for c in live if c.accuracy_delta > theta)
    assert d.score == pytest.approx(best, abs=policy.tie_tolerance * 2)


@settings(max_examples=100, deadline=None)
@given(caps_strategy, loads_strategy, st.frozensets(shard_ids), st.lists(shard_ids, min_size=1, unique=True))
def test_property_ranking_is_unique_skips_open_breakers_and_is_deterministic(caps, loads, open_, ring):
    a = rank_by_domain("legal", caps, loads, open_, ring, tiebreak_key="k")
    b = rank_by_domain("legal", list(reversed(caps)), dict(loads), open_, list(ring), tiebreak_key="k")
    assert a == b
    ids = [d.shard_id for d in a]
    assert len(ids) == len(set(ids))
    assert not set(ids) & open_
    assert [d.fallback for d in a] == sorted(d.fallback for d in a)  # tiers first, then the ring


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 100), min_size=2, max_size=8))
def test_property_least_loaded_among_equals(loads_list):
    caps = [cap(f"s{i}", 0.9, 10.0) for i in range(len(loads_list))]
    loads = {f"s{i}": n for i, n in enumerate(loads_list)}
    d = route(caps, loads=loads)
    assert loads[d.shard_id] == min(loads_list)


# ---- the wrapper --------------------------------------------------------------------------


class View:
    def __init__(self, caps, loads=None):
        self.caps, self._loads = caps, loads or {}

    def capabilities(self, domain):
        return [c for c in self.caps if c.domain == domain]

    def loads(self):
        return self._loads


def make_router(caps, open_=(), registry=None, **kw):
    return AdaptiveShardRouter(
        View(caps),
        lambda key: ["owner", "succ"],
        lambda: frozenset(open_),
        RoutingPolicy(),
        registry or CollectorRegistry(),
        **kw,
    )


def test_wrapper_counts_fallbacks_only_for_domain_hinted_requests():
    reg = CollectorRegistry()
    r = make_router([cap("s1", 0.9)], registry=reg)
    assert r.route("legal", "k").shard_id == "s1"
    assert r.route("medical", "k").shard_id == "owner"
    assert r.route(None, "k").shard_id == "owner"
    assert reg.get_sample_value("themis_domain_routing_fallback_total") == 1
    assert reg.get_sample_value("themis_domain_routing_decisions_total", {"tier": "1"}) == 1
    assert reg.get_sample_value("themis_domain_routing_decisions_total", {"tier": "none"}) == 1


def test_dispatch_fails_over_past_a_down_slow_or_garbage_peer():
    class Down(Exception):
        pass

    calls: list[str] = []

    async def call(shard):
        calls.append(shard)
        if shard == "s1":
            raise Down("connection refused")
        if shard == "s2":
            await asyncio.sleep(10)  # slow: the per-attempt budget cuts it off
        if shard == "s3":
            raise ValueError("garbage JSON")
        return f"answer from {shard}"

    reg = CollectorRegistry()
    r = make_router(
        [cap("s1", 0.95), cap("s2", 0.9), cap("s3", 0.85)],
        registry=reg,
        attempt_timeout_s=0.05,
        retryable=(Exception,),
    )
    decision, result = asyncio.run(call_and_time(r, call))
    assert calls == ["s1", "s2", "s3", "owner"]
    assert (decision.shard_id, result) == ("owner", "answer from owner")
    assert reg.get_sample_value("themis_domain_routing_fallback_total") == 1


async def call_and_time(router, call):
    return await router.dispatch("legal", "key", call)


def test_dispatch_relays_a_peers_4xx_answer_instead_of_failing_over():
    calls = []

    async def call(shard):
        calls.append(shard)
        raise PeerError(shard, 400, "bad_request", "prompt too long")

    with pytest.raises(PeerError):
        asyncio.run(make_router([cap("s1", 0.95)]).dispatch("legal", "key", call))
    assert calls == ["s1"]


def test_dispatch_fails_over_on_peer_unavailable_by_default():
    async def call(shard):
        if shard == "s1":
            raise PeerUnavailable(shard, "circuit_open")
        return shard

    router = make_router([cap("s1", 0.95), cap("s2", 0.9)])
    decision, result = asyncio.run(router.dispatch("legal", "k", call))
    assert result == "s2" and decision.tier == 1


def test_router_reads_the_live_gossip_view():
    from themis_shard.cluster.membership.gossip_state import (
        AdapterCapabilityAnnouncement,
        GossipState,
        RoutingView,
    )

    state = GossipState.create("s0", now=0.0)
    state.merge_announcements(
        [
            AdapterCapabilityAnnouncement(
                shard_id="s2",
                adapter_id="legal-qa",
                domain="legal",
                accuracy_delta=0.85,
                performance_delta_p99_ms=20,
                federation_round=3,
                announced_at=1000.0,
            )
        ],
        now_wall=1000.0,
    )
    view = RoutingView(state, clock=lambda: 0.0, wall_clock=lambda: 1000.0)
    r = AdaptiveShardRouter(view, lambda key: ["s0"], frozenset, RoutingPolicy())
    d = r.route("legal", "k")
    assert (d.shard_id, d.tier, d.adapter_id) == ("s2", 1, "legal-qa")
    later = AdaptiveShardRouter(
        RoutingView(state, lambda: 0.0, lambda: 1000.0 + 7201), lambda key: ["s0"], frozenset, RoutingPolicy()
    )
    assert later.route("legal", "k").fallback  # the announcement expired


def test_dispatch_raises_when_no_shard_can_serve():
    async def call(shard):
        raise ConnectionError(shard)

    r = make_router([cap("s1", 0.95)])
    with pytest.raises(NoShardAvailable) as err:
        asyncio.run(r.dispatch("legal", "key", call))
    assert set(err.value.errors) == {"s1", "owner", "succ"}


def test_cached_tables_follow_gossip_changes_and_time():
    from themis_shard.cluster.membership.gossip_state import (
        AdapterCapabilityAnnouncement,
        GossipState,
        MemberRecord,
        RoutingView,
    )

    def announce(shard, alpha, rnd):
        return AdapterCapabilityAnnouncement(
            shard_id=shard,
            adapter_id="qa",
            domain="legal",
            accuracy_delta=alpha,
            performance_delta_p99_ms=0,
            federation_round=rnd,
            announced_at=1000.0,
        )

    now = [0.0]
    state = GossipState.create("s0", now=0.0)
    state.merge_members(
        [MemberRecord(shard_id="s1", heartbeat=1), MemberRecord(shard_id="s2", heartbeat=1)], now=0.0
    )
    state.merge_announcements([announce("s1", 0.9, 1), announce("s2", 0.85, 1)], 1000.0)
    r = AdaptiveShardRouter(RoutingView(state, lambda: now[0], lambda: 1000.0), lambda key: ["s0"], frozenset)
    assert r.route("legal", "k").shard_id == "s1"
    state.merge_announcements([announce("s2", 0.95, 2)], 1000.0)  # a new federation round
    assert r.route("legal", "k").shard_id == "s2"
    now[0] = 31.0  # s1 and s2 stop heartbeating and die; the cached table expires with time
    state.merge_members([MemberRecord(shard_id="s1", heartbeat=2)], now=31.0)
    assert r.route("legal", "k").shard_id == "s1"


def test_a_new_policy_from_a_reloaded_plan_applies_at_once():
    class VersionedView(View):
        def version(self):
            return 1  # never changes: only set_policy may invalidate the cached table

    r = AdaptiveShardRouter(VersionedView([cap("s1", 0.7)]), lambda key: ["owner"], frozenset)
    assert r.route("legal", "k").tier == 2
    r.set_policy(RoutingPolicy(thresholds=(0.65, 0.5, 0.3)))
    assert r.route("legal", "k").tier == 1
