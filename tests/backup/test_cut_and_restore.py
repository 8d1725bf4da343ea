"""Spec: a restore rebuilds the source at the cut on any number of shards — each key from its
source primary's checkpoint (never a replica's partial copy), committed transactions still
prepared at the cut rolled forward, undecided ones dropped, tombstones and versions kept, and
every key placed on exactly its owners in the new ring. Records are copied verbatim (never
re-encoded), so the vectors rebuilt from them answer every search as the source did."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from rocksdict import WriteBatch
from themis_core.cluster_backup.manifest import BackupInvalid
from themis_shard.backup.restore import fetch_backup, restore_shard
from themis_shard.cluster.placement.owners import Topology
from themis_shard.storage.collections import CollectionConfig
from themis_shard.storage.documents import DocumentStore, Replicated, Write
from themis_shard.storage.intents import Decision, Intent, IntentStore, Role, TxnLog
from themis_shard.vector.catalog import VectorCatalog


def keys_with_primary(plan, shard_id: str, count: int) -> list[str]:
    topo = Topology.of(plan, shard_id)
    return [k for k in (f"k{i}" for i in range(500)) if topo.owners("acc", k)[0] == shard_id][:count]


def test_a_restore_onto_three_shards_holds_the_cut_of_two(tmp_path: Path, plan_of, take_backup) -> None:
    source = plan_of(2)
    stores = {sid: DocumentStore(tmp_path / "src" / sid, origin=sid) for sid in ("shard-0", "shard-1")}
    (tmp_path / "adapters" / "shard-1").mkdir(parents=True)
    (tmp_path / "adapters" / "shard-1" / "legal.gguf").write_bytes(b"GGUF-adapter")
    for s in stores.values():
        s.declare_collection(CollectionConfig(name="acc", dimension=2))
    k0 = keys_with_primary(source, "shard-0", 4)
    k1 = keys_with_primary(source, "shard-1", 4)
    expected: dict[str, tuple[int, dict | None]] = {}
    # plain writes on each key's primary, copied to the other owner as replication would
    for key in k0[:2] + k1[:2]:
        primary = Topology.of(source, "shard-0").owners("acc", key)[0]
        store = stores[primary]
        store.put("acc", key, {"v": 1, "embedding": [1.0, 0.0]})
        store.put("acc", key, {"v": 2, "embedding": [0.0, 1.0]})
        doc = store.get("acc", key)
        other = stores["shard-1" if primary == "shard-0" else "shard-0"]
        other.apply_replicated([Replicated("acc", key, doc.version, doc.document, doc.hlc, doc.origin)])
        expected[key] = (2, {"v": 2, "embedding": [0.0, 1.0]})
    # a delete leaves a tombstone whose version survives
    stores["shard-0"].delete("acc", k0[0])
    expected[k0[0]] = (3, None)
    # a replica holds part of a write its primary never installed: not in the cut
    stores["shard-0"].apply_replicated([Replicated("acc", k1[0], 9, {"partial": True}, 1 << 60, "shard-1")])
    # T1: committed by coordinator shard-0; shard-1 still holds its prepared primary intent
    t1 = stores["shard-1"].prepare([Write("acc", k1[2], {"txn": "t1"})])
    asyncio.run(
        IntentStore(stores["shard-1"]).put(Intent("t1", "shard-0", 1, Role.PRIMARY, tuple(t1), (), "shard-1"))
    )
    TxnLog(stores["shard-0"]).settle("t1", Decision.COMMIT, ["shard-0", "shard-1"])
    expected[k1[2]] = (1, {"txn": "t1"})
    # T2: prepared, never decided (its COMMIT was held at the gate): absent
    t2 = stores["shard-0"].prepare([Write("acc", k0[2], {"txn": "t2"})])
    asyncio.run(
        IntentStore(stores["shard-0"]).put(Intent("t2", "shard-1", 1, Role.PRIMARY, tuple(t2), (), "shard-0"))
    )

    dest, manifest = take_backup(tmp_path, source, stores)
    staging = tmp_path / "staging"
    assert fetch_backup(dest, "b1", staging) == manifest

    target = plan_of(3)
    restored = {}
    for sid in ("shard-0", "shard-1", "shard-2"):
        store = DocumentStore(tmp_path / "dst" / sid, origin=sid)
        restore_shard(manifest, staging, target, sid, store, tmp_path / "dst" / sid / "trained")
        restored[sid] = store
        assert (tmp_path / "dst" / sid / "trained" / "legal.gguf").read_bytes() == b"GGUF-adapter"
        assert store.collection("acc").dimension == 2
    for key in {*k0, *k1}:
        owners = Topology.of(target, "shard-0").owners("acc", key)
        for sid, store in restored.items():
            found = store.get_entry("acc", key)
            if sid not in owners or key not in expected:
                assert found is None, (sid, key, found)
                continue
            version, document = expected[key]
            assert (found.version, found.document) == (version, document), (sid, key)
    for s in (*stores.values(), *restored.values()):
        s.close()


def restore_onto(tmp_path: Path, manifest, staging: Path, plan, name: str) -> dict[str, DocumentStore]:
    stores = {}
    for member in plan.members:
        sid = member.shard_id
        store = DocumentStore(tmp_path / name / sid, origin=sid)
        restore_shard(manifest, staging, plan, sid, store, tmp_path / name / sid / "trained")
        stores[sid] = store
    return stores


def test_vectors_restored_onto_another_shard_count_answer_searches_as_the_source(
    tmp_path: Path, plan_of, take_backup
) -> None:
    rng = random.Random(7)
    source = plan_of(3)
    stores = {
        m.shard_id: DocumentStore(tmp_path / "src" / m.shard_id, origin=m.shard_id) for m in source.members
    }
    catalogs = {sid: VectorCatalog(s, tmp_path / "src-vectors" / sid) for sid, s in stores.items()}
    topo = Topology.of(source, "shard-0")
    for sid, s in stores.items():
        config = CollectionConfig(name="books", dimension=16, index="flat")
        s.declare_collection(config)
        catalogs[sid].declare(config)
    for i in range(300):  # each written on its primary, copied to the other owner
        key = f"b{i}"
        owners = topo.owners("books", key)
        doc = {"i": i, "embedding": [rng.uniform(-1, 1) for _ in range(16)]}
        version = stores[owners[0]].put("books", key, doc)
        stored = stores[owners[0]].get("books", key)
        stores[owners[1]].apply_replicated(
            [Replicated("books", key, version, doc, stored.hlc, stored.origin)]
        )
    for i in range(0, 300, 13):
        owners = topo.owners("books", f"b{i}")
        stores[owners[0]].delete("books", f"b{i}")
        tomb = stores[owners[0]].get_entry("books", f"b{i}")
        stores[owners[1]].apply_replicated(
            [Replicated("books", tomb.key, tomb.version, None, tomb.hlc, tomb.origin)]
        )
    queries = [[rng.uniform(-1, 1) for _ in range(16)] for _ in range(6)]

    def answers(cats: dict[str, VectorCatalog]) -> list[list[tuple[str, int, float]]]:
        out = []
        for q in queries:
            best: dict[str, tuple[str, int, float]] = {}
            for cat in cats.values():
                for hit, doc in cat.search("books", q, k=10):
                    best[doc.key] = (doc.key, doc.version, hit.score)
            out.append(sorted(best.values(), key=lambda h: (-h[2], h[0]))[:10])
        return out

    expected = answers(catalogs)
    dest, manifest = take_backup(tmp_path, source, stores)
    staging = tmp_path / "staging"
    fetch_backup(dest, "b1", staging)
    for n in (2, 5):
        restored = restore_onto(tmp_path, manifest, staging, plan_of(n), f"dst{n}")
        vectors = {sid: VectorCatalog(s, tmp_path / f"dst{n}-vectors" / sid) for sid, s in restored.items()}
        assert answers(vectors) == expected, n
        target = Topology.of(plan_of(n), "shard-0")
        for sid, s in restored.items():  # exactly the keys the new ring gives each shard, vectors too
            held = {d.key for d in s.scan("books")}
            assert held == {
                k for k in (f"b{i}" for i in range(300)) if i_live(k) and target.owns(sid, "books", k)
            }
            assert vectors[sid].size("books") == len(held) == s.count("books")
        for sid in restored:
            vectors[sid].close()
            restored[sid].close()
    for sid in stores:
        catalogs[sid].close()
        stores[sid].close()


def i_live(key: str) -> bool:
    return int(key[1:]) % 13 != 0


def test_documents_in_another_format_than_this_themis_writes_are_refused(
    tmp_path: Path, plan_of, take_backup
) -> None:
    source = plan_of(1)
    store = DocumentStore(tmp_path / "src" / "shard-0", origin="shard-0")
    store.put("acc", "k1", {"v": 1})
    _, handle, db, sync = store.column_family("meta")
    batch = WriteBatch(raw_mode=True)
    batch.put(b"format:docs", (2).to_bytes(8, "big"), handle)
    db.write(batch, sync)
    dest, manifest = take_backup(tmp_path, source, {"shard-0": store})
    staging = tmp_path / "staging"
    fetch_backup(dest, "b1", staging)
    target = DocumentStore(tmp_path / "dst", origin="shard-0")
    with pytest.raises(BackupInvalid, match="documents in format 2; this Themis restores format 1"):
        restore_shard(manifest, staging, source, "shard-0", target, tmp_path / "trained")
    assert target.count("acc") == 0 and not target.collections()
    for s in (store, target):
        s.close()


def test_a_key_is_read_from_its_in_sync_primary_when_its_ring_primary_was_out_of_sync_at_the_cut(
    tmp_path: Path, plan_of, take_backup
) -> None:
    """A shard out of sync is fenced: writes go to the key's in-sync owners only, so its copy may
    lack acknowledged writes; the key's coordinator at the cut is its first in-sync owner."""
    source = plan_of(2).model_copy(update={"out_of_sync": ("shard-0",), "epoch": 2})
    stores = {sid: DocumentStore(tmp_path / "src" / sid, origin=sid) for sid in ("shard-0", "shard-1")}
    [key] = keys_with_primary(plan_of(2), "shard-0", 1)  # its ring primary is shard-0
    stores["shard-0"].put("acc", key, {"v": 1})  # before shard-0 fell out of sync
    old = stores["shard-0"].get("acc", key)
    stores["shard-1"].apply_replicated(
        [Replicated("acc", key, old.version, old.document, old.hlc, old.origin)]
    )
    stores["shard-1"].put("acc", key, {"v": 2})  # written while shard-0 was fenced
    dest, manifest = take_backup(tmp_path, source, stores)
    staging = tmp_path / "staging"
    fetch_backup(dest, "b1", staging)
    restored = restore_onto(tmp_path, manifest, staging, plan_of(1), "dst")
    found = restored["shard-0"].get("acc", key)
    assert (found.version, found.document) == (2, {"v": 2})
    for s in (*stores.values(), *restored.values()):
        s.close()
