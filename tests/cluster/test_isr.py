"""Spec: the in-sync set — who takes a key's writes, and how the plan authority moves it.

A dead member leaves the set under a new epoch only after the last lease granted to it ran
out, never more than ``copies - 1`` at once; it comes back in two steps, each only once it has
caught up; writes wait for in-sync owners only, and the floor refuses by name."""

from __future__ import annotations

import pytest
from themis_core.plan import FailoverSettings, build_plan, is_rollback, with_in_sync
from themis_core.plan_authority.in_sync import (
    FENCE_MARGIN_S,
    STARTUP_GRACE_S,
    Member,
    Report,
    decide,
    fenceable,
    lease_until,
)
from themis_shard.cluster.placement.owners import Topology
from themis_shard.cluster.replication.fencing import (
    WriteConcern,
    fence_refusal,
    floor_refusal,
    primary,
    write_owners,
)
from themis_shard.cluster.replication.lease import AuthorityLease, lease_refusal

from .fakes import plan_of, spec

SETTINGS = FailoverSettings()


def failover_plan(n: int = 3, raid_mode: str = "raid1", **kw):
    return plan_of(n, raid_mode, failover=SETTINGS, **kw)


def healthy(plan, now: float, **reports) -> dict[str, Member]:
    out = {}
    for s in plan.ring_spec.shards:
        report = reports.get(s.replace("-", "_")) or Report(
            plan.plan_epoch, plan.plan_epoch, True, {}, clock=now
        )
        out[s] = Member.new(now, SETTINGS).answered(now, report)
    return out


def key_owned_by(topo: Topology, first: str, second: str | None = None) -> str:
    for k in (f"k{i}" for i in range(2000)):
        owners = topo.owners("c", k)
        if owners[0] == first and (second is None or owners[1] == second):
            return k
    raise AssertionError("no such key")


# -- the plan -------------------------------------------------------------------------------------
def test_a_new_plan_starts_at_epoch_one_with_everyone_in_sync() -> None:
    plan = failover_plan()
    assert (plan.plan_epoch, plan.out_of_sync, plan.rejoining) == (1, (), ())


def test_changing_the_in_sync_set_takes_the_next_epoch_and_keeps_the_ring() -> None:
    plan = failover_plan()
    nxt = with_in_sync(plan, ("s-1",), ())
    assert nxt.plan_epoch == 2 and nxt.ring == plan.ring and nxt.out_of_sync == ("s-1",)
    assert is_rollback(
        nxt.model_copy(update={"cluster_uid": "u"}), plan.model_copy(update={"cluster_uid": "u"})
    )


def test_a_plan_may_not_leave_a_key_without_an_in_sync_owner() -> None:
    with pytest.raises(ValueError, match="at most 1"):
        with_in_sync(failover_plan(), ("s-1", "s-2"), ())


def test_rebuilding_the_plan_from_the_spec_keeps_the_authoritys_in_sync_set() -> None:
    fenced = with_in_sync(failover_plan(), ("s-2",), ())
    again = build_plan(spec(3, "raid1", failover=SETTINGS), previous=fenced)
    assert again.out_of_sync == ("s-2",) and again.plan_epoch == fenced.plan_epoch


def test_the_floor_cannot_exceed_the_copies() -> None:
    with pytest.raises(ValueError, match="min_insync"):
        plan_of(3, "raid1", min_insync=3)


# -- placement and fencing --------------------------------------------------------------------------
def test_a_fenced_owner_is_neither_primary_nor_waited_for() -> None:
    plan = with_in_sync(failover_plan(), ("s-0",), ())
    topo = Topology.of(plan, "s-1")
    k = key_owned_by(topo, "s-0")
    other = topo.owners("c", k)[1]
    assert primary(topo, "c", k) == other
    assert write_owners(topo, "c", k) == [other]


