"""Prefix-aware routing: prefer a shard that already holds the request's longest KV
prefix when its load allows. A pure function over the domain router's ranking.

For each candidate shard ``i`` (in the domain router's order)::

    score_i = domain_i + w_prefix · saved_i / prefill_tokens_per_s − w_load · pending_i

* ``domain_i`` — the domain router's score (α − γ·λ/unit) for tiered choices; the ring owners
  (no score) count as ``fallback_score``;
* ``saved_i`` — prompt tokens shard ``i`` would not prefill: its longest held prefix (from the
  prefix directory; this shard's own cache for itself). ``saved / prefill rate`` is the TTFT it
  saves in seconds, so ``w_prefix`` is score points per second saved;
* ``pending_i`` — its queued + running LLM requests (gossiped load).

"When its load allows": a shard more than ``max_extra_pending`` requests busier than the least
loaded candidate is not promoted by its prefix (it keeps its domain position). The sort is
stable: equal scores keep the domain router's order, so with no prefix anywhere and equal loads
the ranking is exactly the domain router's.

Requests without a domain have no ranking to re-order: they run where they land, unless
``prefix_target`` finds a shard whose held prefix saves at least ``min_gain_s`` of prefill more
than this shard's own (the same score, with the same load rule), like llm-d's prefix scorer —
or a shard whose engine shares this host's cores and batches them better.

**Batch efficiency.** Engines on one host (``themis up``: N model copies on one machine) share
its cores, so a request costs the host the same compute whichever of them decodes it, but k
engines decoding b/k sequences each make k smaller batches that contend for the same cores,
where one engine would make one. Measured on 2 cores, 3 shards, 8 RAG clients (48 greedy tokens):
generation spread round-robin over the three engines gave 1.28–1.40 answers/s, all of it on one
engine 1.81–1.82, with p99 latency 8.5–8.8 s against 4.6 s. So of the engines sharing a host,
the first (in slot order, not ``down``) with fewer than ``batch_room`` pending requests is the
host's *batching engine*, and it scores ``batch_weight`` more: a request landing on another
engine of the host joins its batch unless a prefix elsewhere saves more, and once it is full
the next engine takes the overflow. Shards on separate machines share nothing: no bonus.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PrefixRoutingPolicy:
    prefix_weight: float = 1.0  # score points per second of prefill saved
    load_weight: float = 0.05  # score points per pending request
    max_extra_pending: int = 8
    prefill_tokens_per_s: float = 180.0
    fallback_score: float = 0.0
    batch_weight: float = 1.0  # score points for joining the host's batching engine
    batch_room: int = 16  # pending requests at which the batching engine counts as full


def combined_score(
    domain_score: float | None, saved_tokens: int, pending: float, policy: PrefixRoutingPolicy
) -> float:
    base = policy.fallback_score if domain_score is None else domain_score
    return (
        base
        + policy.prefix_weight * max(0, saved_tokens) / policy.prefill_tokens_per_s
        - policy.load_weight * max(0.0, pending)
    )


def rank_with_prefix(
    ranked: Sequence[tuple[str, float | None]],
    held_tokens: Mapping[str, int],
    loads: Mapping[str, float],
    policy: PrefixRoutingPolicy = PrefixRoutingPolicy(),
) -> list[str]:
    """``ranked``: (shard, domain score or None) in the domain router's order → shard order."""
    if not ranked:
        return []
    least = min(loads.get(s, 0.0) for s, _ in ranked)

    def key(item: tuple[int, tuple[str, float | None]]) -> tuple[float, int]:
        i, (shard, score) = item
        pending = loads.get(shard, 0.0)
        saved = held_tokens.get(shard, 0) if pending <= least + policy.max_extra_pending else 0
        return (-combined_score(score, saved, pending, policy), i)

    return [s for _, (s, _) in sorted(enumerate(ranked), key=key)]


