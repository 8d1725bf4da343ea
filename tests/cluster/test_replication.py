"""Spec: replication — a write's versions reach its other owners now or as a durable hint, and
hints are replayed, oldest first, once the owner answers again (versions decide every race)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest
from prometheus_client import CollectorRegistry
from themis_shard.cluster.documents.coordinator import DistributedDocuments
from themis_shard.cluster.replication.delivery import Replication, hint_admitted, worth_replaying
from themis_shard.cluster.replication.fencing import WriteConcern
from themis_shard.errors import Conflict, Unavailable
from themis_shard.storage.documents import Replicated, Write
from themis_shard.storage.hints import HintLog
from themis_shard.storage.inflight import InflightLog
from themis_shard.storage.record_wire import decode_items

from .fakes import fake_peers, live, plan_of


def v(key: str, version: int, **doc) -> Replicated:
    return Replicated("c", key, version, doc or {"k": key})


def test_a_reachable_peer_gets_the_versions_and_nothing_is_hinted(tmp_path, store) -> None:
    current = live(plan_of(2))
    with fake_peers(tmp_path, "s-1") as peers:
        replication = Replication(peers.executor(current), HintLog(store), current, CollectorRegistry())
        asyncio.run(replication.send("s-1", [v("a", 3), v("b", 1)]))
        assert peers["s-1"].store.get("c", "a").version == 3
        assert replication.hints.pending() == {}


def test_an_unreachable_peer_gets_a_hint_that_replay_delivers_when_it_is_back(tmp_path, store) -> None:
    current = live(plan_of(2))
    with fake_peers(tmp_path, "s-1") as peers:
        peers["s-1"].up = False
        replication = Replication(peers.executor(current), HintLog(store), current, CollectorRegistry())

        async def go() -> None:
            await replication.send("s-1", [v("a", 2)])
            assert replication.hints.pending() == {"s-1": 1}
            await replication.replay_hints()  # still down: the hint stays
            assert replication.hints.pending() == {"s-1": 1}
            peers["s-1"].up = True
            replication.executor.breakers.get("s-1").record_success()
            await replication.replay_hints()

        asyncio.run(go())
        assert peers["s-1"].store.get("c", "a").version == 2
        assert replication.hints.peers() == []


def test_a_replayed_hint_never_overwrites_a_newer_version(tmp_path, store) -> None:
    current = live(plan_of(2))
    with fake_peers(tmp_path, "s-1") as peers:
        hints = HintLog(store)
        asyncio.run(hints.add("s-1", [v("a", 1, old=True)]))
        peers["s-1"].store.apply_replicated([v("a", 5, new=True)])
        asyncio.run(Replication(peers.executor(current), hints, current, CollectorRegistry()).replay_hints())
        assert peers["s-1"].store.get("c", "a").document == {"new": True}
        assert hints.peers() == []


def test_hints_for_a_peer_that_left_the_plan_are_kept_not_replayed() -> None:
    assert worth_replaying("s-1", ["s-0", "s-1"], frozenset())
    assert not worth_replaying("s-9", ["s-0", "s-1"], frozenset())
    assert not worth_replaying("s-1", ["s-0", "s-1"], frozenset({"s-1"}))  # breaker open


def _raid6_key(topo) -> str:
    return next(k for k in (f"k{i}" for i in range(100)) if topo.owners("c", k)[0] == "s-0")


def test_a_majority_write_reaches_every_other_owner_or_leaves_a_hint_for_it(tmp_path, store) -> None:
    current = live(plan_of(4, "raid6"))  # three copies of each key
    topo = current.topology
    key = _raid6_key(topo)
    up, down = [o for o in topo.owners("c", key) if o != "s-0"]
    with fake_peers(tmp_path, "s-1", "s-2", "s-3") as peers:
        peers[down].up = False
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        [change] = asyncio.run(documents.commit_here([Write("c", key, {"x": 1})], WriteConcern.MAJORITY))
        assert peers[up].store.get("c", key).version == change.version == 1
        assert store.get("c", key).document == {"x": 1}
        assert replication.hints.pending() == {down: 1}
        assert not [c for p in peers.peers for c in peers.calls_to(p) if p not in (up, down)]


def test_a_lone_shards_write_awaits_its_fsync_without_a_worker_thread(tmp_path, store, monkeypatch) -> None:
    import anyio.to_thread

    def refuse(*args, **kwargs):
        raise AssertionError("a worker thread was asked for")

    current = live(plan_of(1, "raid0"))
    with fake_peers(tmp_path) as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        monkeypatch.setattr(anyio.to_thread, "run_sync", refuse)
        [change] = asyncio.run(documents.commit_here([Write("c", "k", {"x": 1})]))
        assert change.version == 1 and store.get("c", "k").document == {"x": 1}


def test_a_write_that_cannot_reach_every_owner_fails_by_default_and_is_never_served(tmp_path, store) -> None:
    current = live(plan_of(4, "raid6"))
    topo = current.topology
    key = _raid6_key(topo)
    up, down = [o for o in topo.owners("c", key) if o != "s-0"]
    with fake_peers(tmp_path, "s-1", "s-2", "s-3") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        asyncio.run(documents.commit_here([Write("c", key, {"x": 1})]))
        peers[down].up = False
        with pytest.raises(Unavailable) as failed:
            asyncio.run(documents.commit_here([Write("c", key, {"x": "lost"})]))
        assert failed.value.status == 503 and failed.value.code == "replicas_unavailable"
        # The owner that took the failed record holds the burn instead: the old document, outranking it.
        for holder in (store, peers[up].store):
            assert holder.get("c", key).document == {"x": 1}
        assert peers[up].store.get_entry("c", key) == store.get_entry("c", key)
        peers[down].up = True
        executor.breakers.get(down).record_success()
        asyncio.run(replication.replay_hints())  # the down owner gets the burn, never the failed write
        assert peers[down].store.get_entry("c", key) == store.get_entry("c", key)


def test_a_burn_takes_a_version_of_its_own_so_no_write_lands_on_top_of_the_failed_one(
    tmp_path, store
) -> None:
    """A reader may have seen the failed record on the owner that took it (before the burn
    reached it, or reading through a replica): an If-Match on that record's version must be
    refused, else the new write is built on a document that never committed."""
    current = live(plan_of(4, "raid6"))
    topo = current.topology
    key = _raid6_key(topo)
    _, down = [o for o in topo.owners("c", key) if o != "s-0"]
    with fake_peers(tmp_path, "s-1", "s-2", "s-3") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        asyncio.run(documents.commit_here([Write("c", key, {"balance": 100})]))
        peers[down].up = False
        with pytest.raises(Unavailable):
            asyncio.run(documents.commit_here([Write("c", key, {"balance": 90}, if_version=1)]))
        burned = store.get_entry("c", key)
        assert (burned.version, burned.document) == (3, {"balance": 100})
        peers[down].up = True
        executor.breakers.get(down).record_success()
        with pytest.raises(Conflict):  # built on the failed {"balance": 90} at version 2
            asyncio.run(documents.commit_here([Write("c", key, {"balance": 80}, if_version=2)]))
        [change] = asyncio.run(documents.commit_here([Write("c", key, {"balance": 95}, if_version=3)]))
        assert change.version == 4


def test_a_write_no_owner_took_leaves_nothing_anywhere(tmp_path, store) -> None:
    current = live(plan_of(2))
    topo = current.topology
    key = next(k for k in (f"k{i}" for i in range(100)) if topo.owners("c", k)[0] == "s-0")
    with fake_peers(tmp_path, "s-1") as peers:
        peers["s-1"].up = False
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        with pytest.raises(Unavailable):
            asyncio.run(documents.commit_here([Write("c", key, {"x": 1})]))
        assert store.version("c", key) == 0 and replication.hints.pending() == {}

        async def w1() -> list:
            changes = await documents.commit_here([Write("c", key, {"x": 1})], WriteConcern.ONE)
            await documents.settle()
            return changes

        [change] = asyncio.run(w1())
        assert change.version == 1 and replication.hints.pending() == {"s-1": 1}


def test_a_w1_write_is_acknowledged_from_the_coordinators_copy_and_replicated_after(tmp_path, store) -> None:
    current = live(plan_of(2))
    topo = current.topology
    key = next(k for k in (f"k{i}" for i in range(100)) if topo.owners("c", k)[0] == "s-0")
    with fake_peers(tmp_path, "s-1") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)

        async def scenario() -> None:
            [change] = await documents.commit_here([Write("c", key, {"x": 1})], WriteConcern.ONE)
            # durable here when acknowledged; the other owner is not waited for
            assert store.get("c", key).version == change.version == 1
            assert not peers.calls_to("s-1")
            await documents.settle()

        asyncio.run(scenario())
        assert peers["s-1"].store.get_entry("c", key) == store.get_entry("c", key)
        assert replication.hints.pending() == {}


def test_a_coordinator_behind_an_owner_catches_up_and_writes_on_top_instead_of_under(tmp_path, store) -> None:
    current = live(plan_of(2))
    topo = current.topology
    key = next(k for k in (f"k{i}" for i in range(100)) if topo.owners("c", k)[0] == "s-0")
    with fake_peers(tmp_path, "s-1") as peers:
        # the owner holds version 3 that never reached this coordinator (say, a pull not done yet)
        peers["s-1"].store.apply_replicated([Replicated("c", key, 3, {"newer": True}, 5, "s-0")])
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        with pytest.raises(Unavailable) as refused:
            asyncio.run(documents.commit_here([Write("c", key, {"x": 1})]))
        assert refused.value.code == "epoch_changed"  # nothing applied anywhere; retryable
        assert store.get("c", key).document == {"newer": True}  # caught up
        with pytest.raises(Conflict):  # a condition on the stale version fails honestly
            asyncio.run(documents.commit([Write("c", key, {"x": 1}, if_version=1)]))
        [change] = asyncio.run(documents.commit([Write("c", key, {"x": 2})]))
        assert change.version == 4 and peers["s-1"].store.get("c", key).document == {"x": 2}


def test_hints_past_the_byte_budget_are_dropped_and_counted(tmp_path, store) -> None:
    current = live(plan_of(2))
    with fake_peers(tmp_path, "s-1") as peers:
        peers["s-1"].up = False
        registry = CollectorRegistry()
        one = HintLog.size_of([v("a", 1)])
        replication = Replication(
            peers.executor(current), HintLog(store), current, registry, hint_budget_bytes=2 * one
        )
        for i in range(3):
            asyncio.run(replication.send("s-1", [v("a", i + 1)]))
        assert replication.hints.pending() == {"s-1": 2}
        assert replication.hints.pending_bytes() == {"s-1": 2 * one}
        assert registry.get_sample_value("themis_hints_dropped_total", {"peer": "s-1"}) == 1


def test_the_hint_budget_admits_up_to_its_bytes() -> None:
    assert hint_admitted(0, 10, 10) and not hint_admitted(1, 10, 10)
    assert hint_admitted(10**12, 10, 0)  # 0: unbounded


class ActiveHandoff:
    """A resharding in progress whose previous owner still holds the key at version 4."""

    def __init__(self) -> None:
        self.fetched: list[tuple[str, str]] = []
        self.handoff_active = True

    def previous_ring(self):
        return None

    async def fetch_previous(self, collection: str, key: str) -> None:
        self.fetched.append((collection, key))


def test_during_a_handoff_a_write_to_an_unknown_key_first_asks_the_previous_owners(tmp_path, store) -> None:
    current = live(plan_of(1, "raid0"))
    handoff = ActiveHandoff()
    with fake_peers(tmp_path) as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current, handoff=handoff)
        store.commit([Write("c", "known", {"x": 0})])
        asyncio.run(documents.commit_here([Write("c", "new", {"x": 1}), Write("c", "known", {"x": 2})]))
    assert handoff.fetched == [("c", "new")]


def _split_pair(topo) -> tuple[str, str]:
    """Two keys s-0 coordinates whose other owners differ (so they travel in two messages)."""
    mine = [k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "s-0"]
    a = mine[0]
    b = next(k for k in mine if topo.owners("c", k)[1] != topo.owners("c", a)[1])
    return a, b


@contextlib.contextmanager
def logging_coordinator(tmp_path, store, current):
    """(peers, coordinator, its in-flight log): s-0 coordinating with s-1 and s-2 as fakes."""
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        inflight = InflightLog(store)
        yield peers, DistributedDocuments(store, executor, replication, current, inflight=inflight), inflight


def test_a_transaction_sent_to_several_owners_leaves_no_inflight_entry(tmp_path, store) -> None:
    current = live(plan_of(3))
    a, b = _split_pair(current.topology)
    with logging_coordinator(tmp_path, store, current) as (peers, documents, inflight):
        asyncio.run(documents.commit_here([Write("c", a, {"n": 1}), Write("c", b, {"n": 1})]))
        assert inflight.entries() == []
        assert all(
            peers[o].store.get("c", k).document == {"n": 1}
            for k in (a, b)
            for o in ("s-1", "s-2")
            if o in current.topology.owners("c", k)
        )


def _transfer_in_flight(peers, documents, inflight, a: str, b: str) -> list[Replicated]:
    """Balances of 100 on ``a`` and ``b``; then a transfer of 10 logged in flight and delivered
    to ``a``'s other owner only (the debit). Answers the transfer's burns."""
    store, topo = documents.store, documents.topology
    asyncio.run(documents.commit_here([Write("c", a, {"balance": 100}), Write("c", b, {"balance": 100})]))
    records, previous = store.prepare_with_previous(
        [Write("c", a, {"balance": 90}), Write("c", b, {"balance": 110})]
    )
    burns = documents._burns_of(topo, records, previous)
    inflight.add(records, burns)
    peers[topo.owners("c", a)[1]].store.apply_replicated([records[0]])
    return burns


def test_a_transaction_half_sent_when_its_coordinator_died_is_completed_everywhere_at_restart(
    tmp_path, store
) -> None:
    """The crash: one owner took its part of a transfer (the debit), the other never got the
    credit, the coordinator installed nothing and answered nothing. At restart the logged
    records are rolled forward: the whole transfer, everywhere (never half of it)."""
    current = live(plan_of(3))
    topo = current.topology
    a, b = _split_pair(topo)
    with logging_coordinator(tmp_path, store, current) as (peers, documents, inflight):
        _transfer_in_flight(peers, documents, inflight, a, b)  # the debit delivered, then the crash
        repairs = asyncio.run(documents.recover_inflight())
        asyncio.run(documents.replicate_repairs(repairs))
        assert inflight.entries() == []
        for k, balance in ((a, 90), (b, 110)):
            for holder in (store, peers[topo.owners("c", k)[1]].store):
                entry = holder.get_entry("c", k)
                assert (entry.version, entry.document) == (2, {"balance": balance})


def test_a_failed_write_whose_burn_is_installed_is_not_rolled_forward(tmp_path, store) -> None:
    """The write failed and was burned here (the previous document, one version up) before the
    crash left its entry behind: at restart the burn still wins, here and on the owners."""
    current = live(plan_of(3))
    topo = current.topology
    a, b = _split_pair(topo)
    with logging_coordinator(tmp_path, store, current) as (peers, documents, inflight):
        burns = _transfer_in_flight(peers, documents, inflight, a, b)
        store.apply_replicated(burns)  # the failure's burn, then the crash before the entry went

        asyncio.run(documents.replicate_repairs(asyncio.run(documents.recover_inflight())))
        assert inflight.entries() == []
        for k in (a, b):
            for holder in (store, peers[topo.owners("c", k)[1]].store):
                entry = holder.get_entry("c", k)
                assert (entry.version, entry.document) == (3, {"balance": 100})


def test_a_committed_write_whose_unsynced_install_was_lost_is_installed_at_restart(tmp_path, store) -> None:
    """The owners took it and it was acknowledged; the coordinator's own install (not fsynced:
    its entry held the records) died with the machine. At restart the entry installs it."""
    current = live(plan_of(3))
    topo = current.topology
    key = next(k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "s-0")
    with logging_coordinator(tmp_path, store, current) as (peers, documents, inflight):
        records, previous = store.prepare_with_previous([Write("c", key, {"n": 1})])
        inflight.add(records, documents._burns_of(topo, records, previous))
        peers[topo.owners("c", key)[1]].store.apply_replicated(records)

        asyncio.run(documents.replicate_repairs(asyncio.run(documents.recover_inflight())))
        assert inflight.entries() == []
        assert store.get_entry("c", key).document == {"n": 1}


def test_a_write_answered_as_failed_leaves_no_entry_to_roll_forward(tmp_path, store) -> None:
    """The other owner is down: the write fails, and its in-flight entry (logged while the
    records travelled) is gone before the failure is answered, so no restart can apply it."""
    current = live(plan_of(3))
    topo = current.topology
    key = next(k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "s-0")
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        peers[topo.owners("c", key)[1]].up = False
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        inflight = InflightLog(store)
        documents = DistributedDocuments(store, executor, replication, current, inflight=inflight)
        with pytest.raises(Unavailable):
            asyncio.run(documents.commit_here([Write("c", key, {"n": 1})]))
        assert inflight.entries() == []
        assert asyncio.run(documents.recover_inflight()) == []
        assert store.get("c", key) is None


def test_a_coordinated_write_leaves_no_inflight_entry_and_its_copy_everywhere(tmp_path, store) -> None:
    current = live(plan_of(3))
    topo = current.topology
    key = next(k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "s-0")
    with logging_coordinator(tmp_path, store, current) as (peers, documents, inflight):
        [change] = asyncio.run(documents.commit_here([Write("c", key, {"n": 1})]))
        assert change.version == 1 and inflight.entries() == []
        assert store.get_entry("c", key) == peers[topo.owners("c", key)[1]].store.get_entry("c", key)


def test_a_transaction_installed_before_the_crash_is_sent_again_at_restart(tmp_path, store) -> None:
    current = live(plan_of(3))
    topo = current.topology
    a, b = _split_pair(topo)
    with logging_coordinator(tmp_path, store, current) as (peers, documents, inflight):
        records, previous = store.prepare_with_previous([Write("c", a, {"n": 1}), Write("c", b, {"n": 1})])
        inflight.add(records, documents._burns_of(topo, records, previous))
        store.apply_replicated(records)  # installed here, then the crash before the entry went

        asyncio.run(documents.replicate_repairs(asyncio.run(documents.recover_inflight())))
        assert inflight.entries() == []
        for k in (a, b):
            assert peers[topo.owners("c", k)[1]].store.get_entry("c", k) == store.get_entry("c", k)


class RecordingTwoPhase:
    """The two-phase-commit seam (``CrossShardCommit``), recording what it was asked to commit."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    async def run(self, writes, checks, concern):
        self.runs.append([w.key for w in writes])
        return []


