"""Spec: two-phase commit — who takes part and decides, what a terminator concludes from the
deciders' answers, what a client is told about its id, and how a participant with prepared
intents finishes them without its coordinator (commit when a decider or the coordinator logged
COMMIT, abort once every decider is fenced). The multi-process protocol, with kills, is in
e2e/test_cross_shard_transactions.py and e2e/test_txn_termination.py."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from themis_shard.cluster.documents.coordinator import DistributedDocuments
from themis_shard.cluster.placement.owners import Topology
from themis_shard.cluster.replication.delivery import Replication
from themis_shard.cluster.replication.fencing import Delivery, KeyLocks, WriteConcern
from themis_shard.cluster.transactions.admin import summarize
from themis_shard.cluster.transactions.decisions import (
    Outcome,
    Status,
    client_error,
    coordinator_decision,
    deciders,
    enough_copies,
    id_outcome,
    id_outcome_after_fence,
    in_doubt,
    kind,
    outcome,
    outcome_after_fence,
    participant_groups,
    termination,
)
from themis_shard.cluster.transactions.service import Transactions
from themis_shard.cluster.transactions.settings import TxnSettings
from themis_shard.cluster.transport.remote import RemoteExecutor
from themis_shard.errors import Conflict, NotFound, Unavailable
from themis_shard.storage.documents import Check, DocumentStore, Write
from themis_shard.storage.hints import HintLog
from themis_shard.storage.intents import Decision, Intent, Role, now_ms

from .fakes import live, plan_of

PLAN = plan_of(3)
ME = Topology.of(PLAN, "s-0")


def keys_of(first: str, n: int = 2, collection: str = "acc") -> list[str]:
    return [k for k in (f"k{i}" for i in range(500)) if ME.owners(collection, k)[0] == first][:n]


# -- the pure decisions ----------------------------------------------------------------------------
def test_participants_are_the_primaries_and_results_keep_the_input_order() -> None:
    [a] = keys_of("s-1", 1)
    [b] = keys_of("s-2", 1)
    [c] = keys_of("s-0", 1)
    writes = [Write("acc", a, {}), Write("acc", b, {}), Write("acc", a, None)]
    groups = participant_groups(writes, [Check("acc", c, 3)], ME)
    assert sorted(groups) == ["s-0", "s-1", "s-2"]
    assert groups["s-1"].positions == [0, 2] and groups["s-2"].positions == [1]
    assert groups["s-0"].writes == [] and groups["s-0"].checks == [Check("acc", c, 3)]
    assert kind([("acc", a), ("acc", b)], ME) == "cross"


def test_keys_on_one_primary_commit_in_one_step_only_when_they_share_their_other_owners() -> None:
    """One message per owner, applied whole: a coordinator lost between two messages (and then
    fenced by a failover) cannot leave half of such a transaction served."""
    mine = keys_of("s-1", 50)
    same = [k for k in mine if ME.owners("acc", k) == ME.owners("acc", mine[0])][:2]
    split = next(k for k in mine if ME.owners("acc", k) != ME.owners("acc", mine[0]))
    assert kind([("acc", k) for k in same], ME) == "single"
    assert kind([("acc", mine[0]), ("acc", split)], ME) == "cross"


def test_the_coordinator_commits_only_when_every_participant_prepared() -> None:
    assert coordinator_decision([True, True]) is Decision.COMMIT
    assert coordinator_decision([True, False]) is Decision.ABORT


def test_the_deciders_are_the_participants_then_the_other_owners_never_the_coordinator() -> None:
    [a] = keys_of("s-1", 1)
    [b] = keys_of("s-2", 1)
    found = deciders("s-0", ["s-1", "s-2"], [("acc", a), ("acc", b)], ME)
    assert found[:2] == ("s-1", "s-2") and "s-0" not in found
    [c] = keys_of("s-0", 1)
    assert deciders("s-0", ["s-0"], [("acc", c)], ME) == tuple(o for o in ME.owners("acc", c) if o != "s-0")
    assert deciders("s-0", ["s-0"], [], ME) == ("s-0",)  # nobody else takes part


FENCED, COMMIT, ABORT = (Status(Decision.FENCED), Status(Decision.COMMIT), Status(Decision.ABORT))


@pytest.mark.parametrize(
    ("answers", "decision"),
    [
        ({"s-1": COMMIT, "s-2": None}, Decision.COMMIT),  # the coordinator made it final there
        ({"s-1": FENCED, "s-2": COMMIT}, Decision.COMMIT),  # it got there before the fence
        ({"s-1": FENCED, "s-2": ABORT}, Decision.ABORT),  # someone concluded before
        ({"s-1": FENCED, "s-2": FENCED}, Decision.ABORT),  # no COMMIT can be logged any more
        ({"s-1": FENCED, "s-2": None}, None),  # the silent one may hold the COMMIT
        ({"s-1": FENCED, "s-2": Status(None, running=True)}, None),  # coordinating, promised nothing
    ],
)
def test_what_a_terminator_concludes_from_the_deciders(answers, decision) -> None:
    assert termination(answers, ["s-1", "s-2"]) == decision


def test_what_a_client_is_told_about_its_id() -> None:
    assert outcome({"s-0": None, "s-1": COMMIT}) is Outcome.COMMITTED
    assert outcome({"s-0": ABORT, "s-1": Status()}) is Outcome.ABORTED
    assert outcome({"s-0": Status(prepared=True), "s-1": None}) is Outcome.IN_PROGRESS
    assert outcome({"s-0": Status(), "s-1": Status(running=True)}) is Outcome.IN_PROGRESS
    assert outcome({"s-0": Status(), "s-1": None}) is Outcome.UNKNOWN
    # once every shard but one is fenced, it can never commit
    assert outcome_after_fence({"s-0": FENCED, "s-1": FENCED, "s-2": None}, copies=2) is Outcome.ABORTED
    assert outcome_after_fence({"s-0": FENCED, "s-1": None, "s-2": None}, copies=2) is Outcome.UNKNOWN
    assert outcome_after_fence({"s-0": FENCED, "s-1": None}, copies=1) is Outcome.UNKNOWN
    assert outcome_after_fence({"s-0": Status(running=True), "s-1": FENCED}, copies=2) is Outcome.IN_PROGRESS


def test_what_a_client_is_told_about_an_id_it_retried() -> None:
    """Each attempt at an id has its own fate; the id is committed if one attempt committed,
    in progress while one may still commit, aborted once every one is. A shard that fenced the
    bare id refuses every attempt it has nothing logged for."""

    def shard(**attempts: Status) -> Status:
        return Status(attempts={f"t1@{n}": s for n, s in attempts.items()})

    aborted, prepared = Status(Decision.ABORT), Status(prepared=True)
    assert (
        id_outcome({"s-0": shard(a=aborted), "s-1": shard(b=Status(Decision.COMMIT))}, "t1")
        is Outcome.COMMITTED
    )
    assert id_outcome({"s-0": shard(a=aborted), "s-1": shard(b=prepared)}, "t1") is Outcome.IN_PROGRESS
    assert (
        id_outcome({"s-0": shard(a=aborted), "s-1": shard(b=aborted), "s-2": None}, "t1") is Outcome.ABORTED
    )
    assert (
        id_outcome({"s-0": Status(Decision.COMMIT), "s-1": None}, "t1") is Outcome.COMMITTED
    )  # an older version's
    assert id_outcome({"s-0": Status(), "s-1": Status()}, "t1") is Outcome.UNKNOWN
    # every shard fenced the bare id; s-0 had fenced the second attempt by its name before
    fenced = Status(Decision.FENCED)
    after = {
        "s-0": replace(shard(a=aborted, b=fenced), decision=Decision.FENCED),
        "s-1": fenced,
        "s-2": fenced,
    }
    assert id_outcome(after, "t1") is Outcome.UNKNOWN
    assert id_outcome_after_fence(after, "t1", copies=2) is Outcome.ABORTED
    assert (
        id_outcome_after_fence({**after, "s-2": shard(b=Status(running=True))}, "t1", 2)
        is Outcome.IN_PROGRESS
    )


def test_the_operators_list_has_one_row_per_attempt_under_the_clients_id() -> None:
    def intent(name: str, role: str, primary: str, age_s: float) -> dict:
        return {"txn": name, "role": role, "primary": primary, "coordinator": "s-0",
                "deciders": ["s-1"], "keys": [f"acc/{name}"], "age_s": age_s}  # fmt: skip

    listings = {
        "s-1": {"intents": [intent("t1@a", "primary", "s-1", 9.0)], "running": [], "committing": []},
        "s-2": {
            "intents": [intent("t1@a", "replica", "s-1", 8.0), intent("t1@b", "primary", "s-2", 2.0)],
            "running": [],
            "committing": [],
        },
        "s-0": {"intents": [], "running": ["t1@b"], "committing": []},
        "s-3": None,  # did not answer
    }
    rows = summarize(listings)
    assert [(r["id"], r["attempt"], r["state"]) for r in rows] == [
        ("t1", "t1@a", "in_doubt"),
        ("t1", "t1@b", "running"),
    ]
    assert [h["shard"] for h in rows[0]["held_by"]] == ["s-1", "s-2"] and rows[0]["age_s"] == 9.0


def test_an_intent_is_in_doubt_once_old_enough() -> None:
    intent = Intent("t", "s-0", 1, Role.PRIMARY, (), created_ms=10_000)
    assert not in_doubt(intent, now_ms=11_000, after_s=2)
    assert in_doubt(intent, now_ms=12_000, after_s=2)


def test_a_vote_needs_the_concerns_copies_of_every_written_key() -> None:
    [key] = keys_of("s-0", 1)
    [replica] = [o for o in ME.owners("acc", key) if o != "s-0"]
    assert enough_copies([("acc", key)], ME, {replica: Delivery.HELD}, need=2)
    assert not enough_copies([("acc", key)], ME, {replica: Delivery.UNKNOWN}, need=2)
    assert enough_copies([("acc", key)], ME, {}, need=1)


def test_the_client_hears_a_failed_condition_before_an_epoch_change_before_a_503() -> None:
    conflict = Conflict("x", code="version_conflict")
    fenced = Unavailable("plan changing", code="epoch_changed")
    down = Unavailable("down", code="coordinator_unavailable")
    assert client_error([down, fenced, conflict]) is conflict
    assert client_error([down, fenced]) is fenced
    assert client_error([down]) is down


# -- one shard's participant, coordinator and recovery over a real store -------------------------
def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


class Shard:
    """s-0's transactions part over a real RocksDB; every peer refuses connections (unless
    ``peers`` answers them)."""

    def __init__(self, path: Path, peers=refused) -> None:
        self.store = DocumentStore(path, origin="s-0")
        plan = live(PLAN, "s-0", breaker_health_probe_s=0)
        self.executor = RemoteExecutor(plan.settings, plan.url, transport=httpx.MockTransport(peers))
        registry = CollectorRegistry()
        self.plan = plan
        self.replication = Replication(self.executor, HintLog(self.store), plan, registry)
        self.locks = KeyLocks()
        self.txns = Transactions(
            self.store,
            self.locks,
            self.executor,
            plan,
            self.replication,
            TxnSettings(resolve_after_s=0, timeout_s=5),
            registry,
        )

    def close(self) -> None:
        asyncio.run(self.executor.aclose())
        self.txns = self.replication = None  # column-family handles hold the DB lock: drop them first
        gc.collect()
        self.store.close()


@pytest.fixture
def shard(tmp_path: Path):
    s = Shard(tmp_path / "db")
    yield s
    s.close()


def prepare(shard: Shard, txn: str, writes: list[Write], checks=(), concern=WriteConcern.ONE, epoch=None):
    return asyncio.run(
        shard.txns.participant.prepare(
            txn, "s-0", ME.version if epoch is None else epoch, writes, list(checks), concern
        )
    )


def test_a_prepare_locks_its_keys_until_the_decision(shard: Shard) -> None:
    a, b = keys_of("s-0")
    records = prepare(shard, "t1", [Write("acc", a, {"n": 1})], [Check("acc", b, 0)])
    assert [r.version for r in records] == [1] and shard.store.get("acc", a) is None
    with pytest.raises(Conflict) as locked:
        prepare(shard, "t2", [Write("acc", b, {"n": 2})])
    assert locked.value.code == "transaction_conflict"
    assert shard.txns.intents.holders([("acc", a), ("acc", b)]) == {("acc", a): "t1", ("acc", b): "t1"}
    asyncio.run(shard.txns.participant.commit("t1"))
    assert shard.store.get("acc", a).document == {"n": 1} and shard.txns.intents.holders([("acc", b)]) == {}
    prepare(shard, "t2", [Write("acc", b, {"n": 2})])  # released


def test_a_prepare_waits_for_a_single_shard_write_in_flight_to_the_same_key(shard: Shard) -> None:
    """Single-shard writes and prepares share one lock table — also while it is empty (it
    has a length, so ``locks or KeyLocks()`` once gave the single-shard path a table of its
    own): otherwise a prepare reads the key mid-write and both mint the same version, and the
    stamp with the later clock silently replaces the other acknowledged write (the nemesis
    bank lost a credit)."""
    documents = DistributedDocuments(
        shard.store, shard.executor, shard.replication, shard.plan, locks=shard.locks, held=shard.txns.intents
    )
    assert documents.locks is shard.locks
    [a] = keys_of("s-0", 1)

    async def scenario() -> list:
        async with documents.locks.hold([("acc", a)]):  # a single-shard write to a, replicating
            write = [Write("acc", a, {"n": 2})]
            prepared = asyncio.create_task(
                shard.txns.participant.prepare("t1", "s-0", ME.version, write, [], WriteConcern.ONE)
            )
            await asyncio.sleep(0.05)
            assert not prepared.done()  # it waits for the write ...
            shard.store.commit([Write("acc", a, {"n": 1})])  # ... which installs version 1
        return await prepared

    assert [r.version for r in asyncio.run(scenario())] == [2]  # and then writes on top of it


def test_an_intent_kept_as_a_replica_locks_its_keys_once_this_shard_is_their_primary(shard: Shard) -> None:
    """A failover made this shard the primary of a key it kept another primary's intent for:
    no write and no other transaction may overtake that transaction before it is resolved. The
    intent's record carries the version it was prepared at; a write installed first would
    outrank it when the transaction commits here (the nemesis bank lost a credit)."""
    documents = DistributedDocuments(
        shard.store, shard.executor, shard.replication, shard.plan, locks=shard.locks, held=shard.txns.intents
    )
    [a] = keys_of("s-0", 1)
    [record] = shard.store.prepare([Write("acc", a, {"balance": 107})])
    asyncio.run(shard.txns.intents.put(Intent("t1", "s-1", ME.version, Role.REPLICA, (record,), (), "s-1")))
    with pytest.raises(Conflict) as write:
        asyncio.run(documents.commit([Write("acc", a, {"balance": 98})], WriteConcern.ONE))
    assert write.value.code == "transaction_in_progress"
    with pytest.raises(Conflict) as other:
        prepare(shard, "t2", [Write("acc", a, {"balance": 98})])
    assert other.value.code == "transaction_conflict"
    asyncio.run(shard.txns.participant.commit("t1"))  # resolved: its record is installed, the key free
    assert shard.store.get("acc", a).document == {"balance": 107}
    asyncio.run(documents.commit([Write("acc", a, {"balance": 98})], WriteConcern.ONE))
    assert shard.store.get("acc", a).version == 2


def test_a_refused_prepare_leaves_nothing_prepared(shard: Shard) -> None:
    a, b = keys_of("s-0")
    shard.store.put("acc", a, {"n": 0})
    with pytest.raises(Conflict) as failed:
        prepare(shard, "t1", [Write("acc", a, {"n": 1}, if_version=5)])
    assert failed.value.code == "version_conflict"
    with pytest.raises(NotFound):
        prepare(shard, "t2", [Write("acc", b, None)])
    with pytest.raises(Conflict) as fenced:
        prepare(shard, "t3", [Write("acc", a, {"n": 1})], epoch=ME.version - 1)
    assert fenced.value.code == "stale_epoch"
    elsewhere = next(k for k in keys_of("s-1", 50) if "s-0" in ME.owners("acc", k))  # s-0 a replica
    with pytest.raises(Conflict) as not_mine:
        prepare(shard, "t4", [Write("acc", elsewhere, {})])
    assert not_mine.value.code == "not_coordinator"
    assert shard.txns.intents.all() == []


def test_a_prepare_without_the_concerns_copies_votes_no_and_keeps_nothing(shard: Shard) -> None:
    [a] = keys_of("s-0", 1)
    with pytest.raises(Unavailable) as short:
        prepare(shard, "t1", [Write("acc", a, {"n": 1})], concern=WriteConcern.ALL)  # replica is down
    assert short.value.code == "replicas_unavailable"
    assert shard.txns.intents.all() == [] and shard.txns.intents.holders([("acc", a)]) == {}


def test_a_shard_fences_a_transaction_unless_it_is_coordinating_it(shard: Shard) -> None:
    txns = shard.txns
    assert asyncio.run(txns.fence("never-seen")) == Status(Decision.FENCED)
    assert txns.log.accept("never-seen", ["s-1"]).decision is Decision.FENCED  # a late commit loses
    txns.coordinator._in_flight["running"] = 0.0
    assert asyncio.run(txns.fence("running")) == Status(None, running=True)
    assert txns.log.get("running") is None


def test_a_known_transaction_id_is_never_prepared_again(shard: Shard) -> None:
    [a] = keys_of("s-0", 1)
    prepare(shard, "t1", [Write("acc", a, {"n": 1})])
    asyncio.run(shard.txns.participant.commit("t1"))
    assert shard.txns.status("t1") == Status(Decision.COMMIT)  # the participant remembers it
    with pytest.raises(Conflict) as again:
        prepare(shard, "t1", [Write("acc", a, {"n": 2})])
    assert again.value.code == "transaction_id_in_use"
    asyncio.run(shard.txns.fence("t2"))
    with pytest.raises(Conflict) as fenced:
        prepare(shard, "t2", [Write("acc", a, {"n": 2})])
    assert fenced.value.code == "transaction_id_in_use" and shard.store.get("acc", a).version == 1


def test_a_transaction_no_decider_can_log_aborts_and_its_id_is_spent(shard: Shard) -> None:
    [a] = keys_of("s-0", 1)  # its replica, the one decider, refuses connections
    with pytest.raises(Unavailable) as aborted:
        asyncio.run(shard.txns.run([Write("acc", a, {"n": 1})], [], WriteConcern.ONE, "client-id"))
    assert aborted.value.code == "transaction_timeout"
    assert shard.store.get("acc", a) is None and shard.txns.intents.all() == []
    [attempt] = shard.txns.status("client-id").attempts.values()
    assert attempt.decision is Decision.ABORT
    with pytest.raises(Conflict) as again:
        asyncio.run(shard.txns.run([Write("acc", a, {"n": 1})], [], WriteConcern.ONE, "client-id"))
    assert again.value.code == "transaction_id_in_use"


def test_a_retried_id_leaves_the_first_attempts_intents_to_their_deciders(tmp_path: Path) -> None:
    """The coordinator was killed after a decider accepted COMMIT and before its own record: its
    log knows nothing of the id. The client retries with the same id; every participant refuses
    it (409 ``transaction_id_in_use``). The retry's abort is its own attempt's: the first
    attempt's intents stay for their deciders, whose COMMIT recovery finds."""

    def decider(request: httpx.Request) -> httpx.Response:  # s-1 accepted the first attempt's COMMIT
        if request.url.path == "/internal/txn/fence":
            return httpx.Response(200, json={"decision": "commit", "running": False, "prepared": False})
        return refused(request)

    shard = Shard(tmp_path / "db", peers=decider)
    [a] = keys_of("s-0", 1)
    try:
        first = [Write("acc", a, {"n": 1})]
        asyncio.run(
            shard.txns.participant.prepare(
                "t1@first", "s-0", ME.version, first, [], WriteConcern.ONE, ("s-1",)
            )
        )
        with pytest.raises(Conflict) as again:
            asyncio.run(shard.txns.run(first, [], WriteConcern.ONE, "t1"))
        assert again.value.code == "transaction_id_in_use"
        assert shard.txns.log.get("t1@first") is None and shard.txns.intents.holders([("acc", a)])
        assert asyncio.run(shard.txns.resolver.settle("t1@first", force=True)) is Decision.COMMIT
        assert shard.store.get("acc", a).document == {"n": 1}
    finally:
        shard.close()


