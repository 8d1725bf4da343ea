"""Routing benchmark: pure decision latency, and failover time after a peer dies (real servers).

    PYTHONPATH=shard .venv/bin/python bench/routing.py [--quick]

1. Routing decision latency (targets: p99 ≤ 1 ms; paper Table II: routing overhead ≤ 5 ms):
   the pure ``route_by_domain`` over N shards' announcements, and the full
   ``AdaptiveShardRouter.route`` path (gossip view with TTL/liveness filtering, ring owners,
   breaker set) at N = 16, 100, 1000.
2. Circuit-breaker behaviour on real local uvicorn peers (target ≤ 20 ms to the first
   successful fallback; paper Table II: ≤ 100 ms): a domain-routed peer A is stopped; we time
   the first request that B then serves, the requests until A's breaker opens, and a request
   once it is open (A is skipped without a connect attempt).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shard"), str(ROOT)]

from prometheus_client import CollectorRegistry  # noqa: E402
from themis_core.ring import HashRing  # noqa: E402
from themis_shard.cluster.membership.gossip_state import (  # noqa: E402
    AdapterCapabilityAnnouncement,
    GossipState,
    MemberRecord,
    RoutingView,
    ShardLoad,
)
from themis_shard.cluster.routing.router import (  # noqa: E402
    AdaptiveShardRouter,
    Capability,
    RoutingPolicy,
    ScoreTable,
    route_by_domain,
)
from themis_shard.cluster.settings import ClusterSettings  # noqa: E402
from themis_shard.cluster.transport.breaker import BreakerState  # noqa: E402
from themis_shard.cluster.transport.remote import RemoteExecutor  # noqa: E402

from tests.cluster.peers import ServerThread  # noqa: E402

DOMAINS = ("legal", "medical", "transaction", "geospatial")
NOW_WALL = 1_700_000_000.0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def time_calls(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter_ns()
        fn(i)
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


def bench_decisions(n: int, calls: int) -> list[tuple[str, int, float, float]]:
    """N shards, one adapter each over four domains, 5 % of breakers open, random loads."""
    rng = random.Random(n)
    ids = [f"s{i}" for i in range(n)]
    caps = [
        Capability(sid, rng.choice(DOMAINS), rng.uniform(-0.2, 1.0), rng.uniform(-50, 400), f"a-{sid}")
        for sid in ids
    ]
    by_domain = {d: [c for c in caps if c.domain == d] for d in DOMAINS}
    loads = {sid: rng.randrange(0, 20) for sid in ids}
    open_ = frozenset(rng.sample(ids, max(1, n // 20)))
    ring = ids[:3]
    policy = RoutingPolicy()
    rows = []

    tables = {d: ScoreTable.build(d, by_domain[d], policy) for d in DOMAINS}
    lat = time_calls(lambda i: next(tables[DOMAINS[i % 4]].ranked(loads, open_, ring, str(i))), calls)
    rows.append(("ScoreTable head (pure; σ map prebuilt)", n, pct(lat, 0.5), pct(lat, 0.99)))

    def pure(i: int):
        d = DOMAINS[i % 4]
        return route_by_domain(d, by_domain[d], loads, open_, fallback_shard=ring, tiebreak_key=str(i))

    lat = time_calls(pure, calls)
    rows.append(("route_by_domain (pure; σ built per call)", n, pct(lat, 0.5), pct(lat, 0.99)))

    state = GossipState.create("s0", now=0.0)
    for sid in ids[1:]:
        state.merge_members(
            [MemberRecord(shard_id=sid, heartbeat=1, load=ShardLoad(pending_llm_requests=loads[sid]))],
            now=0.0,
        )
    state.merge_announcements(
        [
            AdapterCapabilityAnnouncement(
                shard_id=c.shard_id,
                adapter_id=c.adapter_id,
                domain=c.domain,
                accuracy_delta=c.accuracy_delta,
                performance_delta_p99_ms=c.performance_delta_p99_ms,
                federation_round=1,
                announced_at=NOW_WALL,
            )
            for c in caps
        ],
        NOW_WALL,
    )
    hash_ring = HashRing.of(ids, vnodes=2048 if n <= 100 else 256)
    router = AdaptiveShardRouter(
        RoutingView(state, lambda: 1.0, lambda: NOW_WALL + 1),
        lambda key: hash_ring.owners(key, 3),
        lambda: open_,
        RoutingPolicy(),
    )
    lat = time_calls(lambda i: router.route(DOMAINS[i % 4], f"urn:themis:docs:{i}"), calls)
    rows.append(("AdaptiveShardRouter.route (gossip view, ring)", n, pct(lat, 0.5), pct(lat, 0.99)))
    return rows


async def failover_trial() -> dict[str, float]:
    a, b = ServerThread().start(), ServerThread().start()
    urls = {"a": a.url(), "b": b.url()}
    reg = CollectorRegistry()
    ex = RemoteExecutor(ClusterSettings(), urls.__getitem__, registry=reg)
    caps = [Capability("a", "legal", 0.95, 5.0), Capability("b", "legal", 0.7, 5.0)]

    class View:
        def capabilities(self, domain):
            return caps

        def loads(self):
            return {}

    router = AdaptiveShardRouter(View(), lambda key: ["b"], ex.open_peers, RoutingPolicy(), reg)

    async def call(shard: str):
        # Fail over instead of retrying the same shard: another shard can serve this request.
        return await ex.post_json(shard, "/serve", {"prompt": "hi"}, retries=0)

    try:
        for _ in range(20):  # warm: pooled keep-alive connections to both peers
            decision, _ = await router.dispatch("legal", "k", call)
            assert decision.shard_id == "a"
        await ex.get_json("b", "/ok")
        a.stop()  # peer A dies
        t0 = time.perf_counter()
        decision, _ = await router.dispatch("legal", "k", call)
        first = (time.perf_counter() - t0) * 1e3
        assert decision.shard_id == "b"
        until_open = 1
        while ex.breakers.state("a") is not BreakerState.OPEN:
            await router.dispatch("legal", "k", call)
            until_open += 1
        t1 = time.perf_counter()
        decision, _ = await router.dispatch("legal", "k", call)
        skipped = (time.perf_counter() - t1) * 1e3
        assert decision.shard_id == "b" and decision.tier == 2
        return {"first_fallback_ms": first, "requests_until_open": until_open, "open_breaker_ms": skipped}
    finally:
        await ex.aclose()
        b.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer calls and trials")
    args = parser.parse_args()
    calls, trials = (2000, 3) if args.quick else (20000, 10)

    print("Routing decision latency (ms); target p99 ≤ 1 ms")
    print(f"{'path':<52} {'N':>5} {'p50':>9} {'p99':>9}  ok")
    for name, n, p50, p99 in [row for size in (16, 100, 1000) for row in bench_decisions(size, calls)]:
        print(f"{name:<52} {n:>5} {p50:>9.4f} {p99:>9.4f}  {'yes' if p99 <= 1 else 'NO'}")

    results = [asyncio.run(failover_trial()) for _ in range(trials)]
    first = [r["first_fallback_ms"] for r in results]
    skipped = [r["open_breaker_ms"] for r in results]
    until_open = {r["requests_until_open"] for r in results}
    print()
    print(f"Circuit breaker on real uvicorn peers ({trials} trials: peer A stopped, B serves)")
    print(f"{'measure':<50} {'p50':>9} {'max':>9}  target")
    print(
        f"{'first successful fallback after A dies (ms)':<50} {statistics.median(first):>9.2f} "
        f"{max(first):>9.2f}  ≤ 20 ms: {'yes' if max(first) <= 20 else 'NO'} (paper: ≤ 100 ms)"
    )
    print(
        f"{'request with A breaker open, A skipped (ms)':<50} {statistics.median(skipped):>9.2f} "
        f"{max(skipped):>9.2f}"
    )
    print(f"{'requests until A breaker opens':<50} {'/'.join(map(str, sorted(until_open))):>9}")


if __name__ == "__main__":
    main()