def test_a_transaction_whose_keys_share_a_primary_but_not_their_owners_commits_by_2pc(
    tmp_path, store
) -> None:
    current = live(plan_of(3))
    a, b = _split_pair(current.topology)
    same = next(
        k
        for k in (f"k{i}" for i in range(200))
        if k != a and current.topology.owners("c", k) == current.topology.owners("c", a)
    )
    two_phase = RecordingTwoPhase()
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current, cross_shard=two_phase)
        asyncio.run(documents.commit([Write("c", a, {"n": 1}), Write("c", b, {"n": 1})]))
        assert two_phase.runs == [[a, b]] and store.get("c", a) is None
        asyncio.run(documents.commit([Write("c", a, {"n": 2}), Write("c", same, {"n": 2})]))
        assert two_phase.runs == [[a, b]]  # one step, here
        assert store.get("c", a).document == store.get("c", same).document == {"n": 2}


def test_reads_go_to_the_primary_only_unless_replica_fallback_is_asked_for(tmp_path, store) -> None:
    current = live(plan_of(3))
    key = next(k for k in (f"k{i}" for i in range(200)) if current.topology.owners("c", k) == ["s-1", "s-2"])
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        peers["s-2"].store.apply_replicated([v(key, 1, n=1)])
        peers["s-1"].up = False  # the primary
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        available = DistributedDocuments(store, executor, replication, current, read_from_replicas=True)
        assert asyncio.run(available.get("c", key)).document == {"n": 1}
        primary_only = DistributedDocuments(store, executor, replication, current)
        with pytest.raises(Unavailable) as refused:
            asyncio.run(primary_only.get("c", key))
        assert refused.value.code == "primary_unavailable"


