"""Spec: collections across the cluster — a declaration reaches every peer it can (catch-up
covers the rest), and a vector search asks every shard and merges the best k, naming the
shards that could not answer instead of failing."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry
from themis_shard.cluster.documents.collections import ClusterCollections
from themis_shard.storage.collections import CollectionConfig
from themis_shard.vector.catalog import VectorCatalog

from .fakes import fake_peers, live, plan_of


def collections(tmp_path, store, peers, n: int = 3) -> ClusterCollections:
    current = live(plan_of(n))
    vectors = VectorCatalog(store, tmp_path / "vectors", use_gpu=False)
    return ClusterCollections(store, vectors, peers.executor(current), current, CollectorRegistry())


def test_a_broadcast_reaches_the_reachable_peers_and_a_down_one_is_not_an_error(tmp_path, store) -> None:
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        peers["s-2"].up = False
        config = CollectionConfig(name="docs", dimension=4)
        asyncio.run(collections(tmp_path, store, peers).broadcast(config))
        assert peers["s-1"].collections["docs"]["dimension"] == 4


def test_an_adopted_collection_is_declared_here_once(tmp_path, store) -> None:
    with fake_peers(tmp_path) as peers:
        part = collections(tmp_path, store, peers)
        config = CollectionConfig(name="docs", dimension=4)
        asyncio.run(part.adopt(config))
        asyncio.run(part.adopt(config))  # the same declaration again: a no-op
        assert store.collection("docs") == config
        assert part.vectors.size("docs") == 0


def test_a_search_merges_the_best_k_and_names_the_shards_that_failed(tmp_path, store) -> None:
    with fake_peers(tmp_path, "s-1", "s-2", "s-3") as peers:
        peers["s-1"].collections["docs"] = {}
        peers["s-1"].search_results = [{"urn": "u:b", "score": 0.9}, {"urn": "u:a", "score": 0.5}]
        # s-2 does not know the collection yet (404): no results there, not a failure
        peers["s-3"].up = False

        async def local() -> list[dict]:
            return [{"urn": "u:a", "score": 0.7}, {"urn": "u:c", "score": 0.1}]

        results, failed = asyncio.run(
            collections(tmp_path, store, peers, n=4).search("docs", {"k": 2, "vector": [0.0]}, local)
        )
        assert [(r["urn"], r["score"]) for r in results] == [("u:b", 0.9), ("u:a", 0.7)]
        assert failed == ["s-3"]
