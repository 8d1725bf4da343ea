"""Gossip state: merge rules, failure detection, TTL, digests/deltas and signed message validation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from themis_shard.cluster.membership.gossip_state import (
    AdapterCapabilityAnnouncement,
    Delta,
    GossipState,
    MemberRecord,
    MemberStatus,
    ShardLoad,
)
from themis_shard.cluster.membership.gossip_wire import GossipCodec, InvalidGossipMessage

T0 = 1_700_000_000.0  # wall clock for announcements


def ann(shard="s1", adapter="legal-qa", rnd=1, at=T0, alpha=0.9, lam=10.0, domain="legal", active=True):
    return AdapterCapabilityAnnouncement(
        shard_id=shard,
        adapter_id=adapter,
        domain=domain,
        accuracy_delta=alpha,
        performance_delta_p99_ms=lam,
        training_samples=500,
        federation_round=rnd,
        announced_at=at,
        active=active,
    )


def state(sid="s0", **kw) -> GossipState:
    return GossipState.create(sid, now=0.0, **kw)


# ---- members and heartbeats ---------------------------------------------------------------


def test_a_newer_heartbeat_wins_and_carries_the_load():
    s = state()
    s.merge_members([MemberRecord(shard_id="s1", heartbeat=3, load=ShardLoad(pending_llm_requests=4))], now=1)
    s.merge_members([MemberRecord(shard_id="s1", heartbeat=2, load=ShardLoad(pending_llm_requests=9))], now=2)
    assert s.members["s1"].heartbeat == 3 and s.loads()["s1"] == 4


def test_a_restarted_shard_with_a_higher_incarnation_wins_over_a_high_old_heartbeat():
    s = state()
    s.merge_members([MemberRecord(shard_id="s1", incarnation=1, heartbeat=900)], now=1)
    s.merge_members([MemberRecord(shard_id="s1", incarnation=2, heartbeat=1)], now=2)
    assert s.members["s1"].version == (2, 1)


def test_a_shard_refutes_a_newer_version_of_itself_by_bumping_its_incarnation():
    s = state()
    s.merge_members([MemberRecord(shard_id="s0", incarnation=0, heartbeat=50)], now=1)
    assert s.me.version == (1, 0)


def test_beat_advances_the_heartbeat_and_publishes_load():
    s = state()
    s.beat(now=1, load=ShardLoad(pending_llm_requests=2, avg_llm_queue_ms=35.5, active_lora_adapters=1))
    assert s.me.heartbeat == 1 and s.me.load.avg_llm_queue_ms == 35.5


def test_alive_then_suspect_then_dead_when_the_heartbeat_stops_and_alive_again_when_it_resumes():
    s = GossipState.create("s0", now=0.0)  # defaults: suspect after 5 s, dead after 30 s
    s.merge_members([MemberRecord(shard_id="s1", heartbeat=1)], now=100)
    assert s.status("s1", 104.9) is MemberStatus.ALIVE
    assert s.status("s1", 105) is MemberStatus.SUSPECT
    assert s.status("s1", 130) is MemberStatus.DEAD
    assert s.peers(130) == [] and s.peers(130, include_dead=True) == ["s1"]
    s.merge_members([MemberRecord(shard_id="s1", heartbeat=2)], now=131)
    assert s.status("s1", 131) is MemberStatus.ALIVE
    assert s.status("s0", 10_000) is MemberStatus.ALIVE  # we never suspect ourselves


def test_stale_gossip_does_not_refresh_a_dead_member():
    s = GossipState.create("s0", now=0.0)
    s.merge_members([MemberRecord(shard_id="s1", heartbeat=5)], now=0)
    s.merge_members([MemberRecord(shard_id="s1", heartbeat=5)], now=100)  # same version again
    assert s.status("s1", 100) is MemberStatus.DEAD


def test_seeds_from_the_plan_are_known_before_they_speak_and_removed_with_the_plan():
    s = state()
    s.add_seed("s1", "http://s1:8080", now=0)
    s.merge_announcements([ann("s1")], T0)
    assert s.peers(0) == ["s1"] and s.members["s1"].version == (0, 0)
    s.remove_member("s1")
    assert "s1" not in s.members and not s.announcements
    with pytest.raises(ValueError):
        s.remove_member("s0")


# ---- announcements ------------------------------------------------------------------------


def test_announcements_merge_by_federation_round_then_announced_at():
    s = state()
    s.merge_announcements([ann(rnd=2, at=T0, alpha=0.7)], T0)
    s.merge_announcements([ann(rnd=1, at=T0 + 100, alpha=0.95)], T0 + 100)  # older round loses
    assert s.announcements["s1/legal-qa"].accuracy_delta == 0.7
    s.merge_announcements([ann(rnd=2, at=T0 + 5, alpha=0.85)], T0 + 100)  # same round, later wins
    assert s.announcements["s1/legal-qa"].accuracy_delta == 0.85


def test_announcements_are_keyed_by_shard_and_adapter():
    s = state()
    s.merge_announcements([ann("s1", "a"), ann("s1", "b"), ann("s2", "a")], T0)
    assert sorted(s.announcements) == ["s1/a", "s1/b", "s2/a"]


def test_expired_announcements_are_evicted_and_refused():
    s = state()
    s.merge_announcements([ann("s1", at=T0), ann("s2", at=T0 + 3000)], T0 + 3000)
    assert s.evict_expired(T0 + 7200.5) == 1
    assert list(s.announcements) == ["s2/legal-qa"]
    accepted, rejected = s.merge_announcements([ann("s3", at=T0)], T0 + 7201)
    assert (accepted, rejected) == (0, 1)


def test_future_dated_announcements_beyond_the_skew_are_refused():
    s = state()
    assert s.merge_announcements([ann(at=T0 + 61)], T0) == (0, 1)
    assert s.merge_announcements([ann(at=T0 + 59)], T0) == (1, 0)


def test_only_the_owner_announces_its_adapters_and_each_must_be_newer():
    s = state("s1")
    s.announce(ann("s1", rnd=1))
    with pytest.raises(ValueError):
        s.announce(ann("s1", rnd=1))
    with pytest.raises(ValueError):
        s.announce(ann("s2"))
    s.merge_announcements([ann("s1", rnd=9)], T0)  # a forged "us" from gossip is ignored
    assert s.announcements["s1/legal-qa"].federation_round == 1


def test_a_restarted_shard_withdraws_claims_about_adapters_it_no_longer_holds():
    s = state("s1")  # fresh after a restart: holds no adapter
    s.merge_announcements([ann("s1", "old-adapter", rnd=4, at=T0)], T0 + 10)
    withdrawal = s.announcements["s1/old-adapter"]
    assert not withdrawal.active and withdrawal.version > (4, T0)
    peer = state("s2")
    peer.merge_announcements([ann("s1", "old-adapter", rnd=4, at=T0)], T0)
    peer.merge_announcements([withdrawal], T0 + 10)
    assert peer.capabilities("legal", now=0, now_wall=T0 + 10) == []
    s.announce(ann("s1", "old-adapter", rnd=5, at=T0 + 20))  # loaded again later: a newer version wins
    assert s.announcements["s1/old-adapter"].active


def test_capabilities_skip_withdrawn_expired_and_dead_shards():
    s = GossipState.create("s0", now=0.0)
    s.merge_members(
        [MemberRecord(shard_id="s1", heartbeat=1), MemberRecord(shard_id="s2", heartbeat=1)], now=0
    )
    s.merge_announcements(
        [ann("s1", "a"), ann("s1", "b", active=False), ann("s2", "c"), ann("s3", "d", domain="medical")], T0
    )
    assert [c.adapter_id for c in s.capabilities("LEGAL", now=1, now_wall=T0)] == ["a", "c"]
    s.merge_members([MemberRecord(shard_id="s1", heartbeat=2)], now=40)
    assert [c.adapter_id for c in s.capabilities("legal", now=40, now_wall=T0)] == ["a"]  # s2 dead
    assert s.capabilities("legal", now=40, now_wall=T0 + 7201) == []


def test_announcement_shape_is_validated():
    with pytest.raises(ValueError):
        ann(alpha=1.5)
    with pytest.raises(ValueError):
        ann(lam=float("nan"))
    with pytest.raises(ValueError):
        AdapterCapabilityAnnouncement.model_validate({"shard_id": "s1", "adapter_id": "a", "domain": "x"})
    assert ann(domain="  Legal ").domain == "legal"


# ---- digests and deltas --------------------------------------------------------------------


def exchange(a: GossipState, b: GossipState, now=1.0, now_wall=T0):
    """One push-pull exchange A → B as the Gossiper performs it."""
    d = a.digest()
    a.merge(b.delta_for(d), now, now_wall)
    b.merge(a.entries_for(b.wants_from(d)), now, now_wall)


def test_push_pull_makes_two_states_identical():
    a, b = state("a"), state("b")
    a.beat(0)
    a.announce(ann("a", "x"))
    b.announce(ann("b", "y"))
    exchange(a, b)
    assert a.digest() == b.digest()
    assert sorted(a.announcements) == sorted(b.announcements) == ["a/x", "b/y"]


def test_equal_sections_are_skipped_by_fingerprint():
    a, b = state("a"), state("b")
    exchange(a, b)
    assert a.delta_for(b.digest()) == Delta() and not a.wants_from(b.digest())


members = st.lists(
    st.builds(
        MemberRecord,
        shard_id=st.sampled_from(["s1", "s2", "s3"]),
        incarnation=st.integers(0, 2),
        heartbeat=st.integers(0, 5),
    ),
    max_size=8,
)
anns = st.lists(
    st.builds(
        ann,
        shard=st.sampled_from(["s1", "s2"]),
        adapter=st.sampled_from(["a", "b"]),
        rnd=st.integers(0, 3),
        at=st.sampled_from([T0, T0 + 1]),
    ),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(members, anns, st.permutations(range(3)))
def test_property_merge_is_order_independent(recs, announcements, order):
    deltas = [Delta(tuple(recs[i::3]), tuple(announcements[i::3])) for i in range(3)]
    a, b = state("s0"), state("s0")
    for d in deltas:
        a.merge(d, 1.0, T0 + 1)
    for i in order:
        b.merge(deltas[i], 1.0, T0 + 1)
        b.merge(deltas[i], 1.0, T0 + 1)  # idempotent
    assert {k: r.version for k, r in a.members.items()} == {k: r.version for k, r in b.members.items()}
    assert {k: v.version for k, v in a.announcements.items()} == {
        k: v.version for k, v in b.announcements.items()
    }
    assert a.digest() == b.digest()


# ---- the signed wire format ---------------------------------------------------------------

CODEC = GossipCodec("themis", b"cluster-secret")


def signed_syn(codec=CODEC, sent_at=T0):
    s = state("s1")
    s.announce(ann("s1"))
    return codec.encode("s1", "syn", sent_at, digest=s.digest(), delta=s.delta_for(state().digest()))


def test_round_trip_through_json_preserves_the_payload():
    raw = json.dumps(signed_syn()).encode()
    msg = CODEC.decode(raw, T0 + 1)
    assert msg.sender == "s1" and msg.kind == "syn"
    assert msg.digest.announcements == {"s1/legal-qa": (1, T0)}
    assert msg.delta.announcements[0] == ann("s1")


@pytest.mark.parametrize(
    "tamper",
    [
        lambda m: m["body"]["digest"]["members"].update({"s9": [0, 1]}),
        lambda m: m.update(sender="s2"),
        lambda m: m.update(sent_at=m["sent_at"] + 0.5),
        lambda m: m.update(signature="0" * 64),
    ],
)
def test_tampered_messages_fail_the_signature(tamper):
    m = signed_syn()
    tamper(m)
    with pytest.raises(InvalidGossipMessage) as err:
        CODEC.decode(m, T0)
    assert err.value.reason == "bad_signature"


def test_a_different_secret_is_a_bad_signature():
    with pytest.raises(InvalidGossipMessage) as err:
        GossipCodec("themis", b"other").decode(signed_syn(), T0)
    assert err.value.reason == "bad_signature"


def test_old_messages_are_stale():
    with pytest.raises(InvalidGossipMessage) as err:
        CODEC.decode(signed_syn(sent_at=T0 - 31), T0)
    assert err.value.reason == "stale"


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe not json",
        "[]",
        "null",
        {"v": 1},
        {
            "v": 2,
            "cluster": "themis",
            "sender": "s1",
            "kind": "syn",
            "sent_at": T0,
            "body": {},
            "signature": "a" * 64,
        },
    ],
)
def test_garbage_is_a_bad_shape(raw):
    with pytest.raises(InvalidGossipMessage) as err:
        CODEC.decode(raw, T0)
    assert err.value.reason == "bad_shape"


def test_a_correctly_signed_body_with_a_bad_shape_is_rejected():
    # A holder of the secret (or a bug) sends an out-of-range announcement: still dropped.
    unsigned = {
        "v": 1,
        "cluster": "themis",
        "sender": "s1",
        "kind": "push",
        "sent_at": T0,
        "body": {"delta": {"announcements": [ann().model_dump() | {"accuracy_delta": 7}]}},
    }
    m = unsigned | {"signature": CODEC._sign(unsigned)}
    with pytest.raises(InvalidGossipMessage) as err:
        CODEC.decode(m, T0)
    assert err.value.reason == "bad_shape"


def test_oversized_messages_are_rejected():
    codec = GossipCodec("themis", b"k", max_entries=2)
    s = state("s1")
    for i in range(3):
        s.add_seed(f"m{i}", "", now=0)
    with pytest.raises(InvalidGossipMessage) as err:
        codec.decode(codec.encode("s1", "syn", T0, digest=s.digest()), T0)
    assert err.value.reason == "too_large"


def test_an_empty_secret_is_refused():
    with pytest.raises(ValueError):
        GossipCodec("themis", b"")


def test_routing_view_lists_dead_peers_to_route_around():
    from themis_shard.cluster.membership.gossip_state import RoutingView

    s = GossipState.create("s0", now=0.0)
    s.merge_members(
        [MemberRecord(shard_id="s1", heartbeat=1), MemberRecord(shard_id="s2", heartbeat=1)], now=0
    )
    s.merge_members([MemberRecord(shard_id="s2", heartbeat=2)], now=25)
    assert RoutingView(s, clock=lambda: 31.0).dead_peers() == {"s1"}