def test_a_retry_with_other_keys_is_refused_where_any_attempt_at_its_id_is_held(shard: Shard) -> None:
    """A replica's copy of the first attempt's intent spends the id here as much as a primary
    one: the retry, with other keys this shard is the primary of, is refused, and the first
    attempt's intent is untouched."""
    a, b = keys_of("s-0")
    [record] = shard.store.prepare([Write("acc", a, {"n": 1})])
    asyncio.run(
        shard.txns.intents.put(Intent("t1@first", "s-1", ME.version, Role.REPLICA, (record,), (), "s-1"))
    )
    with pytest.raises(Conflict) as again:
        asyncio.run(shard.txns.run([Write("acc", b, {"n": 2})], [], WriteConcern.ONE, "t1"))
    assert again.value.code == "transaction_id_in_use"
    assert [i.txn for i in shard.txns.intents.all()] == ["t1@first"] and shard.store.get("acc", b) is None


def test_an_attempt_is_never_committed_by_another_attempts_decision(shard: Shard) -> None:
    """This shard decided the first attempt at ``t1`` (a decider's COMMIT) and holds the intent
    of a second attempt, with other keys, whose coordinator is gone and whose abort was lost.
    Termination fences the second attempt by its own name: the first one's COMMIT does not
    speak for it, and it aborts."""
    [a] = keys_of("s-0", 1)
    assert shard.txns.log.accept("t1@first", ["s-1"]).decision is Decision.COMMIT
    old_intent(shard, "t1@second", a, coordinator="s-2", deciders=("s-0",))
    assert asyncio.run(shard.txns.resolver.resolve()) == 1
    assert shard.store.get("acc", a) is None and shard.txns.intents.all() == []
    assert shard.txns.log.get("t1@second").decision is Decision.ABORT


