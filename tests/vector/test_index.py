"""Spec: FAISS indexes per collection — recall, upserts/deletes, persistence, crash recovery."""

from __future__ import annotations

import numpy as np
import pytest
from themis_shard.storage.collections import CollectionConfig
from themis_shard.storage.documents import DocumentStore, Write
from themis_shard.vector.catalog import VectorCatalog
from themis_shard.vector.index import IVF_TRAIN_MIN, VectorIndex


def clustered(n: int, dim: int, clusters: int = 32, seed: int = 0) -> np.ndarray:
    """Points around fixed cluster centres (the centres depend only on ``dim``; ``seed`` picks points)."""
    centers = np.random.default_rng(dim).normal(size=(clusters, dim)).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, clusters, size=n)
    return (centers[labels] + 0.35 * rng.normal(size=(n, dim))).astype(np.float32)


def recall_at_10(kind: str, n: int = 6000, dim: int = 48) -> float:
    data = clustered(n, dim)
    queries = clustered(100, dim, seed=1)
    keys = [f"k{i}" for i in range(n)]
    exact = VectorIndex(CollectionConfig(name="c", dimension=dim, index="flat"))
    exact.rebuild(keys, data)
    approx = VectorIndex(CollectionConfig(name="c", dimension=dim, index=kind))
    approx.rebuild(keys, data)
    assert approx.kind == kind
    found = 0
    for q in queries:
        truth = {h.key for h in exact.search(q, 10)}
        found += len(truth & {h.key for h in approx.search(q, 10)})
    return found / (10 * len(queries))


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_recall_at_least_95_percent_of_exact_top_10(kind: str) -> None:
    assert recall_at_10(kind) >= 0.95


def test_upsert_replaces_and_remove_deletes() -> None:
    index = VectorIndex(CollectionConfig(name="c", dimension=2, index="flat"))
    index.upsert(["a", "b"], np.array([[1, 0], [0, 1]], np.float32))
    index.upsert(["a"], np.array([[0, 1]], np.float32))  # a moves next to b
    assert {h.key for h in index.search(np.array([0, 1], np.float32), 2)} == {"a", "b"}
    index.remove(["b"])
    assert [h.key for h in index.search(np.array([0, 1], np.float32), 5)] == ["a"]
    assert len(index) == 1


def test_hnsw_tombstones_hide_deleted_and_replaced_vectors() -> None:
    index = VectorIndex(CollectionConfig(name="c", dimension=2, index="hnsw"))
    index.upsert(["a", "b", "c"], np.array([[1, 0], [0, 1], [-1, 0]], np.float32))
    index.upsert(["a"], np.array([[0, -1]], np.float32))
    index.remove(["b"])
    hits = index.search(np.array([1, 0], np.float32), 10)
    assert sorted(h.key for h in hits) == ["a", "c"]
    assert len({h.key for h in hits}) == len(hits)


def test_ivf_searches_exactly_until_trained_then_trains_when_large_enough(
    store: DocumentStore, tmp_path
) -> None:
    config = store.declare_collection(CollectionConfig(name="c", dimension=16, index="ivf"))
    catalog = VectorCatalog(store, tmp_path / "vectors")
    catalog.declare(config)
    data = clustered(IVF_TRAIN_MIN + 10, 16)
    store.commit([Write("c", f"k{i}", {"embedding": v.tolist()}) for i, v in enumerate(data[:100])])
    assert catalog.index("c").kind == "flat"
    store.commit([Write("c", f"k{i}", {"embedding": v.tolist()}) for i, v in enumerate(data) if i >= 100])
    assert catalog.index("c").kind == "ivf" and len(catalog.index("c")) == len(data)


def _catalog_with_docs(path, n: int = 50) -> tuple[DocumentStore, VectorCatalog]:
    store = DocumentStore(path / "documents")
    catalog = VectorCatalog(store, path / "vectors")
    if not store.has_collection("c"):
        catalog.declare(store.declare_collection(CollectionConfig(name="c", dimension=8)))
    return store, catalog


def test_catalog_follows_store_writes_and_filters_results(tmp_path) -> None:
    store, catalog = _catalog_with_docs(tmp_path)
    try:
        data = clustered(50, 8)
        store.commit(
            [Write("c", f"k{i}", {"embedding": v.tolist(), "even": i % 2 == 0}) for i, v in enumerate(data)]
        )
        hits = catalog.search("c", data[3].tolist(), 5)
        assert hits[0][0].key == "k3"
        filtered = catalog.search("c", data[3].tolist(), 5, {"even": True})
        assert len(filtered) == 5 and all(doc.document["even"] for _, doc in filtered)
        store.delete("c", "k3")
        assert all(h.key != "k3" for h, _ in catalog.search("c", data[3].tolist(), 5))
    finally:
        catalog.close()
        store.close()


def test_index_survives_a_clean_restart_and_is_rebuilt_after_a_crash(tmp_path) -> None:
    store, catalog = _catalog_with_docs(tmp_path)
    data = clustered(40, 8)
    store.commit([Write("c", f"k{i}", {"embedding": v.tolist()}) for i, v in enumerate(data)])
    catalog.close()  # persists
    store.close()

    store, catalog = _catalog_with_docs(tmp_path)
    assert len(catalog.index("c")) == 40
    # Simulate a crash: writes reach RocksDB but the index file is never persisted again.
    store.delete("c", "k0")
    store.put("c", "k1", {"embedding": data[2].tolist()})
    store.close()

    store, catalog = _catalog_with_docs(tmp_path)
    try:
        index = catalog.index("c")
        assert len(index) == 39 and "k0" not in index
        top = [h.key for h, _ in catalog.search("c", data[2].tolist(), 2)]
        assert set(top) == {"k1", "k2"}
    finally:
        catalog.close()
        store.close()


def test_corrupt_index_file_is_rebuilt_not_trusted(tmp_path) -> None:
    store, catalog = _catalog_with_docs(tmp_path)
    store.commit([Write("c", f"k{i}", {"embedding": v.tolist()}) for i, v in enumerate(clustered(10, 8))])
    catalog.close()
    store.close()
    (tmp_path / "vectors" / "c.index").write_bytes(b"\x00\x00\x00\x05garbage")
    store, catalog = _catalog_with_docs(tmp_path)
    try:
        assert len(catalog.index("c")) == 10
    finally:
        catalog.close()
        store.close()
