"""Spec: anti-entropy — two owners compare Merkle digests of the keys they share and exchange
only the records in the ranges that differ; afterwards they hold identical records."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry
from themis_shard.cluster.replication.anti_entropy import AntiEntropy
from themis_shard.cluster.replication.delivery import Replication
from themis_shard.cluster.replication.merkle import (
    FANOUT,
    Pair,
    bucket_digests,
    differing,
    leaf_digests,
    newer_than,
)
from themis_shard.storage.digests import RecordDigests
from themis_shard.storage.documents import Replicated
from themis_shard.storage.hints import HintLog
from themis_shard.storage.stamps import Stamp

from .fakes import fake_peers, live, plan_of

KEYS = [f"k{i}" for i in range(200)]


def test_equal_records_give_equal_digests_and_one_change_opens_one_bucket() -> None:
    topo = live(plan_of(3)).topology
    pair = Pair(topo.ring, topo.plan.copies, "s-0", "s-1")
    records = [("c", k, Stamp(1, 5, "s-0")) for k in KEYS]
    shared = [r for r in records if pair.shares(r[0], r[1])]
    assert shared and len(shared) < len(records)  # only keys both own are compared
    mine = bucket_digests(leaf_digests(records, pair))
    assert mine == bucket_digests(leaf_digests(list(reversed(shared)), pair))  # order-free, unshared ignored
    changed = [(c, k, Stamp(1, 6, "s-1")) if k == shared[0][1] else (c, k, s) for c, k, s in records]
    theirs = bucket_digests(leaf_digests(changed, pair))
    assert differing(mine, theirs) == {pair.bucket("c", shared[0][1])}
    assert all(b < topo.ring.ranges // FANOUT + 1 for b in mine)


def test_newer_records_are_the_ones_sent() -> None:
    mine = {("c", "a"): Stamp(2, 1, "x"), ("c", "b"): Stamp(1, 1, "x"), ("c", "c"): Stamp(1)}
    theirs = {("c", "a"): Stamp(2, 0, "y"), ("c", "b"): Stamp(1, 1, "x")}
    assert sorted(newer_than(mine, theirs)) == [("c", "a"), ("c", "c")]


def test_an_exchange_makes_two_diverged_replicas_identical(tmp_path, store) -> None:
    current = live(plan_of(2))
    with fake_peers(tmp_path, "s-1") as peers:
        other = peers["s-1"].store
        peer_view = live(plan_of(2), "s-1")
        peers["s-1"].anti_entropy = AntiEntropy(
            "s-1", other, RecordDigests(other), None, peer_view, None, CollectorRegistry(), interval_s=60
        )
        same = [Replicated("c", k, 1, {"k": k}, 10, "s-0") for k in KEYS]
        store.apply_replicated(same)
        other.apply_replicated(same)
        store.apply_replicated([Replicated("c", "k1", 2, {"mine": True}, 20, "s-0")])  # only here
        other.apply_replicated([Replicated("c", "k2", 2, {"theirs": True}, 20, "s-1")])  # only there
        # the same version minted twice (a split brain): the higher stamp must win on both
        store.apply_replicated([Replicated("c", "k3", 2, {"low": True}, 30, "s-0")])
        other.apply_replicated([Replicated("c", "k3", 2, {"high": True}, 31, "s-1")])
        executor = peers.executor(current)
        registry = CollectorRegistry()
        replication = Replication(executor, HintLog(store), current, registry)
        ae = AntiEntropy(
            "s-0", store, RecordDigests(store), executor, current, replication, registry, interval_s=60
        )
        moved = asyncio.run(ae.exchange("s-1"))
        assert moved == 3
        assert list(store.scan_all()) == list(other.scan_all())
        assert store.get("c", "k3").document == {"high": True}
        assert asyncio.run(ae.exchange("s-1")) == 0  # equal now: one digest message, nothing else
        assert registry.get_sample_value("themis_anti_entropy_rounds_total", {"outcome": "equal"}) == 1
