"""The gossip loop over an in-process transport: convergence, failure detection, hostile peers."""

from __future__ import annotations

import asyncio
import random

from prometheus_client import CollectorRegistry
from themis_shard.cluster.membership.gossip import Gossiper
from themis_shard.cluster.membership.gossip_state import (
    AdapterCapabilityAnnouncement,
    GossipState,
    MemberStatus,
    ShardLoad,
)
from themis_shard.cluster.membership.gossip_wire import GossipCodec

T0 = 1_700_000_000.0


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Cluster:
    """N Gossipers whose transport calls each other's ``handle`` directly; peers can misbehave."""

    def __init__(self, n: int, secret: bytes = b"s3cret") -> None:
        self.mono, self.wall = Clock(0.0), Clock(T0)
        self.ids = [f"s{i}" for i in range(n)]
        self.down: set[str] = set()
        self.slow: set[str] = set()
        self.garbage: set[str] = set()
        self.registries = {sid: CollectorRegistry() for sid in self.ids}
        self.nodes: dict[str, Gossiper] = {}
        for i, sid in enumerate(self.ids):
            state = GossipState.create(sid, now=0.0)
            for other in self.ids:
                state.add_seed(other, f"http://{other}", now=0.0)
            self.nodes[sid] = Gossiper(
                state,
                GossipCodec("themis", secret),
                self.transport,
                interval_s=0.01,
                fanout=2,
                exchange_timeout_s=0.05,
                rng=random.Random(i),
                clock=self.mono,
                wall_clock=self.wall,
                registry=self.registries[sid],
                load=lambda i=i: ShardLoad(pending_llm_requests=i),
            )

    async def transport(self, peer: str, message: dict) -> object:
        if peer in self.down:
            raise ConnectionRefusedError(peer)
        if peer in self.slow:
            await asyncio.sleep(10)
        if peer in self.garbage:
            return {"not": "a gossip message"}
        return await self.nodes[peer].handle(message)

    async def rounds(self, k: int, step: float = 1.0) -> None:
        for _ in range(k):
            self.mono.t += step
            await asyncio.gather(*(g.gossip_round() for sid, g in self.nodes.items() if sid not in self.down))

    def sample(self, sid: str, name: str, labels: dict) -> float | None:
        return self.registries[sid].get_sample_value(name, labels)


def announcement(shard: str) -> AdapterCapabilityAnnouncement:
    return AdapterCapabilityAnnouncement(
        shard_id=shard,
        adapter_id="legal-qa",
        domain="legal",
        accuracy_delta=0.9,
        performance_delta_p99_ms=5,
        federation_round=1,
        announced_at=T0,
    )


def test_an_announcement_and_the_loads_reach_every_shard():
    c = Cluster(8)
    c.nodes["s3"].state.announce(announcement("s3"))

    async def go():
        await c.rounds(6)

    asyncio.run(go())
    for g in c.nodes.values():
        assert "s3/legal-qa" in g.state.announcements
        assert g.state.loads()["s5"] == 5
    assert c.sample("s0", "themis_gossip_members", {"status": "alive"}) == 8


def test_a_dead_shard_becomes_suspect_then_dead_and_the_rest_keep_gossiping():
    c = Cluster(5)

    async def go():
        await c.rounds(3)
        c.down.add("s4")
        await c.rounds(6)  # 6 s without s4's heartbeat: suspect
        assert c.nodes["s0"].state.status("s4", c.mono()) is MemberStatus.SUSPECT
        await c.rounds(30)  # 36 s: dead
        assert c.nodes["s0"].state.status("s4", c.mono()) is MemberStatus.DEAD
        assert c.nodes["s0"].state.status("s1", c.mono()) is MemberStatus.ALIVE
        c.down.discard("s4")
        await c.rounds(12)  # back: the dead-probe and its own gossip revive it
        assert c.nodes["s0"].state.status("s4", c.mono()) is MemberStatus.ALIVE

    asyncio.run(go())
    assert c.sample("s0", "themis_gossip_exchanges_total", {"outcome": "error"}) > 0


def test_slow_and_garbage_peers_cost_one_bounded_exchange_and_are_counted():
    c = Cluster(4)
    c.slow.add("s1")
    c.garbage.add("s2")

    async def go():
        loop = asyncio.get_running_loop()
        started = loop.time()
        await c.rounds(5)
        return loop.time() - started

    elapsed = asyncio.run(go())
    assert elapsed < 2.0  # 5 rounds, each bounded by the 50 ms exchange timeout
    timeouts = sum(c.sample(s, "themis_gossip_exchanges_total", {"outcome": "timeout"}) or 0 for s in c.ids)
    dropped = sum(
        c.sample(s, "themis_gossip_messages_dropped_total", {"reason": "bad_shape"}) or 0 for s in c.ids
    )
    assert timeouts > 0 and dropped > 0


def test_a_peer_with_the_wrong_secret_is_dropped_and_learns_nothing():
    c = Cluster(3)
    intruder = GossipState.create("s9", now=0.0)
    intruder_codec = GossipCodec("themis", b"wrong")
    intruder.announce(announcement("s9"))
    msg = intruder_codec.encode("s9", "push", T0, delta=intruder.delta_for(GossipState.create("x").digest()))

    async def go():
        try:
            await c.nodes["s0"].handle(msg)
        except ValueError as exc:
            return exc

    err = asyncio.run(go())
    assert err is not None and err.reason == "bad_signature"
    assert "s9/legal-qa" not in c.nodes["s0"].state.announcements
    assert c.sample("s0", "themis_gossip_messages_dropped_total", {"reason": "bad_signature"}) == 1


def test_start_and_stop_run_the_loop_in_the_background():
    c = Cluster(2)

    async def go():
        g = c.nodes["s0"]
        g.start()
        await asyncio.sleep(0.05)
        await g.stop()
        return g.state.me.heartbeat

    assert asyncio.run(go()) >= 2
