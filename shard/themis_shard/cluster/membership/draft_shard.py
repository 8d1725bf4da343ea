"""Which peer drafts for this shard's speculative decoding (pure; paper §IV-C).

Shards that serve drafts publish ``draft_of`` — the sha256 of the model their draft model was cut
from — with every gossip heartbeat. A verify shard configured with ``draft_shard = "auto"`` picks,
among live peers drafting for *its* model and not behind an open breaker, the one with the fewest
pending LLM requests (then the shortest queue, then the id, so every shard's choice is stable).
A draft of another model would be rejected token after token, so it is never chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .gossip_state import MemberRecord


def choose_draft_shard(
    members: Mapping[str, MemberRecord],
    *,
    self_id: str,
    model_sha256: str,
    unavailable: Collection[str] = (),
) -> str | None:
    if not model_sha256:
        return None
    candidates = [
        m
        for sid, m in members.items()
        if sid != self_id and sid not in unavailable and m.load.draft_of == model_sha256
    ]
    if not candidates:
        return None
    best = min(candidates, key=lambda m: (m.load.pending_llm_requests, m.load.avg_llm_queue_ms, m.shard_id))
    return best.shard_id
