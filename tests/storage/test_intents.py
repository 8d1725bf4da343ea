"""Spec: two-phase-commit state is durable — prepare intents and the transaction log survive a
reopen of the store (as after ``kill -9``), locks come back with them; a decider's log is
first-writer-wins between the coordinator's COMMIT and a terminator's fence, and a final
decision, once logged, is the only one. Read checks validate versions without writing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from themis_shard.errors import Conflict
from themis_shard.storage.documents import Check, DocumentStore, Write
from themis_shard.storage.intents import Decision, Intent, IntentStore, Role, TxnLog, now_ms


def reopen(store: DocumentStore) -> DocumentStore:
    store.close()
    return DocumentStore(store.path)


def test_a_prepared_intent_survives_a_reopen_with_its_records_and_locks(tmp_path: Path) -> None:
    store = DocumentStore(tmp_path / "db", origin="s-1")
    records = store.prepare([Write("acc", "a", {"n": 1}), Write("acc", "b", {"n": 2})])
    asyncio.run(
        IntentStore(store).put(Intent("t1", "s-0", 7, Role.PRIMARY, tuple(records), (Check("acc", "c", 0),)))
    )
    store = reopen(store)
    intents = IntentStore(store)
    [intent] = intents.all()
    assert (intent.txn, intent.coordinator, intent.epoch, intent.role) == ("t1", "s-0", 7, Role.PRIMARY)
    assert intent.records == tuple(records) and intent.checks == (Check("acc", "c", 0),)
    assert intents.holders([("acc", "a"), ("acc", "c"), ("acc", "z")]) == {
        ("acc", "a"): "t1",
        ("acc", "c"): "t1",
    }
    assert store.get("acc", "a") is None  # prepared is not installed
    store.close()


def test_dropping_an_intent_releases_its_keys_durably(tmp_path: Path) -> None:
    store = DocumentStore(tmp_path / "db")
    intents = IntentStore(store)
    intent = Intent("t1", "s-0", 1, Role.PRIMARY, tuple(store.prepare([Write("acc", "a", {})])), (), "s-0")
    asyncio.run(intents.put(intent))
    asyncio.run(intents.delete(intent))
    assert intents.holders([("acc", "a")]) == {} and len(intents) == 0
    del intents  # column-family handles hold the DB lock
    store = reopen(store)
    assert IntentStore(store).all() == []
    store.close()


def test_a_replica_intent_locks_its_keys_until_it_is_resolved(store: DocumentStore) -> None:
    """Writes are refused only on a key's primary; a replica becomes one in a failover, and then
    no write may overtake the transaction whose intent it keeps (its records would lose to it)."""
    intents = IntentStore(store)
    copy = Intent("t1", "s-0", 1, Role.REPLICA, tuple(store.prepare([Write("acc", "a", {})])), (), "s-1")
    asyncio.run(intents.put(copy))
    assert intents.of("t1")[0].primary == "s-1"
    assert intents.holders([("acc", "a")]) == {("acc", "a"): "t1"}
    asyncio.run(intents.delete(copy))
    assert intents.holders([("acc", "a")]) == {}


def test_a_key_stays_locked_while_any_transaction_holds_it(store: DocumentStore) -> None:
    """A replica intent of an old primary's transaction and a new primary's own, on one key."""
    intents = IntentStore(store)
    [record] = store.prepare([Write("acc", "a", {})])
    old = Intent("t1", "s-0", 1, Role.REPLICA, (record,), (), "s-1")
    new = Intent("t2", "s-2", 2, Role.PRIMARY, (record,), (), "s-2")
    asyncio.run(intents.put(old))
    asyncio.run(intents.put(new))
    assert intents.holders([("acc", "a")]) == {("acc", "a"): "t1"}
    asyncio.run(intents.delete(old))
    assert intents.holders([("acc", "a")]) == {("acc", "a"): "t2"}
    asyncio.run(intents.delete(new))
    assert intents.holders([("acc", "a")]) == {}


def test_one_shard_keeps_its_own_intent_and_replica_intents_of_one_transaction(store: DocumentStore) -> None:
    intents = IntentStore(store)
    own = Intent("t1", "s-0", 1, Role.PRIMARY, tuple(store.prepare([Write("acc", "a", {})])), (), "s-2")
    copy = Intent("t1", "s-0", 1, Role.REPLICA, tuple(store.prepare([Write("acc", "b", {})])), (), "s-1")
    asyncio.run(intents.put(own))
    asyncio.run(intents.put(copy))
    assert sorted(i.primary for i in intents.of("t1")) == ["s-1", "s-2"]
    assert intents.holders([("acc", "a"), ("acc", "b")]) == {("acc", "a"): "t1", ("acc", "b"): "t1"}
    asyncio.run(intents.delete(copy))
    assert intents.of("t1") == [own] and intents.holders([("acc", "a"), ("acc", "b")]) == {("acc", "a"): "t1"}


def test_the_first_logged_decision_stands_and_survives_a_reopen(tmp_path: Path) -> None:
    store = DocumentStore(tmp_path / "db")
    log = TxnLog(store)
    assert log.settle("t1", Decision.ABORT).decision is Decision.ABORT
    assert log.settle("t1", Decision.COMMIT, ["s-1", "s-2"]).decision is Decision.ABORT
    log.settle("t2", Decision.COMMIT, ["s-2", "s-1"], redrive=True)
    del log  # column-family handles hold the DB lock
    store = reopen(store)
    log = TxnLog(store)
    assert log.get("t1").decision is Decision.ABORT
    assert [(e.txn, e.participants) for e in log.pending_commits()] == [("t2", ("s-1", "s-2"))]
    log.mark_done("t2")
    assert log.pending_commits() == [] and log.get("t2").done
    del log
    store = reopen(store)
    assert TxnLog(store).pending_commits() == [] and TxnLog(store).get("t3") is None
    store.close()


def test_a_decider_accepts_a_commit_or_a_fence_whichever_comes_first(store: DocumentStore) -> None:
    log = TxnLog(store)
    assert log.accept("t1", ["s-1"]).decision is Decision.COMMIT
    assert log.fence("t1").decision is Decision.COMMIT  # the terminator learns the commit
    assert log.fence("t2").decision is Decision.FENCED
    assert log.accept("t2", ["s-1"]).decision is Decision.FENCED  # the late coordinator aborts
    assert log.pending_commits() == []  # a decider re-drives nothing: its coordinator or terminators do


def test_a_fence_gives_way_to_a_learned_decision_but_a_final_one_never_changes(store: DocumentStore) -> None:
    log = TxnLog(store)
    log.fence("t1")
    assert log.settle("t1", Decision.COMMIT).decision is Decision.COMMIT  # committed through another decider
    log.fence("t2")
    assert log.settle("t2", Decision.ABORT).decision is Decision.ABORT
    assert log.settle("t2", Decision.COMMIT).decision is Decision.ABORT
    assert log.fence("t2").decision is Decision.ABORT


def test_a_check_passes_on_the_version_it_names_and_writes_nothing(store: DocumentStore) -> None:
    store.put("acc", "x", {"n": 1})
    assert store.commit([], checks=[Check("acc", "x", 1), Check("acc", "absent", 0)]) == []
    assert store.version("acc", "x") == 1


def test_a_failed_check_aborts_the_whole_commit(store: DocumentStore) -> None:
    store.put("acc", "x", {"n": 1})
    store.put("acc", "x", {"n": 2})
    with pytest.raises(Conflict) as refused:
        store.commit([Write("acc", "y", {"n": 1})], checks=[Check("acc", "x", 1)])
    assert refused.value.code == "version_conflict"
    assert store.get("acc", "y") is None
    with pytest.raises(Conflict):
        store.prepare([], checks=[Check("acc", "x", 0)])  # 0 = must not exist
    store.delete("acc", "x")
    assert store.prepare([], checks=[Check("acc", "x", 0)]) == []  # deleted counts as absent


def test_finished_decisions_are_pruned_after_their_retention(store: DocumentStore) -> None:
    log = TxnLog(store)
    log.settle("aborted", Decision.ABORT)
    log.fence("fenced")
    log.settle("finished", Decision.COMMIT, ["s-1"], redrive=True)
    log.mark_done("finished")
    log.settle("unfinished", Decision.COMMIT, ["s-1"], redrive=True)  # a participant still owes its ack
    assert log.prune(older_than_ms=0) == 0  # nothing is old enough yet
    assert log.prune(older_than_ms=now_ms() + 1) == 3
    assert log.get("aborted") is None and log.get("finished") is None and log.get("fenced") is None
    assert [e.txn for e in log.pending_commits()] == ["unfinished"]