def _racing_repair(peers, owner: str, coordinator_store, fail: bool) -> None:
    """``owner`` takes the coordinated record, and anti-entropy copies it back into the
    coordinator's store before the answer arrives (then the answer is lost when ``fail``)."""
    handle = peers[owner].handle

    def racing(method: str, path: str, request):
        answer = handle(method, path, request)
        if path == "/internal/replicate/batch":
            for message in json.loads(request.content)["messages"]:
                coordinator_store.apply_replicated(decode_items(message["items"]))
            if fail:
                return httpx.Response(500, json={"error": {"code": "internal", "message": "lost"}})
        if path == "/internal/replicate" and b'"fence"' in request.content:
            coordinator_store.apply_replicated(decode_items(json.loads(request.content)["items"]))
            if fail:
                return httpx.Response(500, json={"error": {"code": "internal", "message": "lost"}})
        return answer

    peers[owner].handle = racing


@pytest.mark.parametrize("fail", [False, True])
def test_a_repair_racing_a_write_neither_fails_a_committed_one_nor_keeps_a_failed_one(
    tmp_path, store, fail
) -> None:
    current = live(plan_of(2))
    key = next(k for k in (f"k{i}" for i in range(100)) if current.topology.owners("c", k)[0] == "s-0")
    with fake_peers(tmp_path, "s-1") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        asyncio.run(documents.commit_here([Write("c", key, {"balance": 100})]))
        _racing_repair(peers, "s-1", store, fail)
        write = [Write("c", key, {"balance": 90}, if_version=1)]
        if fail:
            with pytest.raises(Unavailable):
                asyncio.run(documents.commit_here(write))
            assert store.get("c", key) == peers["s-1"].store.get("c", key)
            assert (store.get("c", key).version, store.get("c", key).document) == (3, {"balance": 100})
        else:
            [change] = asyncio.run(documents.commit_here(write))
            assert change.version == 2 and store.get("c", key).document == {"balance": 90}


