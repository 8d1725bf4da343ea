"""``GET /v1/cluster/status``: members, ring version, load and adapter capabilities.

The answer's shape is :class:`~themis_core.status_model.ClusterStatus`, which the
operator parses with the same model.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends
from themis_core.status_model import (
    AdapterCapability,
    ClusterStatus,
    MemberLoad,
    MemberStatus,
    MigrationStatus,
    PlanAdapters,
    RingInfo,
    Speculation,
    StorageStatus,
)

from ..node import ShardNode
from .deps import current_node

router = APIRouter(prefix="/v1", tags=["cluster"])
Node = Annotated[ShardNode, Depends(current_node)]


@router.get("/cluster/status", response_model=ClusterStatus)
async def cluster_status(shard: Node) -> ClusterStatus:
    cluster = shard.cluster
    topo = cluster.topology
    states = cluster.member_states()
    breakers = {peer: state.name.lower() for peer, state in cluster.executor.breakers.states().items()}
    records = cluster.state.members
    members = []
    for m in topo.plan.members:
        rec = records.get(m.shard_id)
        members.append(
            MemberStatus(
                shard_id=m.shard_id,
                url=m.url,
                state=states.get(m.shard_id, "unknown"),
                breaker=breakers.get(m.shard_id, "closed"),
                load=MemberLoad.model_validate(rec.load.model_dump()) if rec is not None else None,
            )
        )
    snapshot = cluster.state.snapshot(time.monotonic(), time.time())
    return ClusterStatus(
        shard_id=shard.settings.shard_id,
        cluster=topo.plan.cluster,
        ring_version=topo.version,
        epoch=topo.epoch,
        out_of_sync=list(topo.plan.out_of_sync),
        rejoining=list(topo.plan.rejoining),
        min_insync=topo.plan.min_insync,
        raid_mode=topo.plan.raid_mode,
        copies=topo.plan.copies,
        ring=RingInfo.model_validate(topo.plan.ring_spec.to_dict()),
        members=members,
        capabilities=[AdapterCapability.model_validate(a) for a in snapshot["adapters"]],
        hints_pending=cluster.hints.pending(),
        plan_adapters=PlanAdapters.model_validate(cluster.plan_adapters()),
        gossip=cluster.gossiper is not None,
        draining=list(topo.plan.draining),
        migration=MigrationStatus.model_validate(cluster.migration.as_dict()),
        speculation=_speculation(shard),
        storage=StorageStatus.model_validate(shard.store.health.status()),
    )


def _speculation(shard: ShardNode) -> Speculation | None:
    """Where this shard's speculative drafts come from; None without an LLM."""
    rt = shard.llm
    if rt is None:
        return None
    s = rt.settings
    target = rt.draft_target() if s.speculative_source == "remote" else None
    return Speculation(
        source=s.speculative_source,
        default=s.speculative_default,
        draft_shard=(target.peer or target.url) if target is not None else None,
        serves_drafts_for=rt.draft_of or None,
    )
