"""The plan authority's loop: probe every member, grant leases, write the next plan.

Every ``probe_interval_s`` it probes each ring member (``POST /internal/lease``), granting
leases while they answer (``in_sync.lease_until``); it writes the next plan whenever
``in_sync.decide`` says the in-sync set changes (a member down past its lease is fenced; a
caught-up one comes back in two steps). A member still on an older epoch is sent the plan
itself with the probe, so it adopts the new epoch at once, however late its plan file (a
mounted ConfigMap) catches up. Where the plan lives is the caller's: a file for ``themis up``'s
supervisor, the plan ConfigMap for the operator (``PlanStore``). It is the only writer of the
in-sync set; during a handoff ``decide`` changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Protocol

import httpx

from ..plan import ClusterPlan
from .in_sync import Member, Report, decide, epoch_behind, lease_until

log = logging.getLogger("themis.plan_authority")

#: A shard whose process died is started again at most this often.
RESTART_BACKOFF_S = 5.0


class StalePlan(Exception):
    """The plan changed underneath the authority (another writer): read it again next tick."""


class PlanStore(Protocol):
    """Where the authority reads and writes the plan; ``write`` raises :class:`StalePlan` when
    the plan is no longer the one last read."""

    def read(self) -> ClusterPlan: ...

    def write(self, plan: ClusterPlan) -> None: ...


def report_of(body: dict) -> Report:
    clock = body.get("clock")
    return Report(
        epoch=int(body["epoch"]),
        caught_up_epoch=int(body.get("caught_up_epoch", 0)),
        ready=bool(body.get("ready", False)),
        hints={str(k): int(v) for k, v in (body.get("hints") or {}).items()},
        clock=float(clock) if clock is not None else None,
    )


class PlanAuthority:
    def __init__(
        self,
        plans: PlanStore,
        *,
        restart: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        client: Callable[[], httpx.AsyncClient] = httpx.AsyncClient,
    ) -> None:
        """``restart(shard_id)``: start the shard again if its process is gone (True when it
        did); None: never (Kubernetes restarts pods itself). ``client`` makes the HTTP client
        the probes go through (signed with the cluster secret, or with a client certificate)."""
        self.plans = plans
        self.restart = restart
        self.clock = clock
        self.client = client
        self.members: dict[str, Member] = {}
        #: the plan as last read or written
        self.plan: ClusterPlan | None = None
        self._restarted: dict[str, float] = {}
        self._warned_behind = 0
        self.changes: list[ClusterPlan] = []

    async def _probe(self, client: httpx.AsyncClient, plan: ClusterPlan, shard_id: str) -> None:
        """One probe; a member that answered without holding a grant from us (it just started,
        or so did we) is probed again at once, anchored on that answer, so it need not wait a
        probe interval for its first lease."""
        for _ in range(2):
            granted = await self._probe_once(client, plan, shard_id)
            member = self.members[shard_id]
            if granted or not member.granting or member.report is None:
                return

    async def _probe_once(self, client: httpx.AsyncClient, plan: ClusterPlan, shard_id: str) -> bool:
        """Probe ``shard_id`` once; True when the probe carried a lease."""
        settings = plan.failover
        assert settings is not None
        member = self.members.setdefault(shard_id, Member.new(self.clock(), settings))
        until = lease_until(member, settings)
        self.members[shard_id] = member.sent(settings)
        body: dict = {"epoch": plan.plan_epoch, "until": until}
        if member.report is not None and member.report.epoch < plan.plan_epoch:
            body["plan"] = json.loads(plan.to_json())
        try:
            r = await client.post(
                f"{plan.member(shard_id).peer_url}/internal/lease",
                json=body,
                timeout=settings.probe_timeout_s,
            )
            r.raise_for_status()
            report = report_of(r.json())
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            self.members[shard_id] = self.members[shard_id].missed()
            return until > 0
        self.members[shard_id] = self.members[shard_id].answered(self.clock(), report)
        return until > 0

    async def tick(self, client: httpx.AsyncClient) -> ClusterPlan | None:
        """Probe every ring member at once, then apply ``decide``'s change, if any. The store is
        read and written from a worker thread (it may block: a file, the Kubernetes API)."""
        plan = self.plan = await asyncio.to_thread(self.plans.read)
        if plan.failover is None:
            return None
        await asyncio.gather(*(self._probe(client, plan, s) for s in plan.ring_spec.shards))
        behind = epoch_behind(plan, self.members)
        if behind is not None and behind != self._warned_behind:
            self._warned_behind = behind
            log.error(
                "the plan's epoch %d is behind epoch %d that members run (a plan restored from an "
                "older copy?): the in-sync set stays as it is until the plan is current",
                plan.plan_epoch,
                behind,
            )
        nxt = decide(plan, self.members, self.clock())
        if nxt is not None:
            try:
                await asyncio.to_thread(self.plans.write, nxt)
                self.plan = nxt
            except StalePlan:
                log.info("the plan changed underneath (epoch %d); deciding again", plan.plan_epoch)
                return None
            self.changes.append(nxt)
            log.warning(
                "epoch %d: out of sync %s, rejoining %s",
                nxt.plan_epoch,
                list(nxt.out_of_sync) or "-",
                list(nxt.rejoining) or "-",
            )
        if self.restart is not None:
            for s, m in self.members.items():
                due = self.clock() - self._restarted.get(s, -1e9) > RESTART_BACKOFF_S
                if not m.granting and due and self.restart(s):
                    self._restarted[s] = self.clock()
                    log.warning("restarted %s (its process had exited)", s)
        return nxt

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        async with self.client() as client:
            while not stop.is_set():
                started = self.clock()
                interval = 1.0
                try:
                    await self.tick(client)
                    settings = self.plan.failover if self.plan is not None else None
                    interval = settings.probe_interval_s if settings else 1.0
                except Exception:  # a bad or missing plan, a transient error: try again next tick
                    log.exception("plan authority tick failed")
                pause = interval - (self.clock() - started)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.05, pause))
