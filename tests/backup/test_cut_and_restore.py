"""Spec: a restore rebuilds the source at the cut on any number of shards — each key from its
source primary's checkpoint (never a replica's partial copy), committed transactions still
prepared at the cut rolled forward, undecided ones dropped, tombstones and versions kept, and
every key placed on exactly its owners in the new ring."""

from __future__ import annotations

from pathlib import Path

from themis_shard.backup.restore import fetch_backup, restore_shard
from themis_shard.cluster.placement import Topology
from themis_shard.storage.collections import CollectionConfig
from themis_shard.storage.documents import DocumentStore, Replicated, Write
from themis_shard.storage.intents import Decision, Intent, IntentStore, Role, TxnLog


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
    IntentStore(stores["shard-1"]).put(Intent("t1", "shard-0", 1, Role.PRIMARY, tuple(t1), (), "shard-1"))
    TxnLog(stores["shard-0"]).settle("t1", Decision.COMMIT, ["shard-0", "shard-1"])
    expected[k1[2]] = (1, {"txn": "t1"})
    # T2: prepared, never decided (its COMMIT was held at the gate): absent
    t2 = stores["shard-0"].prepare([Write("acc", k0[2], {"txn": "t2"})])
    IntentStore(stores["shard-0"]).put(Intent("t2", "shard-1", 1, Role.PRIMARY, tuple(t2), (), "shard-0"))

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
