"""Spec: unfenced pushes to one peer (w=1 replication, repairs) are coalesced — one push in flight
per peer, and what is queued meanwhile leaves together in the next one, each sender answered
as its own push would have been."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry
from themis_shard.cluster.documents.coordinator import DistributedDocuments
from themis_shard.cluster.replication.coalescing import (
    RECORD_OVERHEAD,
    PushCoalescer,
    split_by_size,
    wire_size,
)
from themis_shard.cluster.replication.delivery import Replication
from themis_shard.cluster.replication.fencing import WriteConcern
from themis_shard.cluster.transport.remote import PeerUnavailable
from themis_shard.storage.documents import Replicated, Write
from themis_shard.storage.hints import HintLog

from .fakes import fake_peers, live, plan_of


def r(key: str) -> Replicated:
    return Replicated("c", key, 1, {"k": key})


class GatedPush:
    """Records every push; each waits for the test to open the gate."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.pushes: list[tuple[str, list[str]]] = []
        self.gate = asyncio.Event()
        self.fail = fail

    async def __call__(self, peer: str, groups: list[list[Replicated]]) -> None:
        self.pushes.append((peer, [x.key for group in groups for x in group]))
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail


def test_sends_queued_while_a_push_is_in_flight_leave_together_in_the_next_one():
    async def scenario() -> list[tuple[str, list[str]]]:
        push = GatedPush()
        pushes = PushCoalescer(push)
        first = asyncio.ensure_future(pushes.send("s-1", [r("a")]))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(pushes.send("s-1", [r(k)])) for k in "bcd"]
        other_peer = asyncio.ensure_future(pushes.send("s-2", [r("e")]))
        await asyncio.sleep(0)
        push.gate.set()
        await asyncio.gather(first, *rest, other_peer)
        return push.pushes

    assert asyncio.run(scenario()) == [("s-1", ["a"]), ("s-2", ["e"]), ("s-1", ["b", "c", "d"])]


def test_a_failed_push_fails_every_sender_in_it_with_its_error():
    async def scenario() -> list[BaseException | None]:
        push = GatedPush(fail=PeerUnavailable("s-1", "connect_error", "refused"))
        pushes = PushCoalescer(push)
        sends = [asyncio.ensure_future(pushes.send("s-1", [r(k)])) for k in "ab"]
        await asyncio.sleep(0)
        push.gate.set()
        return await asyncio.gather(*sends, return_exceptions=True)

    failures = asyncio.run(scenario())
    assert all(isinstance(f, PeerUnavailable) and f.reason == "connect_error" for f in failures)


def test_one_push_is_bounded_but_a_senders_records_are_never_split():
    async def scenario() -> list[tuple[str, list[str]]]:
        push = GatedPush()
        pushes = PushCoalescer(push, max_records=3)
        sends = [pushes.enqueue("s-1", [r(f"{k}1"), r(f"{k}2")]) for k in "abc"]
        push.gate.set()
        await asyncio.gather(*sends)
        return push.pushes

    assert asyncio.run(scenario()) == [("s-1", ["a1", "a2"]), ("s-1", ["b1", "b2"]), ("s-1", ["c1", "c2"])]


def test_a_cancelled_sender_does_not_stop_the_others():
    async def scenario() -> list[str]:
        push = GatedPush()
        pushes = PushCoalescer(push)
        gone = asyncio.ensure_future(pushes.send("s-1", [r("a")]))
        kept = asyncio.ensure_future(pushes.send("s-1", [r("b")]))
        await asyncio.sleep(0)
        gone.cancel()
        push.gate.set()
        await kept
        await pushes.settle()
        return [k for _, keys in push.pushes for k in keys]

    assert asyncio.run(scenario()) == ["a", "b"]


def test_concurrent_w1_writes_share_pushes_to_the_other_owner_and_every_copy_is_there(tmp_path, store):
    """Eight writers: the first write's push leaves at once, the others' records wait for it and
    leave together (not eight pushes)."""
    current = live(plan_of(2))
    topo = current.topology
    keys = [k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "s-0"][:8]
    with fake_peers(tmp_path, "s-1") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)

        async def writers() -> None:
            await asyncio.gather(
                *(documents.commit_here([Write("c", k, {"n": 1})], WriteConcern.ONE) for k in keys)
            )
            await documents.settle()

        asyncio.run(writers())
        assert len(peers.calls_to("s-1", "/internal/replicate")) <= 2
        assert all(peers["s-1"].store.get_entry("c", k) == store.get_entry("c", k) for k in keys)


