"""Spec: the document store keeps the last ``history_versions`` superseded versions of each key
(documents and tombstones, exactly as stored) and compacts older ones in the superseding write;
purging a key or dropping its tombstone drops its history; with history off nothing is kept.
A version is picked among a key's held records by number (and stamp) or as of a hybrid time."""

from __future__ import annotations

import pytest
from themis_shard.errors import NotFound, ThemisError
from themis_shard.storage import history
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


# -- picking a version among a key's held records (pure) ---------------------------------------
def rec(version: int, hlc: int, document: dict | None = None) -> StoredDocument | Tombstone:
    if document is None:
        return Tombstone("books", "emma", version, None, hlc)
    return StoredDocument("books", "emma", version, document, hlc)


def test_at_version_finds_the_version_or_says_why_not_by_name():
    held = [rec(2, 20, {"n": 2}), rec(3, 30), rec(4, 40, {"n": 4})]
    assert history.at_version(held, "urn", 4, 40).document == {"n": 4}
    with pytest.raises(ThemisError) as gone:
        history.at_version(held, "urn", 1)
    assert (gone.value.status, gone.value.code) == (
        410,
        "version_compacted",
    ) and "urn@1" in gone.value.message
    with pytest.raises(ThemisError) as reused:  # same number, other stamp: the number was reused
        history.at_version(held, "urn", 2, 99)
    assert reused.value.code == "version_compacted"
    for version in (3, 5):  # a delete, and a version never written
        with pytest.raises(NotFound) as missing:
            history.at_version(held, "urn", version)
        assert missing.value.code == "version_not_found"


def test_as_of_is_the_newest_record_stamped_at_or_before_the_time():
    held = [rec(1, 10, {"n": 1}), rec(2, 20), rec(3, 30, {"n": 3})]
    assert history.as_of(held, "urn", 15).document == {"n": 1}
    assert history.as_of(held, "urn", 25) is None  # deleted then
    assert history.as_of(held, "urn", 35).document == {"n": 3}
    assert history.as_of(held, "urn", 5) is None  # not yet written then
    with pytest.raises(ThemisError) as gone:  # v1 and v2 compacted: v3 is all there is
        history.as_of(held[2:], "urn", 15)
    assert (gone.value.status, gone.value.code) == (410, "snapshot_unavailable")
