"""``GET /v1/cluster/status``: members, ring version, load and adapter capabilities."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends

from ..node import ShardNode
from .deps import node

router = APIRouter(prefix="/v1", tags=["cluster"])
Node = Annotated[ShardNode, Depends(node)]


@router.get("/cluster/status")
async def cluster_status(shard: Node) -> dict:
    cluster = shard.cluster
    topo = cluster.topology
    states = cluster.member_states()
    breakers = {peer: state.name.lower() for peer, state in cluster.executor.breakers.states().items()}
    records = cluster.state.members
    members = []
    for m in topo.plan.members:
        rec = records.get(m.shard_id)
        members.append(
            {
                "shard_id": m.shard_id,
                "url": m.url,
                "state": states.get(m.shard_id, "unknown"),
                "breaker": breakers.get(m.shard_id, "closed"),
                "load": rec.load.model_dump() if rec is not None else None,
            }
        )
    snapshot = cluster.state.snapshot(time.monotonic(), time.time())
    return {
        "shard_id": shard.settings.shard_id,
        "cluster": topo.plan.cluster,
        "ring_version": topo.version,
        "raid_mode": topo.plan.raid_mode,
        "copies": topo.plan.copies,
        "members": members,
        "capabilities": snapshot["adapters"],
        "hints_pending": cluster.hints.pending(),
        "plan_adapters": cluster.plan_adapters(),
        "gossip": cluster.gossiper is not None,
        "draining": list(topo.plan.draining),
        "migration": cluster.migration.as_dict(),
        "speculation": _speculation(shard),
    }


def _speculation(shard: ShardNode) -> dict | None:
    """Where this shard's speculative drafts come from (issue 6); None without an LLM."""
    rt = shard.llm
    if rt is None:
        return None
    s = rt.settings
    target = rt.draft_target() if s.speculative_source == "remote" else None
    return {
        "source": s.speculative_source,
        "default": s.speculative_default,
        "draft_shard": (target.peer or target.url) if target is not None else None,
        "serves_drafts_for": rt.draft_of or None,
    }
