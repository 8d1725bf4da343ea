"""Spec: the plan authority probes every member, grants leases only to members that answer
(anchored on the clock each reported), writes the next plan when a silent member's last lease ran
out, sends its plan to a member still on an older epoch, backs off when the plan changed
underneath, and (locally) restarts a dead shard only when asked to."""

from __future__ import annotations

import asyncio
import json

import httpx
from themis_core.plan import ClusterPlan, ClusterSpec, FailoverSettings, Member, build_plan
from themis_core.plan_authority.authority import PlanAuthority, StalePlan
from themis_shard.supervisor import local_authority

SETTINGS = FailoverSettings()


class MemoryPlans:
    def __init__(self, plan: ClusterPlan) -> None:
        self.plan = plan

    def read(self) -> ClusterPlan:
        return self.plan

    def write(self, plan: ClusterPlan) -> None:
        self.plan = plan


def cluster_plan() -> ClusterPlan:
    members = tuple(Member(shard_id=f"s-{i}", url=f"http://s-{i}") for i in range(3))
    return build_plan(ClusterSpec(name="t", members=members, raid_mode="raid1", failover=SETTINGS))


class Shards:
    """Members answering ``/internal/lease`` like shards do; ``down`` ones refuse connections."""

    def __init__(self, plans: MemoryPlans) -> None:
        self.plans = plans
        self.down: set[str] = set()
        self.granted: dict[str, list[float]] = {}
        self.pushed: dict[str, list[int]] = {}
        #: each member's own clock, far from the authority's (another machine)
        self.clock = 5000.0
        #: epochs members run when they do not follow the plan store (a lagging ConfigMap)
        self.epochs: dict[str, int] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        shard = request.url.host
        if shard in self.down:
            raise httpx.ConnectError("refused", request=request)
        body = json.loads(request.content)
        self.granted.setdefault(shard, []).append(body["until"])
        if body.get("plan"):
            self.pushed.setdefault(shard, []).append(ClusterPlan.model_validate(body["plan"]).plan_epoch)
            self.epochs[shard] = body["epoch"]
        epoch = self.epochs.get(shard, self.plans.plan.plan_epoch)
        self.clock += 0.1
        return httpx.Response(
            200,
            json={
                "epoch": epoch,
                "caught_up_epoch": epoch,
                "ready": True,
                "hints": {},
                "renewed": True,
                "clock": self.clock,
            },
        )


def run_ticks(supervisor: PlanAuthority, shards: Shards, clock: list[float], ticks: int) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(shards)) as client:
            for _ in range(ticks):
                await supervisor.tick(client)
                clock[0] += SETTINGS.probe_interval_s

    asyncio.run(go())


def test_members_that_answer_are_granted_leases_from_the_clock_they_reported() -> None:
    plans = MemoryPlans(cluster_plan())
    clock = [100.0]
    shards = Shards(plans)
    run_ticks(local_authority(plans, None, clock=lambda: clock[0]), shards, clock, 2)
    first, second, third = shards.granted["s-0"]
    # nothing to anchor a lease on before the first answer; probed again at once, anchored on it
    assert first == 0 and second - SETTINGS.lease_s > 5000.0
    assert third > second  # the next tick: anchored on the newest answer


def test_a_member_on_an_older_epoch_is_sent_the_plan_with_the_probe() -> None:
    plans = MemoryPlans(cluster_plan())
    clock = [0.0]
    shards = Shards(plans)
    shards.epochs["s-2"] = plans.plan.plan_epoch - 1
    run_ticks(local_authority(plans, None, clock=lambda: clock[0]), shards, clock, 3)
    assert shards.pushed == {"s-2": [plans.plan.plan_epoch]}  # once: then it runs that epoch


def test_a_plan_changed_underneath_is_read_again_not_overwritten() -> None:
    class Contended(MemoryPlans):
        def write(self, plan: ClusterPlan) -> None:
            raise StalePlan("changed")

    plans = Contended(cluster_plan())
    clock = [0.0]
    shards = Shards(plans)
    authority = local_authority(plans, None, clock=lambda: clock[0])
    shards.down.add("s-1")
    run_ticks(authority, shards, clock, 20)
    assert authority.changes == [] and plans.plan.out_of_sync == ()


def test_a_silent_member_is_fenced_after_its_lease_ran_out_and_readmitted_in_two_steps() -> None:
    plans = MemoryPlans(cluster_plan())
    clock = [0.0]
    shards = Shards(plans)
    supervisor = local_authority(plans, None, clock=lambda: clock[0])
    run_ticks(supervisor, shards, clock, 2)
    shards.down.add("s-1")
    run_ticks(supervisor, shards, clock, 2)
    assert plans.plan.out_of_sync == ()  # its last lease still holds
    run_ticks(supervisor, shards, clock, 12)
    assert plans.plan.out_of_sync == ("s-1",)
    fenced_at = plans.plan.plan_epoch
    shards.down.clear()
    run_ticks(supervisor, shards, clock, 3)
    assert [(p.out_of_sync, p.rejoining) for p in supervisor.changes] == [
        (("s-1",), ()),
        ((), ("s-1",)),
        ((), ()),
    ]
    assert plans.plan.plan_epoch == fenced_at + 2


def test_a_dead_shard_is_restarted_only_when_a_restart_is_wired() -> None:
    plans = MemoryPlans(cluster_plan())
    clock = [0.0]
    shards = Shards(plans)
    restarted: list[str] = []
    supervisor = local_authority(
        plans, None, restart=lambda s: restarted.append(s) or True, clock=lambda: clock[0]
    )
    shards.down.add("s-2")
    run_ticks(supervisor, shards, clock, 2)
    assert restarted == ["s-2"]  # once: then it backs off while the shard starts
