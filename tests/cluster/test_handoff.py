"""Spec: the handoff state machine — a shard pulls what it gained in a new ring (everything it
owns at start-up), waits for every member, hands the copies it lost to owners that lack them,
then purges them; reads and writes look back at the previous owners until then."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry
from themis_shard.cluster.placement.migration import (
    Handoff,
    MigrationState,
    all_complete,
    hand_over_batches,
    keys_to_purge,
    waiting_for,
)
from themis_shard.cluster.replication.delivery import Replication
from themis_shard.storage.documents import DocumentStore, Replicated, StoredDocument
from themis_shard.storage.hints import HintLog

from .fakes import fake_peers, live, plan_of

KEYS = [f"k{i}" for i in range(120)]


def fill(store: DocumentStore, keys, version: int = 1) -> None:
    store.apply_replicated([Replicated("c", k, version, {"k": k, "v": version}) for k in keys])


def held(store: DocumentStore) -> set[str]:
    return {e.key for e in store.scan_all()}


def handoff_for(self_id, store, current, peers, **kw) -> Handoff:
    executor = peers.executor(current)
    replication = Replication(executor, HintLog(store), current, CollectorRegistry())
    kw = {"page_size": 16, "page_pause_s": 0, "retry_pause_s": 0, "poll_s": 0.01, **kw}
    return Handoff(self_id, store, executor, current, replication, CollectorRegistry(), **kw)


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_catch_up_pulls_every_owned_key_page_by_page_and_then_the_shard_is_ready(tmp_path, store) -> None:
    current = live(plan_of(2))  # raid1 on two shards: both own everything
    with fake_peers(tmp_path, "s-1") as peers:
        fill(peers["s-1"].store, KEYS)
        peers["s-1"].page_size = 16  # the sender pages
        handoff = handoff_for("s-0", store, current, peers)
        assert not handoff.caught_up
        asyncio.run(handoff.catch_up())
        assert handoff.caught_up
        assert held(store) == set(KEYS)
        assert handoff.migration.state is MigrationState.DONE
        assert handoff.migration.keys_received == len(KEYS)
        assert len(peers.calls_to("s-1", "/internal/sync")) == len(KEYS) // 16 + 1
        assert not handoff.handoff_active  # no previous ring: nothing to look back at


def test_a_lone_shard_is_caught_up_from_the_start(tmp_path, store) -> None:
    with fake_peers(tmp_path) as peers:
        assert handoff_for("s-0", store, live(plan_of(1, "raid0")), peers).caught_up


def test_an_unreachable_peer_is_given_up_after_its_attempts_and_the_others_send_its_keys(
    tmp_path, store
) -> None:
    current = live(plan_of(3))
    ring = current.topology
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        peers["s-1"].up = False
        fill(peers["s-2"].store, [k for k in KEYS if "s-2" in ring.owners("c", k)])
        handoff = handoff_for("s-0", store, current, peers, attempts=2)
        asyncio.run(handoff.catch_up())
        shared_with_s2 = {k for k in KEYS if set(ring.owners("c", k)) == {"s-0", "s-2"}}
        assert held(store) == shared_with_s2
        assert handoff.migration.unreachable == {"s-1"}
        assert handoff.migration.state is MigrationState.DONE


def test_scale_out_purges_lost_copies_only_after_everyone_is_done_handing_them_to_owners_that_lack_them(
    tmp_path, store
) -> None:
    before = plan_of(2)
    after = plan_of(3, previous=before)
    current = live(after)
    topo = current.topology
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        fill(store, KEYS)
        fill(peers["s-1"].store, KEYS)  # s-2 pulled nothing yet: the hand-over must cover it
        peers["s-1"].migration = {"ring_version": 2, "state": "done"}
        peers["s-2"].migration = {"ring_version": 1, "state": "migrating"}
        handoff = handoff_for("s-0", store, current, peers)

        async def go() -> None:
            handoff.begin()
            await until(lambda: handoff.migration.state is MigrationState.DONE)
            await asyncio.sleep(0.05)
            assert handoff.handoff_active and held(store) == set(KEYS)  # s-2 is not done yet
            peers["s-2"].migration = {"ring_version": 2, "state": "done"}
            await until(lambda: handoff.migration.state is MigrationState.PURGED)
            await handoff.stop()

        asyncio.run(go())
        lost = {k for k in KEYS if "s-0" not in topo.owners("c", k)}
        assert lost and held(store) == set(KEYS) - lost
        assert handoff.migration.keys_purged == len(lost)
        assert not handoff.handoff_active
        assert lost <= held(peers["s-2"].store)  # s-1 had them all: only s-2 was sent anything
        assert handoff.migration.keys_handed_over == len(lost)


def test_a_draining_shard_reports_drained_once_it_purged_everything(tmp_path, store) -> None:
    before = plan_of(3)
    after = plan_of(3, previous=before, draining=("s-0",))
    current = live(after)
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        fill(store, KEYS[:20])
        for peer in ("s-1", "s-2"):
            fill(peers[peer].store, KEYS[:20])
            peers[peer].migration = {"ring_version": after.ring_version, "state": "done"}
        handoff = handoff_for("s-0", store, current, peers)

        async def go() -> None:
            await handoff.migrate()
            await until(lambda: handoff.migration.state is MigrationState.DRAINED)

        asyncio.run(go())
        assert held(store) == set()
        assert handoff.migration.keys_handed_over == 0  # every owner already had these versions


def test_a_write_during_a_handoff_continues_from_the_previous_owners_newest_version(tmp_path, store) -> None:
    before = plan_of(2)
    after = plan_of(3, previous=before)
    current = live(after, "s-2")
    with fake_peers(tmp_path, "s-0", "s-1") as peers:
        peers["s-0"].up = False  # the first previous owner is down: the next one answers
        fill(peers["s-1"].store, ["a"], version=7)
        handoff = handoff_for("s-2", store, current, peers)
        assert handoff.handoff_active
        asyncio.run(handoff.fetch_previous("c", "a"))
        assert store.get("c", "a").version == 7
        asyncio.run(handoff.fetch_previous("c", "never-written"))  # 404 everywhere: nothing to install
        assert store.version("c", "never-written") == 0


def test_the_sender_side_serves_only_the_keys_the_requester_gained(tmp_path, store) -> None:
    before = plan_of(2)
    after = plan_of(3, previous=before)
    with fake_peers(tmp_path) as peers:
        fill(store, KEYS)
        handoff = handoff_for("s-0", store, live(after), peers, page_size=1000)
        page = handoff.serve_sync_page(
            {
                "shard": "s-2",
                "ring": after.ring,
                "previous": after.previous_ring,
                "copies": 2,
                "unreachable": [],
                "after": None,
            }
        )
        topo = live(after).topology
        gained = {k for k in KEYS if "s-2" in topo.owners("c", k)}
        sent = {i["key"] for i in page["items"]}
        assert page["next"] is None and sent and sent <= gained


def test_completion_needs_every_member_at_this_version_or_later() -> None:
    assert all_complete([{"ring_version": 3, "state": "done"}, {"ring_version": 4, "state": "purged"}], 3)
    assert not all_complete([{"ring_version": 2, "state": "purged"}], 3)
    assert not all_complete([{"ring_version": 3, "state": "migrating"}], 3)
    assert not all_complete([None], 3)  # an unreachable member holds everyone's purge back


def test_an_unreachable_member_holds_the_purge_back_only_until_the_timeout() -> None:
    done, behind = {"ring_version": 3, "state": "done"}, {"ring_version": 3, "state": "migrating"}
    states = {"a": done, "b": None, "c": behind}
    assert waiting_for(states, 3, {"b": 100.0}, 150.0, 60.0) == {"b", "c"}
    assert waiting_for(states, 3, {"b": 100.0}, 160.0, 60.0) == {"c"}  # b is given up, c still pulls
    assert waiting_for({"a": done, "b": None}, 3, {"b": 100.0}, 160.0, 60.0) == set()


def test_a_dead_member_does_not_stop_the_handoff_from_finishing(tmp_path, store) -> None:
    before = plan_of(2)
    after = plan_of(3, previous=before)
    current = live(after)
    with fake_peers(tmp_path, "s-1", "s-2") as peers:
        fill(store, KEYS)
        fill(peers["s-1"].store, KEYS)
        peers["s-1"].migration = {"ring_version": 2, "state": "done"}
        peers["s-2"].up = False  # dead for the whole handoff
        handoff = handoff_for("s-0", store, current, peers, finish_timeout_s=0.2)

        async def go() -> None:
            handoff.begin()
            await until(lambda: handoff.migration.state is MigrationState.PURGED)
            await handoff.stop()

        asyncio.run(go())
        assert "s-2" in handoff.migration.unreachable
        lost = {k for k in KEYS if "s-0" not in current.topology.owners("c", k)}
        assert lost and held(store) == set(KEYS) - lost
        assert handoff.replicas.hints.pending()["s-2"] > 0  # what s-2 gained waits for it as hints


@pytest.mark.parametrize("chunk", [1, 7, 500])
def test_hand_over_groups_dropped_copies_per_current_owner(chunk: int) -> None:
    topo = live(plan_of(3)).topology
    page = [StoredDocument("c", k, 2, {"k": k}) for k in KEYS]
    gone = set(keys_to_purge(page, "s-0", topo.ring, 2))
    batches = hand_over_batches(page, gone, topo.ring, 2, chunk=chunk)
    assert all(len(items) <= chunk for _, items in batches)
    per_owner: dict[str, set[str]] = {}
    for owner, items in batches:
        per_owner.setdefault(owner, set()).update(i.key for i in items)
    assert "s-0" not in per_owner
    for _, key in gone:
        assert all(key in per_owner[o] for o in topo.owners("c", key))