def test_a_decider_accepts_one_attempt_per_id_and_none_once_the_id_is_fenced(shard: Shard) -> None:
    log = shard.txns.log
    assert log.accept("t1@first", ["s-1"]).decision is Decision.COMMIT
    assert log.accept("t1@first", ["s-1"]).decision is Decision.COMMIT  # the same attempt again
    assert log.accept("t1@second", ["s-1"]).decision is Decision.FENCED
    assert log.accept("t10@first", ["s-1"]).decision is Decision.COMMIT  # another id
    asyncio.run(shard.txns.fence("t2"))  # a client asked about an id nobody knew
    assert log.accept("t2@late", ["s-1"]).decision is Decision.FENCED
    assert [e.txn for e in log.entries_of("t1")] == ["t1@first", "t1@second"]


def test_a_restarted_participant_commits_what_its_coordinator_logged(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "db")
    a, b = keys_of("s-0")
    prepare(shard, "t1", [Write("acc", a, {"n": 1}), Write("acc", b, {"n": 2})])
    shard.txns.log.settle("t1", Decision.COMMIT, ["s-0"], redrive=True)
    shard.close()  # "kill -9" after the decision, before phase 2
    shard = Shard(tmp_path / "db")
    try:
        assert shard.store.get("acc", a) is None and shard.txns.intents.holders([("acc", a)])
        asyncio.run(shard.txns.recover())
        assert shard.store.get("acc", a).document == {"n": 1} and shard.store.get("acc", b).version == 1
        assert shard.txns.intents.all() == [] and shard.txns.log.pending_commits() == []
    finally:
        shard.close()


