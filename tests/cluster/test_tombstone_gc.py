"""Spec: tombstones are collected once below every member's watermark and held by every owner;
a pending hint, a newer write, an owner without the tombstone or an unreachable member keeps it."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry
from themis_shard.cluster.replication.tombstone_gc import TombstoneGC, hlc_span, shard_watermark, to_collect
from themis_shard.storage.digests import RecordDigests
from themis_shard.storage.documents import DocumentStore, Replicated, Tombstone
from themis_shard.storage.hints import HintLog
from themis_shard.storage.stamps import HybridClock

from .fakes import fake_peers, live, plan_of

NOW_MS = 10_000_000
OLD = hlc_span(1000)  # stamped at 1000 s, long before NOW - grace


def test_a_shard_watermark_is_its_oldest_hint_or_now_minus_the_grace() -> None:
    assert shard_watermark(None, 1000, 100) == 900
    assert shard_watermark(500, 1000, 100) == 500
    assert shard_watermark(950, 1000, 100) == 900


def test_only_the_primary_collects_and_only_below_the_watermark() -> None:
    topo = live(plan_of(2)).topology
    mine = next(k for k in (f"k{i}" for i in range(100)) if topo.owners("c", k)[0] == "s-0")
    theirs = next(k for k in (f"k{i}" for i in range(100)) if topo.owners("c", k)[0] == "s-1")
    ts = [Tombstone("c", mine, 2, None, 5, "s-0"), Tombstone("c", theirs, 2, None, 5, "s-1")]
    assert to_collect(ts, 6, topo) == [ts[0]]
    assert to_collect(ts, 5, topo) == []


def _gc(store, hints, executor, current) -> TombstoneGC:
    return TombstoneGC(
        store, RecordDigests(store), hints, executor, current, CollectorRegistry(), grace_s=60, interval_s=60
    )


def test_a_tombstone_every_owner_holds_is_collected_everywhere_and_nothing_else(tmp_path, store) -> None:
    store.clock = HybridClock(lambda: NOW_MS)
    current = live(plan_of(2))
    topo = current.topology
    keys = [k for k in (f"k{i}" for i in range(200)) if topo.owners("c", k)[0] == "s-0"][:4]
    with fake_peers(tmp_path, "s-1") as peers:
        other = peers["s-1"].store
        other.clock = HybridClock(lambda: NOW_MS)
        peers["s-1"].gc = _gc(other, HintLog(other), None, live(plan_of(2), "s-1"))
        gone, live_doc, replica_lacks, rewritten = keys
        for holder in (store, other):
            holder.apply_replicated([Replicated("c", gone, 2, None, OLD, "s-0")])
            holder.apply_replicated([Replicated("c", live_doc, 1, {"a": 1}, OLD, "s-0")])
            holder.apply_replicated([Replicated("c", rewritten, 2, None, OLD, "s-0")])
        store.apply_replicated([Replicated("c", replica_lacks, 2, None, OLD, "s-0")])
        other.apply_replicated([Replicated("c", replica_lacks, 1, {"old": True}, OLD - 1, "s-0")])
        store.apply_replicated([Replicated("c", rewritten, 3, {"new": True}, OLD + 1, "s-0")])  # here only
        executor = peers.executor(current)
        gc = _gc(store, HintLog(store), executor, current)
        assert asyncio.run(gc.collect()) == 1
        assert store.get_entry("c", gone) is None and other.get_entry("c", gone) is None
        assert store.get_entry("c", replica_lacks).document is None  # kept: s-1 still has the old doc
        assert store.get("c", live_doc) is not None and store.get("c", rewritten).document == {"new": True}

        # A pending hint older than the tombstone holds collection back; so does a member that is down.
        store.apply_replicated([Replicated("c", gone, 4, None, OLD + 10, "s-0")])
        other.apply_replicated([Replicated("c", gone, 4, None, OLD + 10, "s-0")])
        asyncio.run(gc.hints.add("s-1", [Replicated("c", "x", 1, {}, OLD + 5, "s-0")]))
        assert asyncio.run(gc.collect()) == 0
        asyncio.run(gc.hints.done("s-1", gc.hints.take("s-1")[0]))
        peers["s-1"].up = False
        assert asyncio.run(gc.collect()) == 0


def test_the_oldest_hint_is_known_as_hints_come_and_go_and_after_a_restart(tmp_path) -> None:
    store = DocumentStore(tmp_path / "db")
    hints = HintLog(store)
    assert hints.oldest_hlc() is None
    asyncio.run(
        hints.add("s-1", [Replicated("c", "a", 1, {}, 50, "s-0"), Replicated("c", "b", 1, {}, 30, "s-0")])
    )
    asyncio.run(hints.add("s-2", [Replicated("c", "c", 1, {}, 40, "s-0")]))
    assert hints.oldest_hlc() == 30
    asyncio.run(hints.done("s-1", hints.take("s-1")[0]))
    assert hints.oldest_hlc() == 40
    del hints  # its column-family handles hold the database's lock
    store.close()
    reopened = DocumentStore(tmp_path / "db")
    try:
        assert HintLog(reopened).oldest_hlc() == 40
    finally:
        reopened.close()


def test_a_hint_on_its_way_to_disk_already_holds_the_watermark_and_a_failed_one_does_not(
    tmp_path, monkeypatch
) -> None:
    """The watermark is read by tombstone GC at any time: a hint whose write is in progress
    counts (a tombstone it could resurrect must stay), and one whose write failed does not."""
    store = DocumentStore(tmp_path / "db")
    hints = HintLog(store)
    seen: list[int | None] = []
    write = store.write_durably

    async def watching(fill):
        seen.append(hints.oldest_hlc())
        await write(fill)

    monkeypatch.setattr(store, "write_durably", watching)
    asyncio.run(hints.add("s-1", [Replicated("c", "a", 1, {}, 70, "s-0")]))
    assert seen == [70] and hints.pending() == {"s-1": 1}

    async def refusing(fill):
        seen.append(hints.oldest_hlc())
        raise OSError("disk full")

    monkeypatch.setattr(store, "write_durably", refusing)
    with pytest.raises(OSError):
        asyncio.run(hints.add("s-1", [Replicated("c", "b", 1, {}, 20, "s-0")]))
    assert seen == [70, 20]
    assert hints.oldest_hlc() == 70 and hints.pending() == {"s-1": 1}
    store.close()