def test_a_primary_read_is_served_only_by_the_keys_primary_while_it_holds_its_lease(store) -> None:
    from themis_core.plan import FailoverSettings
    from themis_shard.cluster.replication.lease import AuthorityLease

    current = live(plan_of(3, failover=FailoverSettings()), "s-0")
    topo = current.topology
    mine = next(k for k in (f"k{i}" for i in range(500)) if topo.owners("c", k)[0] == "s-0")
    theirs = next(k for k in (f"k{i}" for i in range(500)) if topo.owners("c", k)[1:] == ["s-0"])
    store.apply_replicated([v(mine, 1), v(theirs, 1)])
    now = [0.0]
    lease = AuthorityLease(clock=lambda: now[0])
    docs = DistributedDocuments(
        store, None, Replication(None, HintLog(store), current, CollectorRegistry()), current, lease=lease
    )
    with pytest.raises(Unavailable) as lapsed:  # no lease granted yet
        docs.primary_read("c", mine, topo.epoch)
    assert lapsed.value.code == "lease_expired"
    lease.renew(2.0)
    assert docs.primary_read("c", mine, topo.epoch).version == 1
    with pytest.raises(Conflict) as refused:  # a replica never answers as the primary
        docs.primary_read("c", theirs, topo.epoch)
    assert refused.value.code == "not_coordinator"
    now[0] = 2.5
    with pytest.raises(Unavailable):
        docs.primary_read("c", mine, topo.epoch)


