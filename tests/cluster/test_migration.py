"""Spec: the pure handoff decisions of online resharding — who needs a key, who sends it, and
which copies a shard may purge once everyone is done."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from themis_core.ring import HashRing
from themis_shard.cluster.placement.migration import (
    designated_source,
    entries_to_send,
    is_moved_to,
    keys_to_purge,
)
from themis_shard.storage.documents import StoredDocument, Tombstone

KEYS = [f"k{i}" for i in range(600)]


def ring(n: int, version: int = 1) -> HashRing:
    return HashRing.of([f"shard-{i}" for i in range(n)], vnodes=128, version=version)


def docs(keys) -> list[StoredDocument]:
    return [StoredDocument("c", k, 1, {"k": k}) for k in keys]


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 6), copies=st.integers(1, 3))
def test_every_gained_key_is_sent_exactly_once_by_a_previous_holder(n: int, copies: int) -> None:
    old, new = ring(n), ring(n + 1, 2)
    newcomer = f"shard-{n}"
    gained = [k for k in KEYS if is_moved_to(newcomer, f"urn:themis:c:{k}", new, old, copies)]
    sent: list[str] = []
    for holder in old.shards:  # each previous shard sends from what it holds
        held = [k for k in KEYS if holder in old.owners(f"urn:themis:c:{k}", copies)]
        sent += [e.key for e in entries_to_send(docs(held), holder, newcomer, new, old, copies, set())]
    assert sorted(sent) == sorted(gained)


def test_only_keys_whose_owners_changed_move_roughly_their_share() -> None:
    old, new = ring(3), ring(4, 2)
    moved = [k for k in KEYS if is_moved_to("shard-3", f"urn:themis:c:{k}", new, old, 1)]
    assert 0.15 < len(moved) / len(KEYS) < 0.35  # ≈ 1/4
    assert not any(is_moved_to("shard-0", f"urn:themis:c:{k}", new, old, 1) for k in KEYS)


def test_an_unreachable_source_is_replaced_by_the_next_holder() -> None:
    old, new = ring(3), ring(4, 2)
    key = next(k for k in KEYS if is_moved_to("shard-3", f"urn:themis:c:{k}", new, old, 2))
    first, second = old.owners(f"urn:themis:c:{key}", 2)
    assert designated_source(f"urn:themis:c:{key}", "shard-3", new, old, 2, set()) == first
    assert designated_source(f"urn:themis:c:{key}", "shard-3", new, old, 2, {first}) == second


def test_catch_up_without_a_previous_ring_offers_everything_the_requester_owns() -> None:
    current = ring(3)
    owned = [k for k in KEYS if "shard-1" in current.owners(f"urn:themis:c:{k}", 2)]
    offered: set[str] = set()
    for holder in ("shard-0", "shard-2"):
        held = [k for k in KEYS if holder in current.owners(f"urn:themis:c:{k}", 2)]
        offered |= {e.key for e in entries_to_send(docs(held), holder, "shard-1", current, None, 2, set())}
    assert offered == set(owned)


def test_tombstones_move_too_and_purge_keeps_only_owned_copies() -> None:
    old, new = ring(3), ring(4, 2)
    entries = [Tombstone("c", k, 2) for k in KEYS]
    sent = entries_to_send(entries, "shard-0", "shard-3", new, old, 1, set())
    assert sent and all(isinstance(e, Tombstone) for e in sent)
    purge = keys_to_purge(docs(KEYS), "shard-0", new, 1)
    assert all("shard-0" not in new.owners(f"urn:themis:c:{k}", 1) for _, k in purge)
    assert len(purge) == sum("shard-0" not in new.owners(f"urn:themis:c:{k}", 1) for k in KEYS)
