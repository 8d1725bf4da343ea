"""Spec: optimistic MVCC transactions — snapshot reads, buffered writes, first committer wins."""

from __future__ import annotations

import threading

import pytest
from themis_shard.errors import Conflict
from themis_shard.storage.documents import DocumentStore


def test_reads_see_the_snapshot_taken_at_begin(store: DocumentStore) -> None:
    store.put("acc", "alice", {"balance": 100})
    tx = store.begin()
    store.put("acc", "alice", {"balance": 0})  # committed by someone else after begin
    assert tx.get("acc", "alice") == {"balance": 100}
    tx.abort()


def test_a_transaction_reads_its_own_writes(store: DocumentStore) -> None:
    tx = store.begin()
    tx.put("acc", "bob", {"balance": 5})
    assert tx.get("acc", "bob") == {"balance": 5}
    tx.delete("acc", "bob")
    assert tx.get("acc", "bob") is None
    tx.abort()
    assert store.get("acc", "bob") is None


def test_writes_are_invisible_until_commit_then_all_visible(store: DocumentStore) -> None:
    tx = store.begin()
    tx.put("acc", "a", {"n": 1})
    tx.put("acc", "b", {"n": 2})
    assert store.get("acc", "a") is None
    tx.commit()
    assert store.get("acc", "a").document == {"n": 1} and store.get("acc", "b").document == {"n": 2}


def test_first_committer_wins_and_the_loser_applies_nothing(store: DocumentStore) -> None:
    store.put("acc", "alice", {"balance": 100})
    store.put("acc", "bob", {"balance": 0})
    t1, t2 = store.begin(), store.begin()
    for tx in (t1, t2):
        alice = tx.get("acc", "alice")
        tx.put("acc", "alice", {"balance": alice["balance"] - 60})
        tx.put("acc", "bob", {"balance": 60})
    t1.commit()
    with pytest.raises(Conflict):
        t2.commit()
    assert store.get("acc", "alice").document == {"balance": 40}
    assert store.get("acc", "bob").version == 2


def test_a_read_that_became_stale_aborts_the_commit(store: DocumentStore) -> None:
    store.put("acc", "limit", {"max": 10})
    tx = store.begin()
    assert tx.get("acc", "limit") == {"max": 10}
    tx.put("acc", "order", {"qty": 10})
    store.put("acc", "limit", {"max": 5})
    with pytest.raises(Conflict):
        tx.commit()
    assert store.get("acc", "order") is None


def test_concurrent_increments_never_lose_an_update(store: DocumentStore) -> None:
    store.put("ctr", "n", {"value": 0})
    committed = []

    def worker() -> None:
        for _ in range(20):
            while True:
                tx = store.begin()
                value = tx.get("ctr", "n")["value"]
                tx.put("ctr", "n", {"value": value + 1})
                try:
                    tx.commit()
                    committed.append(1)
                    break
                except Conflict:
                    continue

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get("ctr", "n").document == {"value": len(committed)} == {"value": 80}