def test_a_restarted_participant_aborts_what_its_restarted_coordinator_did_not_decide(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "db")
    [a] = keys_of("s-0", 1)
    prepare(shard, "t1", [Write("acc", a, {"n": 1})])
    shard.close()  # the coordinator (this shard) died before deciding
    shard = Shard(tmp_path / "db")
    try:
        asyncio.run(shard.txns.recover())
        assert shard.store.get("acc", a) is None and shard.txns.intents.all() == []
        assert shard.txns.log.get("t1").decision is Decision.ABORT
        assert shard.txns.metrics.in_doubt._value.get() == 0
    finally:
        shard.close()


def test_an_intent_whose_coordinator_is_unreachable_stays_in_doubt(shard: Shard) -> None:
    [a] = keys_of("s-0", 1)
    records = shard.store.prepare([Write("acc", a, {"n": 1})])
    asyncio.run(
        shard.txns.intents.put(Intent("t1", "s-2", ME.version, Role.PRIMARY, tuple(records), (), "s-0"))
    )
    assert asyncio.run(shard.txns.resolver.resolve()) == 0
    assert shard.txns.intents.holders([("acc", a)]) == {("acc", a): "t1"}


def old_intent(shard: Shard, txn: str, key: str, coordinator: str, deciders: tuple[str, ...]) -> None:
    records = shard.store.prepare([Write("acc", key, {"n": 1})])
    intent = Intent(
        txn, coordinator, ME.version, Role.PRIMARY, tuple(records), (), "s-0", now_ms() - 60_000, deciders
    )
    asyncio.run(shard.txns.intents.put(intent))


