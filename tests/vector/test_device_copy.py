"""Spec: on a GPU host the CPU index is the truth and a device copy serves searches.

FAISS GPU indexes do not implement ``remove_ids`` (faiss issues #1818, #584). These tests run the
GPU path on the CPU through the same seam: ``CpuDeviceCopier`` makes copies that refuse
``remove_ids`` as a GPU index does, so every passing update or delete here proves the index never
asks a device copy to remove, and that stale entries in the copy never reach a caller.
"""

from __future__ import annotations

import numpy as np
import pytest
from themis_shard.storage.collections import CollectionConfig
from themis_shard.storage.documents import DocumentStore, Write
from themis_shard.vector.catalog import VectorCatalog
from themis_shard.vector.index import DEVICE_STALE_MIN, IVF_TRAIN_MIN, VectorIndex, gpu_count
from themis_testing.devices import CpuDeviceCopier, RefusingCopy, RemoveRefused


def config(kind: str = "flat", dim: int = 8, metric: str = "cosine") -> CollectionConfig:
    return CollectionConfig(name="c", dimension=dim, index=kind, metric=metric)


def keys_of(hits) -> list[str]:
    return [h.key for h in hits]


def test_the_stand_in_refuses_removal_like_a_gpu_index() -> None:
    index = VectorIndex(config())
    index.upsert(["a"], np.ones((1, 8), np.float32))
    with pytest.raises(RemoveRefused):
        RefusingCopy(index._index).remove_ids(np.array([1], np.int64))


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_random_upserts_and_deletes_search_exactly_as_the_cpu_index_does(kind: str) -> None:
    rng = np.random.default_rng(7)
    n = IVF_TRAIN_MIN + 500 if kind == "ivf" else 600
    keys = [f"k{i}" for i in range(n)]
    data = rng.normal(size=(n, 8)).astype(np.float32)
    cpu, gpu = VectorIndex(config(kind)), VectorIndex(config(kind), device=CpuDeviceCopier())
    cpu.rebuild(keys, data)
    gpu.rebuild(keys, data)
    for _ in range(60):
        q = rng.normal(size=8).astype(np.float32)
        assert keys_of(gpu.search(q, 10)) == keys_of(cpu.search(q, 10))
        moved = [keys[i] for i in rng.integers(0, n, 5)]
        vectors = rng.normal(size=(len(moved), 8)).astype(np.float32)
        gone = [keys[i] for i in rng.integers(0, n, 3)]
        for index in (cpu, gpu):
            index.upsert(moved, vectors)
            index.remove(gone)
    assert len(gpu) == len(cpu)


def test_a_deleted_or_replaced_key_never_comes_back_from_the_device_copy() -> None:
    index = VectorIndex(config(dim=2), device=CpuDeviceCopier())
    index.upsert(["a", "b", "c"], np.array([[1, 0], [0, 1], [-1, 0]], np.float32))
    assert index.search(np.array([1, 0], np.float32), 3)[0].key == "a"  # the copy exists now
    index.upsert(["a"], np.array([[0, -1]], np.float32))
    index.remove(["b"])
    hits = index.search(np.array([0, 1], np.float32), 10)
    assert sorted(keys_of(hits)) == ["a", "c"]
    assert len(index.device.copies) == 1, "a few stale labels are filtered, not refreshed"


def test_deletes_are_batched_into_one_refresh_at_the_next_search() -> None:
    copier = CpuDeviceCopier()
    index = VectorIndex(config(), device=copier)
    n = 4000
    index.rebuild(
        [f"k{i}" for i in range(n)], np.random.default_rng(1).normal(size=(n, 8)).astype(np.float32)
    )
    q = np.ones(8, np.float32)
    index.search(q, 5)
    assert len(copier.copies) == 1
    for i in range(DEVICE_STALE_MIN + 300):  # one delete at a time: no copy is made on a write
        index.remove([f"k{i}"])
    assert len(copier.copies) == 1
    hits = index.search(q, 5)
    assert len(copier.copies) == 2, "the next search refreshes once"
    assert all(int(h.key[1:]) >= DEVICE_STALE_MIN + 300 for h in hits)
    index.search(q, 5)
    assert len(copier.copies) == 2


