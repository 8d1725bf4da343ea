"""Spec: the cluster plan — one pure function shared by the operator and `themis up`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from themis_core.plan import ClusterPlan, ClusterSpec, Member, build_plan


def members(n: int) -> tuple[Member, ...]:
    return tuple(Member(shard_id=f"s-{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(n))


def test_copies_and_tolerance_follow_the_raid_mode() -> None:
    for mode, copies, tolerance in [("raid0", 1, 0), ("raid1", 2, 1), ("raid5", 2, 1), ("raid6", 3, 2)]:
        plan = build_plan(ClusterSpec(members=members(4), raid_mode=mode))
        assert (plan.copies, plan.fault_tolerance) == (copies, tolerance)


@pytest.mark.parametrize("mode,n", [("raid1", 1), ("raid5", 2), ("raid6", 3)])
def test_too_few_shards_for_the_raid_mode_is_rejected(mode: str, n: int) -> None:
    with pytest.raises(ValidationError, match="needs at least"):
        ClusterSpec(members=members(n), raid_mode=mode)


def test_ring_version_bumps_only_when_membership_changes() -> None:
    first = build_plan(ClusterSpec(members=members(3)))
    same = build_plan(ClusterSpec(members=members(3), router={"gamma": 0.2}), previous=first)
    grown = build_plan(ClusterSpec(members=members(4)), previous=same)
    assert (first.ring_version, same.ring_version, grown.ring_version) == (1, 1, 2)


def test_plan_round_trips_through_json_and_builds_the_same_ring() -> None:
    plan = build_plan(ClusterSpec(members=members(3), vnodes=16, ring_seed=5))
    again = ClusterPlan.from_json(plan.to_json())
    assert again == plan
    assert again.hash_ring().owners("urn:themis:c:k", 2) == plan.hash_ring().owners("urn:themis:c:k", 2)


def test_router_thresholds_must_descend() -> None:
    with pytest.raises(ValidationError):
        ClusterSpec(members=members(2), router={"thresholds": (0.4, 0.6, 0.8)})
