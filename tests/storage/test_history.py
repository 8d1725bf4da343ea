"""Spec: the document store keeps the last ``history_versions`` superseded versions of each key
(documents and tombstones, exactly as stored) and compacts older ones in the superseding write;
purging a key or dropping its tombstone drops its history; with history off nothing is kept."""

from __future__ import annotations

from themis_shard.storage.documents import DocumentStore, StoredDocument, Tombstone, Write
from themis_shard.storage.formats import open_formats


def test_a_superseded_version_is_readable_at_its_version_with_its_stamp(tmp_path):
    store = DocumentStore(tmp_path, history_versions=4)
    store.put("books", "emma", {"title": "Emma"})
    first = store.get("books", "emma")
    store.put("books", "emma", {"title": "Emma (2nd ed.)"})
    old = store.get_version("books", "emma", 1)
    assert isinstance(old, StoredDocument) and old.document == {"title": "Emma"}
    assert (old.hlc, old.origin) == (first.hlc, first.origin)
    assert store.get_version("books", "emma", 2).document == {"title": "Emma (2nd ed.)"}
    assert store.get_version("books", "emma", 3) is None
    store.close()


def test_versions_more_than_history_versions_behind_are_compacted_in_the_same_write(tmp_path):
    store = DocumentStore(tmp_path, history_versions=2)
    for i in range(5):
        store.put("books", "emma", {"n": i})
    assert [e.version for e in store.versions_of("books", "emma")] == [3, 4, 5]
    assert store.get_version("books", "emma", 2) is None
    store.close()


def test_a_delete_keeps_the_document_it_deleted_and_the_tombstone_is_kept_when_superseded(tmp_path):
    store = DocumentStore(tmp_path, history_versions=4)
    store.put("books", "emma", {"n": 1})
    store.delete("books", "emma")
    store.put("books", "emma", {"n": 3})
    kept = store.versions_of("books", "emma")
    assert [type(e) for e in kept] == [StoredDocument, Tombstone, StoredDocument]
    assert kept[0].document == {"n": 1}
    store.close()


def test_one_commit_writing_a_key_twice_keeps_the_intermediate_version(tmp_path):
    store = DocumentStore(tmp_path, history_versions=4)
    store.commit([Write("books", "emma", {"n": 1}), Write("books", "emma", {"n": 2})])
    assert store.get_version("books", "emma", 1).document == {"n": 1}
    store.close()


def test_dropping_a_tombstone_or_purging_a_key_drops_its_history(tmp_path):
    store = DocumentStore(tmp_path, history_versions=4)
    store.put("books", "emma", {"n": 1})
    store.delete("books", "emma")
    assert store.drop_tombstones(store.tombstones(older_than_hlc=2**63)) == 1
    assert store.versions_of("books", "emma") == []
    store.put("books", "dune", {"n": 1})
    store.put("books", "dune", {"n": 2})
    store.purge([("books", "dune")])
    assert store.versions_of("books", "dune") == [] and store.get_version("books", "dune", 1) is None
    store.close()


def test_history_survives_a_restart_and_is_off_by_default(tmp_path):
    store = DocumentStore(tmp_path / "kept", history_versions=1)
    open_formats(store)
    store.put("books", "emma", {"n": 1})
    store.put("books", "emma", {"n": 2})
    store.close()
    store = DocumentStore(tmp_path / "kept", history_versions=1)
    assert store.get_version("books", "emma", 1).document == {"n": 1}
    store.close()
    off = DocumentStore(tmp_path / "off")
    off.put("books", "emma", {"n": 1})
    off.put("books", "emma", {"n": 2})
    assert off.get_version("books", "emma", 1) is None
    off.close()
