"""The local plan authority: the small process ``themis up`` starts next to the shards.

Every ``probe_interval_s`` it probes each ring member (``POST /internal/lease``, signed with
the cluster secret), granting leases while they answer; it writes the next plan whenever
``isr.decide`` says the in-sync set changes (a member down past its lease is fenced; a caught-up
one comes back in two steps). In local mode it also restarts a shard whose process died (with
its data directory: it comes back out of sync and catches up). ``themis down`` stops it first.
It is the only writer of the plan while the cluster runs, besides ``themis scale`` (during a
handoff ``decide`` changes nothing). Run as ``python -m themis_shard.supervisor --state-dir``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import httpx
from themis_core.plan import ClusterPlan

from .cluster.security.peer_auth import PeerAuth
from .isr import Member, Report, decide, lease_until

log = logging.getLogger("themis.supervisor")

#: A shard whose process died is started again at most this often.
RESTART_BACKOFF_S = 5.0


class PlanStore(Protocol):
    """Where the authority reads and writes the plan (a file; in the nemesis suite, one copy per shard)."""

    def read(self) -> ClusterPlan: ...

    def write(self, plan: ClusterPlan) -> None: ...


class FilePlan:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> ClusterPlan:
        return ClusterPlan.load(self.path)

    def write(self, plan: ClusterPlan) -> None:
        tmp = self.path.with_suffix(".supervisor.tmp")  # atomic: shards never read half a plan
        tmp.write_text(plan.to_json())
        os.replace(tmp, self.path)


def report_of(body: dict) -> Report:
    return Report(
        epoch=int(body["epoch"]),
        caught_up_epoch=int(body.get("caught_up_epoch", 0)),
        ready=bool(body.get("ready", False)),
        hints={str(k): int(v) for k, v in (body.get("hints") or {}).items()},
    )


class Supervisor:
    def __init__(
        self,
        plans: PlanStore,
        secret: str | None,
        *,
        restart: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``restart(shard_id)``: start the shard again if its process is gone (True when it
        did); None: never (a shard killed for good stays down)."""
        self.plans = plans
        self.restart = restart
        self.clock = clock
        self.members: dict[str, Member] = {}
        self._auth = PeerAuth(secret, "supervisor") if secret else None
        self._restarted: dict[str, float] = {}
        self.changes: list[ClusterPlan] = []

    async def _probe(self, client: httpx.AsyncClient, plan: ClusterPlan, shard_id: str) -> None:
        settings = plan.failover
        now = self.clock()
        member = self.members.setdefault(shard_id, Member.new(now))
        until = lease_until(member, now, settings)
        self.members[shard_id] = member.sent(now) if until else member
        try:
            r = await client.post(
                f"{plan.member(shard_id).peer_url}/internal/lease",
                json={"epoch": plan.plan_epoch, "until": until},
                timeout=settings.probe_timeout_s,
            )
            r.raise_for_status()
            report = report_of(r.json())
        except (httpx.HTTPError, ValueError, KeyError):
            self.members[shard_id] = self.members[shard_id].missed()
            return
        self.members[shard_id] = self.members[shard_id].answered(self.clock(), report)

    async def tick(self, client: httpx.AsyncClient) -> ClusterPlan | None:
        """Probe every ring member at once, then apply ``decide``'s change, if any."""
        plan = self.plans.read()
        if plan.failover is None:
            return None
        await asyncio.gather(*(self._probe(client, plan, s) for s in plan.ring_spec.shards))
        nxt = decide(plan, self.members, self.clock())
        if nxt is not None:
            self.plans.write(nxt)
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
        async with httpx.AsyncClient(auth=self._auth) as client:
            while not stop.is_set():
                started = self.clock()
                try:
                    await self.tick(client)
                except Exception:  # a bad plan file or a transient error: try again next tick
                    log.exception("supervisor tick failed")
                interval = self.plans.read().failover
                pause = (interval.probe_interval_s if interval else 1.0) - (self.clock() - started)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.05, pause))


def _local_restart(state_dir: Path) -> Callable[[str], bool]:
    """Restart a dead shard of ``themis up``'s cluster with its recorded launch settings."""
    from .local_cluster import _alive, start_shard, tls_env_of

    def restart(shard_id: str) -> bool:
        path = state_dir / "cluster.json"
        state = json.loads(path.read_text())
        plan_path = Path(state["plan"])
        plan = ClusterPlan.load(plan_path)
        for i, record in enumerate(state["shards"]):
            if record["shard_id"] == shard_id and not _alive(record["pid"]):
                tls = tls_env_of(state_dir, shard_id) if state.get("ca") else {}
                state["shards"][i] = start_shard(
                    state_dir, plan_path, state["launch"], plan.member(shard_id), tls
                )
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(state, indent=2))
                os.replace(tmp, path)
                return True
        return False

    return restart


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="themis-supervisor", description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=Path(".themis"))
    parser.add_argument("--no-restart", action="store_true", help="never restart a dead shard")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per probe
    state = json.loads((args.state_dir / "cluster.json").read_text())
    supervisor = Supervisor(
        FilePlan(Path(state["plan"])),
        state["launch"].get("gossip_secret"),
        restart=None if args.no_restart else _local_restart(args.state_dir),
    )
    asyncio.run(supervisor.run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