def test_stale_labels_that_would_pass_the_device_k_limit_refresh_the_copy_first() -> None:
    copier = CpuDeviceCopier(max_k=16)
    index = VectorIndex(config(), device=copier)
    index.rebuild(
        [f"k{i}" for i in range(100)], np.random.default_rng(2).normal(size=(100, 8)).astype(np.float32)
    )
    index.search(np.ones(8, np.float32), 10)
    index.remove(["k1", "k2", "k3", "k4", "k5", "k6", "k7"])
    hits = index.search(np.ones(8, np.float32), 10)
    assert len(hits) == 10 and len(copier.copies) == 2


def test_a_k_above_the_device_limit_is_searched_on_the_cpu() -> None:
    copier = CpuDeviceCopier(max_k=4)
    index = VectorIndex(config(), device=copier)
    index.rebuild(
        [f"k{i}" for i in range(50)], np.random.default_rng(3).normal(size=(50, 8)).astype(np.float32)
    )
    assert len(index.search(np.ones(8, np.float32), 20)) == 20
    assert copier.copies == []


def test_a_rebuild_drops_the_copy_because_labels_restart() -> None:
    copier = CpuDeviceCopier()
    index = VectorIndex(config(dim=2), device=copier)
    index.rebuild(["a", "b"], np.array([[1, 0], [0, 1]], np.float32))
    index.search(np.array([1, 0], np.float32), 1)
    index.rebuild(["x", "y"], np.array([[0, 1], [1, 0]], np.float32))
    assert keys_of(index.search(np.array([1, 0], np.float32), 1)) == ["y"]
    assert len(copier.copies) == 2


def test_persistence_saves_the_cpu_index_and_a_loaded_index_copies_again() -> None:
    copier = CpuDeviceCopier()
    index = VectorIndex(config(dim=2), device=copier)
    index.upsert(["a", "b"], np.array([[1, 0], [0, 1]], np.float32))
    index.search(np.array([1, 0], np.float32), 1)
    index.remove(["a"])
    blob, meta = index.dumps()
    loaded = VectorIndex.loads(config(dim=2), blob, meta, device=copier)
    assert keys_of(loaded.search(np.array([1, 0], np.float32), 5)) == ["b"]
    assert len(copier.copies) == 2


def test_hnsw_has_no_gpu_form_and_stays_on_the_cpu() -> None:
    copier = CpuDeviceCopier()
    index = VectorIndex(config("hnsw", dim=2), device=copier)
    index.upsert(["a", "b"], np.array([[1, 0], [0, 1]], np.float32))
    index.remove(["a"])
    assert keys_of(index.search(np.array([1, 0], np.float32), 5)) == ["b"]
    assert copier.copies == [] and not index.use_gpu


def test_a_catalog_asked_for_gpu_on_a_host_without_one_searches_on_the_cpu(tmp_path) -> None:
    if gpu_count() > 0:
        pytest.skip("this host has a GPU faiss can use")
    store = DocumentStore(tmp_path / "docs")
    try:
        catalog = VectorCatalog(store, tmp_path / "vectors", use_gpu=True)
        assert catalog.device is None and not catalog.use_gpu
    finally:
        store.close()


def test_documents_updated_and_deleted_through_the_store_are_searched_right_on_the_device(
    store, tmp_path
) -> None:
    copier = CpuDeviceCopier()
    catalog = VectorCatalog(store, tmp_path / "vectors", device=copier)
    try:
        catalog.declare(store.declare_collection(CollectionConfig(name="c", dimension=2)))
        store.commit(
            [Write("c", k, {"embedding": v}) for k, v in (("a", [1, 0]), ("b", [0, 1]), ("c", [-1, 0]))]
        )
        assert catalog.search("c", [1, 0], 1)[0][0].key == "a"
        store.commit([Write("c", "a", {"embedding": [0, -1]})])  # a moves away
        store.delete("c", "b")
        assert [h.key for h, _ in catalog.search("c", [0, 1], 3)] == ["c", "a"]
        assert copier.copies, "searches went to the device copy"
    finally:
        catalog.close()