def test_w1_writes_whose_push_failed_are_each_kept_as_a_hint(tmp_path, store):
    current = live(plan_of(2))
    topo = current.topology
    keys = [k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "s-0"][:3]
    with fake_peers(tmp_path, "s-1") as peers:
        peers["s-1"].up = False
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        documents = DistributedDocuments(store, executor, replication, current)

        async def writers() -> None:
            for k in keys:
                await documents.commit_here([Write("c", k, {"n": 1})], WriteConcern.ONE)
            await documents.settle()

        asyncio.run(writers())
        assert replication.hints.pending() == {"s-1": len(keys)}


@pytest.mark.parametrize("n", [1, 3])
def test_settle_returns_at_once_when_nothing_was_sent(n):
    async def scenario() -> None:
        pushes = PushCoalescer(GatedPush())
        for _ in range(n):
            await asyncio.wait_for(pushes.settle(), 1)

    asyncio.run(scenario())


def test_one_push_is_bounded_in_bytes_too():
    """Far under a peer's request limit: a refused push of many writes' records would make
    every one of them a hint."""

    def big(key: str) -> Replicated:
        return Replicated("c", key, 1, {"text": "x" * 1000})

    async def scenario() -> list[tuple[str, list[str]]]:
        push = GatedPush()
        pushes = PushCoalescer(push, max_bytes=2_500)
        sends = [pushes.enqueue("s-1", [big(k)]) for k in "abcde"]
        push.gate.set()
        await asyncio.gather(*sends)
        return push.pushes

    assert asyncio.run(scenario()) == [("s-1", ["a", "b"]), ("s-1", ["c", "d"]), ("s-1", ["e"])]


def test_a_prepared_records_size_is_its_json_and_a_repairs_is_measured():
    prepared = Replicated("c", "k", 1, {"n": 1}, body=b'{"n":1}')
    repair = Replicated("c", "k", 1, {"n": 1})
    tombstone = Replicated("c", "k", 2, None)
    assert wire_size([prepared]) == wire_size([repair]) == RECORD_OVERHEAD + len("ck") + len(b'{"n":1}')
    assert wire_size([tombstone]) == RECORD_OVERHEAD + len("ck")


def test_a_push_too_large_for_one_request_goes_in_several_in_order(tmp_path, store, monkeypatch):
    """Hints of large documents, replayed: each request stays under its share, all arrive."""
    from themis_shard.cluster.replication import delivery

    monkeypatch.setattr(delivery, "PUSH_MAX_BYTES", 2_600)
    current = live(plan_of(2))
    with fake_peers(tmp_path, "s-1") as peers:
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        records = [Replicated("c", f"k{i}", 1, {"text": "x" * 1000}) for i in range(5)]
        for r in records:
            asyncio.run(replication.hints.add("s-1", [r]))
        asyncio.run(replication.replay_hints())
        assert len(peers.calls_to("s-1", "/internal/replicate")) == 3  # 2 + 2 + 1
        assert not any(replication.hints.pending().values())
        assert all(peers["s-1"].store.get("c", r.key).document == r.document for r in records)


def test_records_are_split_into_runs_of_whole_groups_by_size_and_a_large_group_goes_alone():
    small = [Replicated("c", "a", 1, {"n": 1})]
    large = [Replicated("c", "b", 1, {"text": "x" * 400}), Replicated("c", "c", 1, {"text": "x" * 400})]
    runs = split_by_size([small, small, large, small], 700)
    assert [[r.key for r in run] for run in runs] == [["a", "a"], ["b", "c"], ["a"]]


def test_a_transactions_records_reach_a_peer_in_one_request_however_large(tmp_path, store, monkeypatch):
    """A w=1 transaction larger than a push's share is one request, so the peer installs all of
    it or none; hints replay each kept write whole as well."""
    from themis_shard.cluster.replication import delivery

    monkeypatch.setattr(delivery, "PUSH_MAX_BYTES", 2_600)
    current = live(plan_of(2))
    with fake_peers(tmp_path, "s-1") as peers:
        installs: list[int] = []  # records per install on the peer, one per request
        peer_store = peers["s-1"].store
        apply = peer_store.apply_replicated
        monkeypatch.setattr(
            peer_store, "apply_replicated", lambda items: installs.append(len(items)) or apply(items)
        )
        executor = peers.executor(current)
        replication = Replication(executor, HintLog(store), current, CollectorRegistry())
        transaction = [Replicated("c", f"t{i}", 1, {"text": "x" * 1000}) for i in range(4)]
        asyncio.run(replication.push("s-1", [transaction], retries=0))
        assert installs == [4]
        asyncio.run(
            replication.hints.add(
                "s-1", [Replicated("c", f"h{i}", 1, {"text": "x" * 1000}) for i in range(3)]
            )
        )
        asyncio.run(replication.hints.add("s-1", [Replicated("c", "single", 1, {"n": 1})]))
        asyncio.run(replication.replay_hints())
        assert installs == [4, 3, 1]
        assert peer_store.count("c") == 8
