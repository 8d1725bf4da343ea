"""The local plan authority: the small process ``themis up`` starts next to the shards.

It runs ``themis_core.plan_authority.PlanAuthority`` over the cluster's plan file (probing every
member every ``probe_interval_s``, granting leases, fencing a member down past its lease and
readmitting it once caught up) and, in local mode, also restarts a shard whose process died
(with its data directory: it comes back out of sync and catches up). ``themis down`` stops it
first. In Kubernetes the operator is the authority instead (the same loop over the plan
ConfigMap). Run as ``python -m themis_shard.supervisor --state-dir``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import httpx
from themis_core.peer_signing import PeerAuth
from themis_core.plan import ClusterPlan
from themis_core.plan_authority.authority import PlanAuthority, PlanStore

__all__ = ["FilePlan", "PlanStore", "local_authority", "main"]


class FilePlan:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> ClusterPlan:
        return ClusterPlan.load(self.path)

    def write(self, plan: ClusterPlan) -> None:
        tmp = self.path.with_suffix(".supervisor.tmp")  # atomic: shards never read half a plan
        tmp.write_text(plan.to_json())
        os.replace(tmp, self.path)


def local_authority(
    plans: PlanStore,
    secret: str | None,
    *,
    restart: Callable[[str], bool] | None = None,
    clock: Callable[[], float] | None = None,
) -> PlanAuthority:
    """The local authority: probes signed with the cluster secret (``secret``), ``restart``
    wired to ``themis up``'s launcher when given."""
    auth = PeerAuth(secret, "supervisor") if secret else None
    extra = {"clock": clock} if clock is not None else {}
    return PlanAuthority(
        plans, restart=restart, client=functools.partial(httpx.AsyncClient, auth=auth), **extra
    )


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
    supervisor = local_authority(
        FilePlan(Path(state["plan"])),
        state["launch"].get("gossip_secret"),
        restart=None if args.no_restart else _local_restart(args.state_dir),
    )
    asyncio.run(supervisor.run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
