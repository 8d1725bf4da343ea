"""Spec: ``DocumentStore.ingest`` bulk-loads another store's records verbatim — the stored bytes,
so versions, stamps, tombstones and bodies are the source's exactly — keeps the collection's
counters and generation, survives a reopen (the unlogged batches are flushed to synced files),
never overwrites a key the store holds, and refuses a store an observer (a vector index) watches."""

from __future__ import annotations

from pathlib import Path

import pytest
from themis_shard.storage.collections import CollectionConfig
from themis_shard.storage.documents import DocumentStore, Replicated
from themis_shard.vector.catalog import VectorCatalog


def raw_records(store: DocumentStore) -> list[tuple[bytes, bytes]]:
    docs, _, _, _ = store.column_family("docs")
    return list(docs.items())


def test_ingested_records_are_the_sources_bytes_and_survive_a_reopen(tmp_path: Path) -> None:
    source = DocumentStore(tmp_path / "src", origin="shard-0")
    source.declare_collection(CollectionConfig(name="acc", dimension=2))
    for i in range(40):
        source.put("acc", f"k{i}", {"i": i, "big": 2**70, "embedding": [i / 7, 1.0]})
    source.put("acc", "k3", {"i": 3, "rev": 2, "embedding": [0.5, 0.5]})
    source.delete("acc", "k5")
    source.apply_replicated([Replicated("notes", "n1", 4, {"text": "from elsewhere"}, 99, "shard-9")])
    records = raw_records(source)

    target = DocumentStore(tmp_path / "dst", origin="shard-1")
    target.declare_collection(CollectionConfig(name="acc", dimension=2))
    assert target.ingest(iter(records), batch_bytes=256) == 40  # 39 live in acc, 1 in notes
    assert (target.count("acc"), target.count("notes")) == (39, 1)
    assert target.generation("acc") > 0 and target.has_collection("notes")
    target.close()

    reopened = DocumentStore(tmp_path / "dst", origin="shard-1")
    assert raw_records(reopened) == records
    assert reopened.get_entry("acc", "k5").version == 2 and reopened.get("acc", "k5") is None
    assert reopened.get("acc", "k3").version == 2 and reopened.get("acc", "k0").document["big"] == 2**70
    moved = reopened.get("notes", "n1")
    assert (moved.version, moved.hlc, moved.origin) == (4, 99, "shard-9")
    assert (reopened.count("acc"), reopened.count("notes")) == (39, 1)
    # the vector index rebuilds from the ingested documents when it opens
    vectors = VectorCatalog(reopened, tmp_path / "vectors")
    assert vectors.size("acc") == 39
    [(_, doc)] = vectors.search("acc", [0.5, 0.5], k=1)
    assert doc.key == "k3"
    # and the store takes ordinary writes on top, versions going on from the copied ones
    assert reopened.put("acc", "k5", {"i": 5}) == 3
    vectors.close()
    reopened.close()
    source.close()


def test_ingest_refuses_a_key_the_store_already_holds_or_a_watched_store(tmp_path: Path) -> None:
    source = DocumentStore(tmp_path / "src")
    source.put("acc", "k1", {"v": 1})
    target = DocumentStore(tmp_path / "dst")
    target.put("acc", "k1", {"v": "mine"})
    with pytest.raises(ValueError, match="does not hold"):
        target.ingest(raw_records(source))
    other = DocumentStore(tmp_path / "other")
    with pytest.raises(ValueError, match="does not hold"):
        other.ingest(raw_records(source) * 2)
    watched = DocumentStore(tmp_path / "watched")
    VectorCatalog(watched, tmp_path / "watched-vectors")  # an index would miss the loaded records
    with pytest.raises(ValueError, match="watches"):
        watched.ingest(raw_records(source))
    assert target.get("acc", "k1").document == {"v": "mine"}
    for s in (source, target, other, watched):
        s.close()