def test_a_rejoining_owner_takes_writes_but_is_not_primary_yet() -> None:
    plan = with_in_sync(failover_plan(), (), ("s-0",))
    topo = Topology.of(plan, "s-1")
    k = key_owned_by(topo, "s-0")
    assert primary(topo, "c", k) == topo.owners("c", k)[1]
    assert "s-0" in write_owners(topo, "c", k)


def test_owners_refuse_writes_of_another_epoch_and_a_fenced_owner_refuses_all() -> None:
    plan = with_in_sync(failover_plan(), ("s-0",), ())
    k = key_owned_by(Topology.of(plan, "s-0"), "s-0", "s-1")
    survivor = Topology.of(plan, "s-1")
    assert fence_refusal(survivor, 1, "s-0", [("c", k)]).code == "stale_epoch"
    assert fence_refusal(survivor, 2, "s-1", [("c", k)]) is None
    assert fence_refusal(Topology.of(plan, "s-0"), 2, "s-1", [("c", k)]).code == "not_in_sync"


def test_the_floor_refuses_all_and_majority_writes_naming_it_but_not_w1() -> None:
    plan = with_in_sync(failover_plan(min_insync=2), ("s-0",), ())
    topo = Topology.of(plan, "s-1")
    k = key_owned_by(topo, "s-0")
    refused = floor_refusal(topo, WriteConcern.ALL, [("c", k)])
    assert refused.status == 503 and refused.code == "not_enough_replicas" and "min_insync=2" in str(refused)
    assert floor_refusal(topo, WriteConcern.MAJORITY, [("c", k)]) is not None
    assert floor_refusal(topo, WriteConcern.ONE, [("c", k)]) is None


def test_a_primary_without_its_lease_refuses_only_when_failover_is_on() -> None:
    t = [100.0]
    lease = AuthorityLease(clock=lambda: t[0])
    with_failover = Topology.of(failover_plan(), "s-0")
    assert lease_refusal(with_failover, lease).code == "lease_expired"
    lease.renew(102.0)
    assert lease_refusal(with_failover, lease) is None
    t[0] = 102.5
    assert lease_refusal(with_failover, lease) is not None
    assert lease_refusal(Topology.of(plan_of(3), "s-0"), lease) is None


# -- the authority's decisions --------------------------------------------------------------------
def test_a_member_is_fenced_only_after_the_last_lease_granted_to_it_ran_out() -> None:
    member = Member.new(0.0, SETTINGS).answered(10.0, Report(1, 1, True, clock=500.0)).sent(SETTINGS)
    member = member.missed()
    assert lease_until(member, SETTINGS) == 0  # no lease to a member that missed a probe
    assert not fenceable(member, 10.0 + SETTINGS.lease_s, SETTINGS)
    late = 10.0 + max(SETTINGS.lease_s + FENCE_MARGIN_S, SETTINGS.failover_after_s) + 0.01
    assert fenceable(member, late, SETTINGS)


def test_a_lease_is_anchored_on_the_members_clock_and_counted_from_the_answers_arrival() -> None:
    """The authority may run on another machine: the grant is in the member's clock (its reading
    plus the lease), and the authority's count starts when that reading arrived, later than it
    was taken, so the member's lease never outlives the authority's view of it."""
    answered = Member.new(0.0, SETTINGS).answered(7.0, Report(1, 1, True, clock=12_345.0))
    assert lease_until(answered, SETTINGS) == 12_345.0 + SETTINGS.lease_s
    assert answered.sent(SETTINGS).lease_end == 7.0 + SETTINGS.lease_s


def test_a_member_that_reports_no_clock_is_granted_no_lease() -> None:
    member = Member.new(0.0, SETTINGS).answered(1.0, Report(1, 1, True))
    assert lease_until(member, SETTINGS) == 0
    assert member.sent(SETTINGS).lease_end == SETTINGS.lease_s  # only the start-up assumption