def test_a_write_stops_waiting_for_an_owner_a_newer_plan_took_out_of_the_in_sync_set(tmp_path, store) -> None:
    """A paused owner would hold the write until the request timeout; a plan that fences it
    ends the wait at once. The write is refused and its version burned here, so the record the
    paused owner may still take is outranked when that owner catches up."""
    from themis_core.plan import FailoverSettings, with_in_sync
    from themis_shard.cluster.placement.owners import Topology

    plan = plan_of(3, failover=FailoverSettings())
    current = live(plan)
    key = next(k for k in (f"k{i}" for i in range(200)) if current.topology.owners("c", k) == ["s-0", "s-1"])
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        peers["s-1"].paused = True
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)

        async def fence_while_waiting() -> BaseException | None:
            write = asyncio.ensure_future(documents.commit_here([Write("c", key, {"x": 1})]))
            await asyncio.sleep(0.2)
            assert not write.done()  # waiting on the paused owner
            current.topology = Topology.of(with_in_sync(plan, ("s-1",), ()), "s-0")
            done, _ = await asyncio.wait({write}, timeout=2)
            assert done, "the write kept waiting for a fenced owner"
            return write.exception()

        failure = asyncio.run(fence_while_waiting())
        assert isinstance(failure, Unavailable) and failure.status == 503
        assert failure.code == "replicas_unavailable" and "was not applied" in failure.message
        burned = store.get_entry("c", key)  # outranks the record the paused owner may still take
        assert (burned.version, burned.document) == (2, None)


