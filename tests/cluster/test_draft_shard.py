"""Spec: which peer a verify shard fetches its speculative drafts from (``draft_shard=auto``)."""

from __future__ import annotations

from themis_shard.cluster.membership.draft_shard import choose_draft_shard
from themis_shard.cluster.membership.gossip_state import MemberRecord, ShardLoad

SHA = "a" * 64


def member(sid: str, draft_of: str = "", pending: int = 0, queue_ms: float = 0.0) -> MemberRecord:
    load = ShardLoad(pending_llm_requests=pending, avg_llm_queue_ms=queue_ms, draft_of=draft_of)
    return MemberRecord(shard_id=sid, url=f"http://{sid}", load=load)


def members(*records: MemberRecord) -> dict[str, MemberRecord]:
    return {r.shard_id: r for r in records}


def test_only_peers_drafting_for_our_model_are_candidates() -> None:
    view = members(member("s0", SHA), member("s1"), member("s2", "b" * 64), member("s3", SHA))
    assert choose_draft_shard(view, self_id="s0", model_sha256=SHA) == "s3"  # never itself
    assert choose_draft_shard(view, self_id="s0", model_sha256="c" * 64) is None
    assert choose_draft_shard(view, self_id="s0", model_sha256="") is None


def test_the_least_loaded_draft_shard_wins_and_ties_break_by_id() -> None:
    view = members(
        member("s1", SHA, pending=3), member("s2", SHA, pending=1, queue_ms=40), member("s3", SHA, 1)
    )
    assert choose_draft_shard(view, self_id="s0", model_sha256=SHA) == "s3"  # same pending, shorter queue
    view = members(member("s2", SHA), member("s1", SHA))
    assert choose_draft_shard(view, self_id="s0", model_sha256=SHA) == "s1"


def test_dead_or_breaker_open_peers_are_skipped() -> None:
    view = members(member("s1", SHA), member("s2", SHA, pending=9))
    assert choose_draft_shard(view, self_id="s0", model_sha256=SHA, unavailable={"s1"}) == "s2"
    assert choose_draft_shard(view, self_id="s0", model_sha256=SHA, unavailable={"s1", "s2"}) is None
