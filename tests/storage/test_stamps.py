"""Spec: stamps — equal versions are ordered the same way on every replica, so replicas that
exchanged records hold identical bytes; the hybrid clock never runs backwards."""

from __future__ import annotations

import itertools

import pytest
from themis_shard.errors import BadRequest
from themis_shard.storage import codec
from themis_shard.storage.documents import DocumentStore, Replicated, Write
from themis_shard.storage.stamps import HybridClock, Stamp, wins


def test_stamps_order_by_version_then_clock_then_origin() -> None:
    assert Stamp(2, 0, "") > Stamp(1, 10**12, "z")
    assert Stamp(2, 5, "a") > Stamp(2, 4, "z")
    assert Stamp(2, 5, "b") > Stamp(2, 5, "a")
    assert wins(Stamp(1), None) and not wins(Stamp(2, 5, "a"), Stamp(2, 5, "a"))


def test_replicas_receiving_two_records_of_one_version_in_any_order_keep_the_same_bytes(tmp_path) -> None:
    a = Replicated("c", "k", 2, {"by": "a"}, 100, "s-0")
    b = Replicated("c", "k", 2, {"by": "b"}, 100, "s-1")
    c = Replicated("c", "k", 2, {"by": "c"}, 99, "s-2")
    finals = set()
    for i, order in enumerate(itertools.permutations([a, b, c])):
        store = DocumentStore(tmp_path / f"r{i}")
        for item in order:
            store.apply_replicated([item])
        finals.add(repr(store.get_entry("c", "k")))
        store.close()
    assert finals == {repr(store_entry(b))}


def test_a_coordinator_stores_the_bytes_its_owners_store_from_the_wire(tmp_path) -> None:
    """The coordinator installs the JSON it checked while preparing (not encoded again); the
    owners encode the record they received. Both give one value."""
    from themis_shard.storage.record_wire import decode_items, encode_items

    document = {"title": "é ✓", "n": 1.5e16, "nested": {"list": [1, "two", None, True]}}
    coordinator = DocumentStore(tmp_path / "coordinator", origin="s-0")
    [record] = coordinator.prepare([Write("c", "k", document)])
    stamp = record.stamp
    assert record.body is not None
    assert codec.stamped(stamp, record.body) == codec.encode(stamp, document, 1 << 20)
    owner = DocumentStore(tmp_path / "owner", origin="s-1")
    coordinator.apply_replicated([record])
    owner.apply_replicated(decode_items(encode_items([record])))
    assert coordinator.get_entry("c", "k") == owner.get_entry("c", "k")
    assert "body" not in encode_items([record])[0]  # the wire carries the document, once
    coordinator.close()
    owner.close()


def store_entry(r: Replicated):
    from themis_shard.storage.documents import StoredDocument

    return StoredDocument(r.collection, r.key, r.version, r.document, r.hlc, r.origin)


def test_local_commits_are_stamped_with_the_shard_and_a_rising_clock(tmp_path) -> None:
    store = DocumentStore(tmp_path / "s", origin="s-0", clock=HybridClock(lambda: 1000))
    store.put("c", "k", {"n": 1})
    first = store.get_entry("c", "k")
    store.apply_replicated([Replicated("c", "x", 1, {}, (5000 << 16) + 7, "s-1")])  # observed
    store.put("c", "k", {"n": 2})
    second = store.get_entry("c", "k")
    assert first.origin == second.origin == "s-0"
    assert second.hlc > (5000 << 16) + 7 > first.hlc


def test_the_clock_is_monotonic_when_the_wall_clock_steps_back() -> None:
    wall = iter([1000, 1000, 900, 2000])
    clock = HybridClock(lambda: next(wall))
    readings = [clock.now() for _ in range(4)]
    assert readings == sorted(set(readings)) and readings[-1] == 2000 << 16


def test_values_written_before_stamps_still_decode() -> None:
    old = (3).to_bytes(8, "big") + b'{"a":1}'
    assert codec.decode(old) == (3, {"a": 1}) and codec.decode_stamp(old) == Stamp(3)
    assert codec.is_tombstone((4).to_bytes(8, "big"))
    new = codec.encode(Stamp(3, 77, "s-1"), {"a": 1}, 1 << 20)
    assert codec.decode(new) == (3, {"a": 1}) and codec.decode_stamp(new) == Stamp(3, 77, "s-1")
    assert codec.is_tombstone(codec.encode_tombstone(Stamp(4, 1, "s-1")))


def test_nesting_deeper_than_the_limit_is_refused_at_write_time(store) -> None:
    def nested(n: int) -> dict:
        doc: dict = {}
        for _ in range(n - 1):
            doc = {"a": doc}
        return doc

    assert codec.depth(nested(5)) == 5 and codec.depth({"a": [1, [2]]}) == 3 and codec.depth(1) == 0
    store.put("c", "ok", nested(codec.DEFAULT_MAX_DEPTH))
    with pytest.raises(BadRequest) as refused:
        store.put("c", "deep", nested(codec.DEFAULT_MAX_DEPTH + 1))
    assert refused.value.code == "document_too_deep"
    with pytest.raises(BadRequest):
        store.prepare([Write("c", "d", nested(5000))])
