"""Spec: membership — the plan seeds the gossip state, gossip spreads each shard's load (with
what it drafts for), open breakers are closed by an out-of-band /ready probe, and the draft
shard is the least-loaded live peer drafting for our model."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from themis_shard.cluster.membership.gossip_state import MemberRecord, ShardLoad
from themis_shard.cluster.membership.members import Membership, breaker_states

from .fakes import fake_peers, live, plan_of, url_of

SHA = "c" * 64


def llm(draft_shard: str = "auto", model_sha: str = SHA, draft_of: str = "") -> SimpleNamespace:
    model = SimpleNamespace(fingerprint=SimpleNamespace(sha256=model_sha))
    return SimpleNamespace(
        settings=SimpleNamespace(draft_shard=draft_shard), model=lambda _: model, draft_of=draft_of, models={}
    )


def membership(current, peers, self_id="s-0", runtime=None, load=None) -> Membership:
    slot = SimpleNamespace(runtime=runtime)
    return Membership(
        self_id, current.topology.plan, current, peers.executor(current), slot, CollectorRegistry(), load
    )


def open_breaker(m: Membership, peer: str) -> None:
    breaker = m.executor.breakers.get(peer)
    for _ in range(m.executor.settings.breaker_failure_threshold):
        breaker.record_failure()


def test_the_plan_seeds_every_peer_and_a_new_plan_reseeds(tmp_path) -> None:
    first = plan_of(3)
    with fake_peers(tmp_path) as peers:
        m = membership(live(first), peers)
        assert set(m.state.members) == {"s-0", "s-1", "s-2"}
        assert m.state.members["s-1"].url == url_of("s-1")
        m.adopt_plan(plan_of(2, previous=first))
        assert set(m.state.members) == {"s-0", "s-1"}
        m.adopt_plan(plan_of(4, previous=first))
        assert set(m.state.members) == {"s-0", "s-1", "s-2", "s-3"}


def test_without_gossip_a_peer_behind_an_open_breaker_counts_as_dead(tmp_path) -> None:
    with fake_peers(tmp_path) as peers:
        m = membership(live(plan_of(3)), peers)
        assert m.gossiper is None
        open_breaker(m, "s-2")
        assert m.member_states() == {"s-0": "alive", "s-1": "alive", "s-2": "dead"}
        assert m.unavailable() == {"s-2"}
    assert breaker_states(["a", "b"], frozenset({"b"})) == {"a": "alive", "b": "dead"}


def test_gossip_carries_each_shards_load_and_what_it_drafts_for(tmp_path) -> None:
    current0 = live(plan_of(2), "s-0", gossip_secret="s3cret")
    current1 = live(plan_of(2), "s-1", gossip_secret="s3cret")
    with fake_peers(tmp_path, "s-0", "s-1") as peers:
        sample = lambda: ShardLoad(pending_llm_requests=4)  # noqa: E731
        m0 = membership(current0, peers, "s-0", runtime=llm(draft_of=SHA), load=sample)
        m1 = membership(current1, peers, "s-1")
        peers["s-1"].gossip_handler = m1.gossiper.handle
        assert asyncio.run(m0.gossiper.gossip_round()) == 1
        learned = m1.state.members["s-0"].load
        assert (learned.pending_llm_requests, learned.draft_of) == (4, SHA)
        assert m0.member_states()["s-1"] == "alive"


def test_a_lone_shard_or_one_without_a_secret_does_not_gossip(tmp_path) -> None:
    with fake_peers(tmp_path) as peers:
        assert membership(live(plan_of(1, "raid0"), gossip_secret="x"), peers).gossiper is None
        assert membership(live(plan_of(2)), peers).gossiper is None


def test_the_probe_closes_the_breaker_of_a_peer_that_answers_again(tmp_path) -> None:
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        peers["s-2"].up = False
        m = membership(live(plan_of(3)), peers)
        open_breaker(m, "s-1")
        open_breaker(m, "s-2")
        asyncio.run(m.probe_open_peers())
        assert m.executor.open_peers() == {"s-2"}


def test_the_probe_also_closes_a_half_open_breaker_whose_probe_call_never_reported(tmp_path) -> None:
    with fake_peers(tmp_path, "s-1") as peers:
        m = membership(live(plan_of(3)), peers)
        open_breaker(m, "s-1")
        breaker = m.executor.breakers.get("s-1")
        breaker.clock = lambda: time.monotonic() + 3600  # the recovery window is over: half-open
        assert breaker.allow() and not breaker.allow()  # a caller took the one probe, then vanished
        asyncio.run(m.probe_open_peers())
        assert breaker.allow() and m.executor.breakers.unclosed_peers() == frozenset()


def test_the_auto_draft_shard_is_the_least_loaded_live_peer_drafting_for_our_model(tmp_path) -> None:
    with fake_peers(tmp_path) as peers:
        m = membership(live(plan_of(4)), peers, runtime=llm())
        for sid, pending, draft_of in (("s-1", 5, SHA), ("s-2", 1, SHA), ("s-3", 0, "other")):
            m.state.merge_members(
                [
                    MemberRecord(
                        shard_id=sid,
                        url=url_of(sid),
                        incarnation=1,
                        heartbeat=1,
                        load=ShardLoad(pending_llm_requests=pending, draft_of=draft_of),
                    )
                ],
                time.monotonic(),
            )
        target = m.draft_target()
        assert (target.peer, target.url) == ("s-2", url_of("s-2"))
        assert target.breaker is m.executor.breakers.get("s-2")
        open_breaker(m, "s-2")
        assert m.draft_target().peer == "s-1"


def test_a_named_draft_shard_is_used_as_is_and_none_without_an_engine(tmp_path) -> None:
    with fake_peers(tmp_path) as peers:
        current = live(plan_of(3))
        assert membership(current, peers, runtime=llm(draft_shard="s-2")).draft_target().peer == "s-2"
        assert membership(current, peers, runtime=llm(draft_shard="s-0")).draft_target() is None  # ourselves
        assert membership(current, peers, runtime=llm(draft_shard="")).draft_target() is None
        assert membership(current, peers).draft_target() is None
