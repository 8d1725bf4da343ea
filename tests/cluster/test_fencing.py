"""Spec: fencing — one coordinator per key per epoch, owners refuse anything else, and the
coordinator acknowledges only what enough owners hold."""

from __future__ import annotations

import asyncio

import pytest
from themis_shard.cluster.placement.owners import Topology
from themis_shard.cluster.replication.delivery import delivery_of
from themis_shard.cluster.replication.fencing import (
    DEFAULT_CONCERN,
    Delivery,
    KeyLocks,
    Outcome,
    WriteConcern,
    decide,
    fence_refusal,
    parse_concern,
    primary,
    required_acks,
)
from themis_shard.cluster.transport.remote import PeerError, PeerUnavailable, internal_path
from themis_shard.errors import BadRequest

from .fakes import plan_of


def _key_with(topo: Topology, first: str) -> str:
    return next(k for k in (f"k{i}" for i in range(500)) if topo.owners("c", k)[0] == first)


def test_every_shard_names_the_same_primary_from_the_plan_alone() -> None:
    plan = plan_of(3)
    views = [Topology.of(plan, f"s-{i}") for i in range(3)]
    for key in (f"k{i}" for i in range(50)):
        assert len({primary(t, "c", key) for t in views}) == 1
        assert primary(views[0], "c", key) == views[0].owners("c", key)[0]


def test_an_owner_accepts_the_primary_of_its_own_epoch_only() -> None:
    plan = plan_of(3)
    key = _key_with(Topology.of(plan, "s-0"), "s-0")
    replica = Topology.of(plan, "s-0").owners("c", key)[1]
    me = Topology.of(plan, replica)
    epoch = me.version
    assert fence_refusal(me, epoch, "s-0", [("c", key)]) is None
    assert fence_refusal(me, epoch - 1, "s-0", [("c", key)]).code == "stale_epoch"
    assert fence_refusal(me, epoch + 1, "s-0", [("c", key)]).code == "epoch_ahead"
    assert fence_refusal(me, epoch, replica, [("c", key)]).code == "not_coordinator"
    outsider = next(s for s in ("s-0", "s-1", "s-2") if s not in me.owners("c", key))
    assert fence_refusal(Topology.of(plan, outsider), epoch, "s-0", [("c", key)]).code == "not_owner"
    assert fence_refusal(me, epoch, "s-0", [("c", key)]) is None


def test_the_default_write_concern_is_every_copy() -> None:
    assert DEFAULT_CONCERN is WriteConcern.ALL and parse_concern(None) is WriteConcern.ALL
    assert [required_acks(c, 2) for c in WriteConcern] == [1, 2, 2]  # RAID1/5
    assert [required_acks(c, 3) for c in WriteConcern] == [1, 2, 3]  # RAID6
    assert parse_concern("majority") is WriteConcern.MAJORITY
    with pytest.raises(BadRequest):
        parse_concern("2")


def test_the_coordinator_commits_with_enough_holders_and_burns_what_it_cannot_rule_out() -> None:
    held, gone, unknown = Delivery.HELD, Delivery.NOT_APPLIED, Delivery.UNKNOWN
    assert decide([held], 2) is Outcome.COMMIT
    assert decide([gone], 2) is Outcome.FAIL  # nobody else has it: nothing to undo
    assert decide([unknown], 2) is Outcome.BURN  # a timeout may have applied it
    assert decide([held, gone], 3) is Outcome.BURN  # one owner holds a write that failed
    assert decide([held, unknown], 2) is Outcome.COMMIT
    assert decide([gone, gone], 1) is Outcome.COMMIT  # w=1


def test_only_an_unsent_request_or_a_refusal_counts_as_not_applied() -> None:
    assert delivery_of(None) is Delivery.HELD
    assert delivery_of(PeerError("p", 409, "stale_epoch", "")) is Delivery.FENCED
    assert delivery_of(PeerError("p", 400, "invalid_request", "")) is Delivery.NOT_APPLIED
    for reason in ("circuit_open", "connect_error", "unknown_peer"):
        assert delivery_of(PeerUnavailable("p", reason)) is Delivery.NOT_APPLIED
    for reason in ("timeout", "transport_error", "server_error", "bad_response"):
        assert delivery_of(PeerUnavailable("p", reason)) is Delivery.UNKNOWN


def test_writes_to_one_key_run_one_at_a_time_and_the_locks_are_released() -> None:
    locks = KeyLocks()
    order: list[str] = []

    async def write(name: str, keys, pause: float) -> None:
        async with locks.hold(keys):
            order.append(f"{name}+")
            await asyncio.sleep(pause)
            order.append(f"{name}-")

    async def go() -> None:
        await asyncio.gather(
            write("a", [("c", "x"), ("c", "y")], 0.02),
            write("b", [("c", "y")], 0),
            write("c", [("c", "z")], 0),
        )

    asyncio.run(go())
    assert order.index("a-") < order.index("b+")  # b waited for a on key y
    assert order.index("c+") < order.index("a-")  # z was never blocked
    assert len(locks) == 0


def test_internal_urls_keep_every_key_as_one_segment() -> None:
    assert internal_path("documents", "c", "a.b") == "/internal/documents/c/a.b"
    assert internal_path("documents", "c", "..") == "/internal/documents/c/%2E%2E"
    assert internal_path("documents", "c", "a/b") == "/internal/documents/c/a%2Fb"


def test_fencing_is_on_unless_the_one_unsafe_setting_turns_it_off(monkeypatch) -> None:
    from themis_shard.cluster.documents.coordinator import DistributedDocuments
    from themis_shard.cluster.settings import ClusterSettings

    from .fakes import live

    assert ClusterSettings().unsafe_disable_fencing is False
    monkeypatch.setenv("THEMIS_UNSAFE_DISABLE_FENCING", "true")
    assert ClusterSettings().unsafe_disable_fencing is True

    current = live(plan_of(3), "s-1")
    key = next(k for k in (f"k{i}" for i in range(500)) if current.topology.owners("c", k) == ["s-0", "s-1"])
    epoch = current.topology.version
    fenced = DistributedDocuments(None, None, None, current)  # type: ignore[arg-type]
    unfenced = DistributedDocuments(None, None, None, current, fencing=False)  # type: ignore[arg-type]
    assert fenced.fence_refusal(epoch, "s-2", [("c", key)]).code == "not_coordinator"
    assert unfenced.fence_refusal(epoch, "s-2", [("c", key)]) is None
    assert unfenced.fence_refusal(epoch - 1, "s-2", [("c", key)]) is None
