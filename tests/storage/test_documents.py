"""Spec: the document store — versions, conditional writes, atomic commits, durability on reopen."""

from __future__ import annotations

import pytest
from themis_shard.errors import BadRequest, Conflict, NotFound, PayloadTooLarge
from themis_shard.storage import codec
from themis_shard.storage.documents import DocumentStore, Write


def test_put_creates_version_1_and_each_update_increments(store: DocumentStore) -> None:
    assert store.put("books", "dune", {"title": "Dune"}) == 1
    assert store.put("books", "dune", {"title": "Dune", "year": 1965}) == 2
    doc = store.get("books", "dune")
    assert doc is not None and doc.version == 2 and doc.document == {"title": "Dune", "year": 1965}


def test_missing_document_reads_as_none(store: DocumentStore) -> None:
    assert store.get("books", "nothing") is None


def test_if_version_must_match_the_current_version(store: DocumentStore) -> None:
    store.put("books", "dune", {"v": 1})
    with pytest.raises(Conflict):
        store.put("books", "dune", {"v": "stale"}, if_version=7)
    assert store.put("books", "dune", {"v": 2}, if_version=1) == 2
    assert store.get("books", "dune").document == {"v": 2}


def test_if_version_zero_means_create_only(store: DocumentStore) -> None:
    assert store.put("books", "new", {}, if_version=0) == 1
    with pytest.raises(Conflict):
        store.put("books", "new", {}, if_version=0)


def test_delete_is_a_new_version_and_404s_after(store: DocumentStore) -> None:
    store.put("books", "dune", {})
    store.put("books", "dune", {})
    assert store.delete("books", "dune") == 3
    assert store.get("books", "dune") is None
    with pytest.raises(NotFound):
        store.delete("books", "dune")


def test_versions_keep_growing_across_delete_and_recreate(store: DocumentStore) -> None:
    store.put("books", "dune", {})
    store.delete("books", "dune")
    assert store.put("books", "dune", {}, if_version=0) == 3  # If-Match 0: "does not exist" holds


def test_replicated_versions_apply_only_when_newer(store: DocumentStore) -> None:
    from themis_shard.storage.documents import Replicated

    store.put("c", "k", {"v": 1})
    applied = store.apply_replicated([Replicated("c", "k", 3, {"v": 3}), Replicated("c", "k", 2, {"v": 2})])
    assert [c.version for c in applied] == [3]
    assert store.get("c", "k").document == {"v": 3}
    assert store.apply_replicated([Replicated("c", "k", 3, {"v": "replay"})]) == []
    store.apply_replicated([Replicated("c", "k", 4, None)])  # a replicated delete
    assert store.get("c", "k") is None and store.count("c") == 0
    assert store.apply_replicated([Replicated("c", "k", 3, {"v": "stale"})]) == []
    assert store.get("c", "k") is None


def test_commit_is_all_or_nothing(store: DocumentStore) -> None:
    store.put("books", "a", {"n": 1})
    with pytest.raises(Conflict):
        store.commit([Write("books", "b", {"n": 2}), Write("books", "a", {"n": 3}, if_version=99)])
    assert store.get("books", "b") is None
    assert store.get("books", "a").document == {"n": 1}
    with pytest.raises(NotFound):
        store.commit([Write("books", "c", {}), Write("books", "ghost", None)])
    assert store.get("books", "c") is None


def test_several_writes_to_one_key_in_a_commit_apply_in_order(store: DocumentStore) -> None:
    changes = store.commit([Write("books", "a", {"n": 1}), Write("books", "a", {"n": 2})])
    assert [c.version for c in changes] == [1, 2]
    assert store.get("books", "a").document == {"n": 2}


def test_counts_follow_inserts_and_deletes(store: DocumentStore) -> None:
    store.commit([Write("c", str(i), {}) for i in range(10)])
    store.delete("c", "3")
    store.put("c", "4", {"again": True})
    assert store.count("c") == 9
    assert [d.key for d in store.scan("c")] == sorted(str(i) for i in range(10) if i != 3)


def test_oversize_and_non_finite_documents_are_rejected_without_writing(tmp_path) -> None:
    store = DocumentStore(tmp_path / "small", max_document_bytes=100)
    try:
        with pytest.raises(PayloadTooLarge):
            store.put("c", "big", {"x": "y" * 200})
        with pytest.raises(BadRequest):
            store.put("c", "nan", {"x": float("nan")})
        assert store.get("c", "big") is None and store.get("c", "nan") is None
    finally:
        store.close()


@pytest.mark.parametrize(
    "collection,key", [("Bad", "k"), ("c" * 65, "k"), ("c", "a/b"), ("c", ""), ("c", "k" * 257)]
)
def test_invalid_names_are_bad_requests(store: DocumentStore, collection: str, key: str) -> None:
    with pytest.raises(BadRequest):
        store.put(collection, key, {})


def test_everything_committed_is_there_after_reopen(tmp_path) -> None:
    path = tmp_path / "db"
    store = DocumentStore(path)
    store.commit([Write("c", f"k{i}", {"i": i}) for i in range(100)])
    store.delete("c", "k5")
    store.close()
    reopened = DocumentStore(path)
    try:
        assert reopened.count("c") == 99
        assert reopened.get("c", "k7").document == {"i": 7}
        assert reopened.get("c", "k5") is None
    finally:
        reopened.close()


def test_paged_scan_visits_every_entry_once_including_tombstones(store: DocumentStore) -> None:
    store.commit([Write("a", f"k{i:03}", {"i": i}) for i in range(25)])
    store.delete("a", "k007")
    store.put("b", "x", {})
    seen, cursor = [], None
    while True:
        page, cursor = store.scan_page(cursor, 10)
        seen += [(e.collection, e.key, e.document is None) for e in page]
        if cursor is None:
            break
    assert len(seen) == 26 and len(set(seen)) == 26
    assert ("a", "k007", True) in seen


def test_purge_drops_copies_without_a_new_version(store: DocumentStore) -> None:
    store.commit([Write("a", f"k{i}", {"i": i}) for i in range(5)])
    assert store.purge([("a", "k1"), ("a", "k2"), ("a", "missing")]) == 2
    assert store.get("a", "k1") is None and store.version("a", "k1") == 0  # gone, not tombstoned
    assert store.count("a") == 3


def test_tombstones_and_stamp_scans_read_stamps_without_decoding_bodies(tmp_path, monkeypatch) -> None:
    store = DocumentStore(tmp_path / "db")
    try:
        store.put("c", "live", {"x": 1})
        store.put("c", "gone", {"x": 2})
        store.delete("c", "gone")
        monkeypatch.setattr(codec, "decode", lambda raw: pytest.fail("a document body was decoded"))
        [t] = store.tombstones(older_than_hlc=1 << 62)
        assert (t.collection, t.key, t.version) == ("c", "gone", 2)
        assert {(c, k, dead) for c, k, _, dead in store.scan_stamps()} == {
            ("c", "live", False),
            ("c", "gone", True),
        }
    finally:
        monkeypatch.undo()
        store.close()