def batching_engine(
    me: str, colocated: Sequence[str], loads: Mapping[str, float], down: Collection[str], room: int
) -> str | None:
    """This host's batching engine (see the module's docstring): the first of ``colocated`` (the
    shards whose engines share this host's cores, in slot order; ``me`` among them) not in
    ``down`` with fewer than ``room`` pending requests. None: no other engine shares the host,
    or every one is full (each then keeps what lands on it)."""
    if me not in colocated or len(colocated) < 2:
        return None
    return next((s for s in colocated if (s == me or s not in down) and loads.get(s, 0.0) < room), None)


def prefix_target(
    me: str,
    held_tokens: Mapping[str, int],
    loads: Mapping[str, float],
    down: Collection[str],
    policy: PrefixRoutingPolicy = PrefixRoutingPolicy(),
    min_gain_s: float = 0.1,
    colocated: Sequence[str] = (),
) -> str | None:
    """The shard a request that would run here (``me``) should run on instead, because it holds
    a longer prefix of the request's prompt and its load allows, or it is the batching engine of
    the host ``me`` shares (``colocated``); None: run here.

    Candidates are this shard, every holder not in ``down`` and the batching engine; each scores
    as in ``combined_score`` with no domain score, the batching engine ``batch_weight`` more.
    The best wins only by at least ``min_gain_s`` seconds of prefill saved (in score points), so
    equal holders, or a gain smaller than a hop, keep the request where it is. Ties go to the
    lower shard id (the same answer on every shard)."""
    batching = batching_engine(me, colocated, loads, down, policy.batch_room)
    candidates = {me} | {s for s, n in held_tokens.items() if n > 0 and s not in down}
    if batching is not None:
        candidates.add(batching)
    if len(candidates) < 2:
        return None
    least = min(loads.get(s, 0.0) for s in candidates)

    def score(shard: str) -> float:
        pending = loads.get(shard, 0.0)
        saved = held_tokens.get(shard, 0) if pending <= least + policy.max_extra_pending else 0
        bonus = policy.batch_weight if shard == batching else 0.0
        return combined_score(None, saved, pending, policy) + bonus

    best = max(sorted(candidates), key=score)
    if best == me or score(best) - score(me) < policy.prefix_weight * min_gain_s:
        return None
    return best


def _router_class():
    from .router import AdaptiveShardRouter

    class PrefixAwareRouter(AdaptiveShardRouter):
        """The adaptive domain router, re-ranked by ``rank_with_prefix`` when a prefix source is
        set (``PrefixSync.held_for_prompt``: shard → tokens of the prompt's longest held prefix).
        Without a source, or when nobody holds a prefix, it is exactly the domain router."""

        prefix_source = None
        prefix_policy = PrefixRoutingPolicy()

        def _iter(self, domain, key):
            decisions = list(super()._iter(domain, key))
            source = self.prefix_source
            if source is None or len(decisions) < 2 or not key:
                return iter(decisions)
            try:
                held = source(key)
            except Exception:  # routing must never fail because of the prefix directory
                return iter(decisions)
            if not held:
                return iter(decisions)
            by = {d.shard_id: d for d in decisions}
            order = rank_with_prefix(
                [(d.shard_id, d.score) for d in decisions], held, self.view.loads(), self.prefix_policy
            )
            return iter([by[s] for s in order])

    return PrefixAwareRouter


def prefix_aware_router(
    *args,
    prefix_source: Callable[[str], Mapping[str, int]] | None = None,
    prefix_policy: PrefixRoutingPolicy | None = None,
    **kw,
):
    """``AdaptiveShardRouter.from_settings`` with prefix-aware re-ranking (see the module doc).

    ``prefix_source`` (prompt → shard → tokens of its longest held prefix) is fixed here, at
    construction; without one the router is exactly the domain router."""
    router = _router_class().from_settings(*args, **kw)
    router.prefix_source = prefix_source
    router.prefix_policy = prefix_policy or PrefixRoutingPolicy()
    return router