def test_a_committed_write_overtaken_here_by_a_version_written_on_top_of_it_is_answered_as_applied(
    tmp_path, store
) -> None:
    """The other owner takes the record and, its primary now (a failover), writes the next
    version on top of it, which reaches this coordinator before its own install: the write was
    applied (an owner held it, a newer version builds on it) and is answered so, never as a
    conflict; the newer version stays."""
    current = live(plan_of(2))
    key = next(k for k in (f"k{i}" for i in range(100)) if current.topology.owners("c", k)[0] == "s-0")
    with fake_peers(tmp_path, "s-1") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)
        asyncio.run(documents.commit_here([Write("c", key, {"balance": 100})]))
        handle = peers["s-1"].handle

        def written_on_top(method: str, path: str, request):
            answer = handle(method, path, request)
            if path == "/internal/replicate/batch":
                on_top = Replicated("c", key, 3, {"balance": 80}, store.clock.now() + 10**9, "s-1")
                peers["s-1"].store.apply_replicated([on_top])
                store.apply_replicated([on_top])
            return answer

        peers["s-1"].handle = written_on_top
        [change] = asyncio.run(documents.commit_here([Write("c", key, {"balance": 90}, if_version=1)]))
        assert change.version == 2 and change.document == {"balance": 90}
        for copy in (store.get("c", key), peers["s-1"].store.get("c", key)):
            assert (copy.version, copy.document) == (3, {"balance": 80})


