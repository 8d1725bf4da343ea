"""Spec: AQL on a real 3-shard cluster (RAID1). Any shard coordinates; scans are ring-aware
scatter-gather (no replica duplicates), SORT/LIMIT merge across shards, similarity runs on the
vector indexes of every shard, and a killed shard's rows are served by their next owner."""

from __future__ import annotations

import math
import random

import pytest
from themis_client import ThemisClient, VersionConflict

pytestmark = pytest.mark.e2e

N = 300
DIM = 4


def aql(url: str, query: str, **binds) -> dict:
    with ThemisClient(url, timeout=30) as themis:
        return themis.aql(query, binds).model_dump()


def cosine(a, b) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for the module: start-up and seeding dominate these tests' time."""
    from .conftest import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("aql"), 3)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def seeded(cluster):
    rng = random.Random(7)
    items = {
        f"i{n:03d}": {"n": n, "grp": f"g{n % 3}", "embedding": [rng.uniform(-1, 1) for _ in range(DIM)]}
        for n in range(N)
    }
    with ThemisClient(cluster.url("shard-0")) as a:
        a.declare_collection("items", dimension=DIM)
        for key, doc in items.items():  # one key per request: the cluster has no cross-shard batch atomicity
            a.put("items", key, doc)
        for key, user in (("ann", "Berlin"), ("ben", "Paris")):
            a.put("people", key, {"city": user})
        for key, owner, total in (("x1", "ann", 5), ("x2", "ben", 7), ("x3", "ann", 1)):
            a.put("buys", key, {"who": owner, "total": total})
    return cluster, items


def test_scans_see_every_row_once_sort_limit_merge_across_shards(seeded):
    cluster, items = seeded
    expected = sorted((d["n"] for d in items.values() if d["grp"] == "g1"), reverse=True)[5:15]
    for shard in cluster.ids:  # any shard coordinates
        url = cluster.url(shard)
        body = aql(url, "FOR d IN items RETURN d._key")
        assert sorted(body["result"]) == sorted(items)  # RAID1 stores 600 copies; each row comes once
        assert body["stats"]["shards"] == cluster.ids and body["stats"]["scanned"] == N
        got = aql(url, "FOR d IN items FILTER d.grp == @g SORT d.n DESC LIMIT 5, 10 RETURN d.n", g="g1")
        assert got["result"] == expected


def test_join_across_shards(seeded):
    cluster, _ = seeded
    got = aql(
        cluster.url("shard-2"),
        "FOR p IN people FOR b IN buys FILTER b.who == p._key SORT b.total RETURN [p.city, b.total]",
    )
    assert got["result"] == [["Berlin", 1], ["Berlin", 5], ["Paris", 7]]


def test_similarity_top_k_uses_every_shards_index(seeded):
    cluster, items = seeded
    v = [0.3, -0.2, 0.9, 0.1]
    best = sorted(items, key=lambda k: -cosine(items[k]["embedding"], v))[:10]
    for shard in cluster.ids:
        body = aql(
            cluster.url(shard),
            "FOR d IN items SORT SIMILARITY(d.embedding, @v) DESC LIMIT 10 RETURN d._key",
            v=v,
        )
        assert body["result"] == best
        assert body["stats"]["index"] == ["vector:items"]
    filtered = [
        k for k in sorted(items, key=lambda k: -cosine(items[k]["embedding"], v)) if items[k]["grp"] == "g2"
    ][:3]
    got = aql(
        cluster.url("shard-1"),
        "FOR d IN items FILTER d.grp == 'g2' SORT SIMILARITY(d.embedding, @v) DESC LIMIT 3 RETURN d._key",
        v=v,
    )
    assert got["result"] == filtered


def test_explain_names_the_shards_a_query_touches(seeded):
    cluster, _ = seeded
    url = cluster.url("shard-0")
    [plan] = aql(url, "EXPLAIN FOR d IN items FILTER d.n > 3 SORT d.n LIMIT 2 RETURN d")["result"]
    assert plan["shards"] == cluster.ids and plan["steps"][0]["pushed_limit"] == 2
    [plan] = aql(url, "EXPLAIN FOR d IN items FILTER d._key == 'i007' RETURN d")["result"]
    owner = plan["steps"][0]["shards"]
    assert len(owner) == 1
    body = aql(url, "FOR d IN items FILTER d._key == 'i007' RETURN d.n")
    assert body["result"] == [7] and body["stats"]["shards"] == owner
    [plan] = aql(url, "EXPLAIN UPDATE 'i007' WITH {n: 7} IN items")["result"]
    assert [plan["terminal"]["coordinator"]] == owner


def test_writes_route_to_the_owner_and_cross_shard_writes_commit_atomically(seeded):
    cluster, _ = seeded
    aql(cluster.url("shard-1"), "INSERT {_key: 'fresh', n: -1} INTO items")
    assert aql(cluster.url("shard-2"), "FOR d IN items FILTER d._key == 'fresh' RETURN d.n")["result"] == [-1]
    aql(cluster.url("shard-0"), "UPDATE 'fresh' WITH {n: -2} IN items")
    assert aql(cluster.url("shard-1"), "FOR d IN items FILTER d.n < 0 RETURN d.n")["result"] == [-2]
    # 40 keys on every shard: one statement, one two-phase commit
    aql(cluster.url("shard-0"), "FOR i IN 1..40 INSERT {_key: CONCAT('k', i), i: i} INTO bulk")
    got = aql(cluster.url("shard-2"), "FOR d IN bulk SORT d.i RETURN d.i")["result"]
    assert got == list(range(1, 41))
    with ThemisClient(cluster.url("shard-1")) as themis, pytest.raises(VersionConflict):
        themis.aql("FOR i IN 1..40 INSERT {_key: CONCAT('k', i), i: i} INTO bulk")  # k1..k40 exist: none
    assert aql(cluster.url("shard-1"), "FOR d IN bulk FILTER d._version > 1 RETURN d")["result"] == []
    assert aql(cluster.url("shard-2"), "REMOVE 'fresh' IN items")["result"][0]["op"] == "remove"
    assert aql(cluster.url("shard-0"), "FOR d IN items FILTER d.n < 0 RETURN d")["result"] == []


def test_a_killed_shards_rows_are_served_by_their_next_owner(seeded):  # last: it kills a shard
    cluster, items = seeded
    cluster.kill("shard-2")
    body = aql(cluster.url("shard-0"), "FOR d IN items RETURN d._key")
    assert sorted(body["result"]) == sorted(items)
    assert "shard-2" not in body["stats"]["shards"]