def test_an_intent_whose_coordinator_is_gone_aborts_once_every_decider_is_fenced(shard: Shard) -> None:
    [a] = keys_of("s-0", 1)
    old_intent(shard, "t1", a, coordinator="s-2", deciders=("s-0",))  # s-2 never answers
    assert asyncio.run(shard.txns.resolver.resolve()) == 1
    assert shard.store.get("acc", a) is None and shard.txns.intents.holders([("acc", a)]) == {}
    assert shard.txns.status("t1").decision is Decision.ABORT


def test_an_intent_whose_coordinator_is_gone_commits_what_a_decider_accepted(shard: Shard) -> None:
    [a] = keys_of("s-0", 1)
    old_intent(shard, "t1", a, coordinator="s-2", deciders=("s-0",))
    shard.txns.log.accept("t1", ["s-0"])  # the coordinator made COMMIT final here, then died
    assert asyncio.run(shard.txns.resolver.resolve()) == 1
    assert shard.store.get("acc", a).document == {"n": 1} and shard.txns.intents.all() == []


def test_an_operator_resolve_fences_at_once_without_waiting_for_the_timeout(shard: Shard) -> None:
    [a] = keys_of("s-0", 1)
    records = shard.store.prepare([Write("acc", a, {"n": 1})])
    intent = Intent("t1", "s-2", ME.version, Role.PRIMARY, tuple(records), (), "s-0", deciders=("s-0",))
    asyncio.run(shard.txns.intents.put(intent))
    assert asyncio.run(shard.txns.resolver.resolve()) == 0  # young, coordinator silent: wait
    assert asyncio.run(shard.txns.resolver.settle("t1", force=True)) is Decision.ABORT
    assert shard.txns.intents.all() == []