def test_a_write_and_a_read_stop_waiting_for_a_primary_a_newer_plan_took_out_of_the_in_sync_set(
    tmp_path, store
) -> None:
    """A write or a read this shard sends to the key's primary would wait for a paused primary
    until the request timeout. A plan that fences it ends the wait at once: the write answers
    that its outcome is not known (it was sent), and the read goes to the new primary."""
    from themis_core.plan import FailoverSettings, with_in_sync
    from themis_shard.cluster.placement.owners import Topology

    plan = plan_of(3, failover=FailoverSettings())
    current = live(plan)
    key = next(k for k in (f"k{i}" for i in range(200)) if current.topology.owners("c", k) == ["s-1", "s-2"])
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        peers["s-2"].store.apply_replicated([Replicated("c", key, 1, {"x": 0}, 1, "s-1")])
        peers["s-1"].paused = True
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)

        async def fence_while_waiting():
            write = asyncio.ensure_future(documents.commit([Write("c", key, {"x": 1})]))
            read = asyncio.ensure_future(documents.get("c", key))
            await asyncio.sleep(0.2)
            assert not write.done() and not read.done()  # waiting on the paused primary
            current.topology = Topology.of(with_in_sync(plan, ("s-1",), ()), "s-0")
            done, _ = await asyncio.wait({write, read}, timeout=10)  # the paused primary never answers
            assert done == {write, read}, "kept waiting for a fenced primary"
            return write.exception(), read.result()

        failure, found = asyncio.run(fence_while_waiting())
    assert isinstance(failure, Unavailable) and failure.code == "write_outcome_unknown"
    assert "out of the in-sync set" in failure.message
    assert (found.version, found.document) == (1, {"x": 0})  # from s-2, the primary now


def test_settling_returns_when_the_last_hint_was_written_in_the_same_turn(store) -> None:
    """``settle`` waits for the hints being written; one that finished just before (its task
    leaves the set at the loop's next turn) must not make it spin and hold the event loop."""
    import threading

    current = live(plan_of(2))

    async def scenario() -> None:
        replication = Replication(None, HintLog(store), current, CollectorRegistry())  # type: ignore[arg-type]

        async def hinted() -> None:
            return None

        task = asyncio.create_task(hinted())
        replication._hinting.add(task)
        task.add_done_callback(replication._hinting.discard)
        await asyncio.sleep(0)  # the hint is written; its task leaves the set at the next turn
        assert task.done() and task in replication._hinting
        await replication.settle()

    finished = threading.Event()
    threading.Thread(target=lambda: (asyncio.run(scenario()), finished.set()), daemon=True).start()
    assert finished.wait(30), "settling spun forever on a hint already written"