def test_a_plan_behind_the_epoch_members_run_changes_nothing() -> None:
    """A plan restored from an older copy: members refuse it as stale, and its in-sync set
    could readmit a member that has not caught up, so the authority waits for a current plan."""
    plan = failover_plan()
    ahead = Report(plan.plan_epoch + 3, plan.plan_epoch + 3, True, {}, clock=0.0)
    members = healthy(plan, 0.0, s_0=ahead)
    members["s-1"] = members["s-1"].missed()
    assert decide(plan, members, 100.0) is None


def test_a_dead_member_leaves_the_in_sync_set_under_a_new_epoch() -> None:
    plan = failover_plan()
    members = healthy(plan, 0.0)
    members["s-1"] = members["s-1"].sent(SETTINGS).missed()
    assert decide(plan, members, 2.0) is None
    nxt = decide(plan, members, 10.0)
    assert nxt.out_of_sync == ("s-1",) and nxt.plan_epoch == plan.plan_epoch + 1


def test_a_death_while_another_member_rejoins_leaves_the_set_alone() -> None:
    """The rejoining member may still miss writes hinted to it: it must not become the only
    in-sync copy of the dead member's keys."""
    plan = with_in_sync(failover_plan(), (), ("s-1",))
    members = healthy(plan, 0.0)
    members["s-0"] = members["s-0"].missed()
    assert decide(plan, members, 100.0) is None


def test_a_member_that_never_answered_is_given_time_to_start() -> None:
    member = Member.new(0.0, SETTINGS).missed()
    assert not fenceable(member, 30.0, SETTINGS)
    assert fenceable(member, STARTUP_GRACE_S + 1, SETTINGS)


def test_a_second_death_in_raid1_leaves_the_set_alone() -> None:
    plan = with_in_sync(failover_plan(), ("s-1",), ())
    members = healthy(plan, 0.0)
    for s in ("s-1", "s-2"):
        members[s] = members[s].missed()
    assert decide(plan, members, 100.0) is None


def test_a_returning_member_rejoins_only_after_a_catch_up_round_at_this_epoch() -> None:
    plan = with_in_sync(failover_plan(), ("s-1",), ())
    behind = Report(plan.plan_epoch, plan.plan_epoch - 1, True, {})
    assert decide(plan, healthy(plan, 0.0, s_1=behind), 1.0) is None
    nxt = decide(plan, healthy(plan, 0.0), 1.0)
    assert nxt.out_of_sync == () and nxt.rejoining == ("s-1",)


def test_a_rejoining_member_is_primary_again_only_when_nothing_is_pending_for_it() -> None:
    plan = with_in_sync(failover_plan(), (), ("s-1",))
    e = plan.plan_epoch
    pending = Report(e, e, True, {"s-1": 3})
    assert decide(plan, healthy(plan, 0.0, s_0=pending), 1.0) is None
    stale_peer = Report(e - 1, e - 1, True, {})
    assert decide(plan, healthy(plan, 0.0, s_2=stale_peer), 1.0) is None
    nxt = decide(plan, healthy(plan, 0.0), 1.0)
    assert (nxt.out_of_sync, nxt.rejoining) == ((), ())


def test_without_failover_settings_the_authority_changes_nothing() -> None:
    plan = plan_of(3)
    members = {s: Member.new(0.0, SETTINGS).missed() for s in plan.ring_spec.shards}
    assert decide(plan, members, 1000.0) is None


def test_a_plan_without_failover_or_a_changed_set_writes_none_of_their_fields() -> None:
    """Shards of 0.1.0 forbid unknown plan fields: what an operator without failover writes
    must stay readable to them mid-upgrade."""
    import json

    written = json.loads(plan_of(3).to_json())
    assert not {"epoch", "out_of_sync", "rejoining", "failover", "min_insync"} & set(written)
    fenced = with_in_sync(failover_plan(), ("s-1",), ())
    again = type(fenced).from_json(fenced.to_json())
    assert again == fenced and again.plan_epoch == 2
