"""Spec: the local plan authority probes every member, grants leases only to members that
answer, writes the next plan when a silent member's last lease ran out, and restarts a dead
shard only when asked to."""

from __future__ import annotations

import asyncio
import json

import httpx
from themis_core.plan import ClusterPlan, ClusterSpec, FailoverSettings, Member, build_plan
from themis_shard.supervisor import Supervisor

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

    def __call__(self, request: httpx.Request) -> httpx.Response:
        shard = request.url.host
        if shard in self.down:
            raise httpx.ConnectError("refused", request=request)
        body = json.loads(request.content)
        self.granted.setdefault(shard, []).append(body["until"])
        epoch = self.plans.plan.plan_epoch
        return httpx.Response(
            200, json={"epoch": epoch, "caught_up_epoch": epoch, "ready": True, "hints": {}, "renewed": True}
        )


def run_ticks(supervisor: Supervisor, shards: Shards, clock: list[float], ticks: int) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(shards)) as client:
            for _ in range(ticks):
                await supervisor.tick(client)
                clock[0] += SETTINGS.probe_interval_s

    asyncio.run(go())


def test_members_that_answer_are_granted_leases_from_the_probes_send_time() -> None:
    plans = MemoryPlans(cluster_plan())
    clock = [100.0]
    shards = Shards(plans)
    run_ticks(Supervisor(plans, None, clock=lambda: clock[0]), shards, clock, 2)
    assert shards.granted["s-0"] == [100.0 + SETTINGS.lease_s, 100.5 + SETTINGS.lease_s]


def test_a_silent_member_is_fenced_after_its_lease_ran_out_and_readmitted_in_two_steps() -> None:
    plans = MemoryPlans(cluster_plan())
    clock = [0.0]
    shards = Shards(plans)
    supervisor = Supervisor(plans, None, clock=lambda: clock[0])
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
    supervisor = Supervisor(
        plans, None, restart=lambda s: restarted.append(s) or True, clock=lambda: clock[0]
    )
    shards.down.add("s-2")
    run_ticks(supervisor, shards, clock, 2)
    assert restarted == ["s-2"]  # once: then it backs off while the shard starts
