"""Adaptive domain routing (paper §III-C, §IV-A): a pure decision function and a thin wrapper.

For a request with domain hint d, the router picks

    argmax_i  α_i − γ · (λ_i / latency_unit_ms)     over shards with α_i > θ1,

then over α_i > θ2, then α_i > θ3, else the consistent-hash owner of the request's key
(a *fallback*, counted in ``themis_domain_routing_fallback_total``).

Units: α is ``accuracy_delta`` ∈ [-1, 1]; λ is ``performance_delta_p99_ms`` in milliseconds;
γ is accuracy points per ``latency_unit_ms`` of p99 delta. With the defaults (γ = 0.1,
unit = 100 ms) a shard 100 ms slower at p99 must be 0.1 points more accurate to win — the
"γ = 0.1 per 100 ms" convention of ``plan.RouterSettings``. (The paper's parenthetical, 100 ms
≙ 0.01 points, is γ = 0.1 with unit = 1000 ms; the unit is a setting, not a hidden constant.)

Scores within ``tie_tolerance`` are equal; among equals LEAST_LOADED wins (fewest
``pending_llm_requests``), then a rendezvous hash of the request key spreads the remaining
ties across shards instead of piling them onto the smallest shard id. Shards whose breaker is
open are skipped everywhere, including in the consistent-hash fallback (its ring successors
stand in).

:func:`rank_by_domain` returns the whole preference order, so a caller can fail over to the
next shard when one is down, slow or answers garbage; :func:`route_by_domain` is its head.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter

from ..ring import stable_hash64
from .remote import PeerUnavailable

T = TypeVar("T")

DEFAULT_THRESHOLDS = (0.8, 0.6, 0.4)


@dataclass(frozen=True, slots=True)
class Capability:
    """What the router knows of one shard's adapter for one domain (from gossip)."""

    shard_id: str
    domain: str
    accuracy_delta: float  # α
    performance_delta_p99_ms: float  # λ, milliseconds
    adapter_id: str = ""


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    shard_id: str
    #: 1..3 for the threshold tier that selected the shard; None for consistent-hash routing.
    tier: int | None
    reason: str
    fallback: bool
    score: float | None = None
    adapter_id: str | None = None


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    gamma: float = 0.1
    latency_unit_ms: float = 100.0
    tie_tolerance: float = 1e-6

    @classmethod
    def from_settings(cls, settings) -> RoutingPolicy:
        """From ``ClusterSettings`` or the plan's ``RouterSettings`` (which has no unit/tolerance)."""
        return cls(
            thresholds=tuple(settings.thresholds),
            gamma=float(settings.gamma),
            latency_unit_ms=float(getattr(settings, "latency_unit_ms", 100.0)),
            tie_tolerance=float(getattr(settings, "score_tie_tolerance", 1e-6)),
        )

    def score(self, cap: Capability) -> float:
        return cap.accuracy_delta - self.gamma * (cap.performance_delta_p99_ms / self.latency_unit_ms)


def _normalise_domain(domain: str | None) -> str:
    return (domain or "").strip().lower()


def _as_sequence(fallback: str | Sequence[str] | None) -> Sequence[str]:
    if fallback is None:
        return ()
    return (fallback,) if isinstance(fallback, str) else fallback


def rank_by_domain(
    domain: str | None,
    candidates: Iterable[Capability],
    loads: Mapping[str, float],
    open_breakers: Collection[str],
    fallback: str | Sequence[str] | None,
    policy: RoutingPolicy = RoutingPolicy(),
    *,
    tiebreak_key: str = "",
) -> list[RoutingDecision]:
    """Every eligible shard in preference order: tier 1, 2, 3 by score, then the ring owners.

    ``fallback`` is the consistent-hash owner of the request key, or the ring's owner list
    (primary first) so open breakers can be skipped there too. A shard appears once, at its
    best position. Never raises on odd input: non-finite scores are ignored.
    """
    want = _normalise_domain(domain)
    scored: list[tuple[float, Capability]] = []
    if want:
        for cap in candidates:
            if _normalise_domain(cap.domain) != want or cap.shard_id in open_breakers:
                continue
            if not (math.isfinite(cap.accuracy_delta) and math.isfinite(cap.performance_delta_p99_ms)):
                continue
            scored.append((policy.score(cap), cap))

    ranked: list[RoutingDecision] = []
    placed: set[str] = set()
    for tier, theta in enumerate(policy.thresholds, start=1):
        # Best eligible adapter per shard (a shard may host several adapters for one domain).
        best: dict[str, tuple[float, Capability]] = {}
        for s, c in scored:
            if c.accuracy_delta > theta and c.shard_id not in placed and (
                    c.shard_id not in best or s > best[c.shard_id][0]):
                best[c.shard_id] = (s, c)
        for s, c in _order_with_ties(list(best.values()), loads, policy.tie_tolerance, tiebreak_key):
            ranked.append(RoutingDecision(c.shard_id, tier, f"tier{tier}: accuracy_delta > {theta}",
                                          False, s, c.adapter_id or None))
            placed.add(c.shard_id)

    seen = {d.shard_id for d in ranked}
    if not want:
        reason = "no domain hint: consistent hash"
    elif not scored:
        reason = "no live adapter for domain: consistent hash"
    else:
        reason = f"no adapter above θ{len(policy.thresholds)}: consistent hash"
    for shard in _as_sequence(fallback):
        if shard in seen or shard in open_breakers:
            continue
        seen.add(shard)
        ranked.append(RoutingDecision(shard, None, reason, True))
    return ranked


def _order_with_ties(
    scored: list[tuple[float, Capability]], loads: Mapping[str, float], tolerance: float, key: str
) -> list[tuple[float, Capability]]:
    """Score descending; within a band of equal scores, least loaded first, then rendezvous hash."""
    scored = sorted(scored, key=lambda sc: -sc[0])
    out: list[tuple[float, Capability]] = []
    i = 0
    while i < len(scored):
        top = scored[i][0]
        j = i
        while j < len(scored) and top - scored[j][0] <= tolerance:
            j += 1
        band = scored[i:j]
        band.sort(key=lambda sc: (loads.get(sc[1].shard_id, 0.0),
                                  stable_hash64(f"{key}\x00{sc[1].shard_id}")))
        out.extend(band)
        i = j
    return out


def route_by_domain(
    domain: str | None,
    candidates: Iterable[Capability],
    loads: Mapping[str, float],
    open_breakers: Collection[str],
    thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
    gamma: float = 0.1,
    fallback_shard: str | Sequence[str] | None = None,
    *,
    latency_unit_ms: float = 100.0,
    tie_tolerance: float = 1e-6,
    tiebreak_key: str = "",
) -> RoutingDecision:
    """The shard for one request (the head of :func:`rank_by_domain`).

    When every candidate and every fallback owner has an open breaker, the first fallback owner
    is returned anyway (reason says so): the caller's call fails fast on the open breaker and it
    can answer 503, which is better than inventing a shard.
    """
    policy = RoutingPolicy(tuple(thresholds), gamma, latency_unit_ms, tie_tolerance)
    ranked = rank_by_domain(domain, candidates, loads, open_breakers, fallback_shard, policy,
                            tiebreak_key=tiebreak_key)
    if ranked:
        return ranked[0]
    owners = _as_sequence(fallback_shard)
    if not owners:
        raise ValueError("no candidate and no fallback shard: pass the ring owner(s) of the key")
    return RoutingDecision(owners[0], None, "every candidate's breaker is open", True)


# ---- the thin stateful wrapper -----------------------------------------------------------


class CapabilityView(Protocol):
    """Read side of the gossip state the router needs (see ``gossip_state.RoutingView``)."""

    def capabilities(self, domain: str) -> Iterable[Capability]: ...

    def loads(self) -> Mapping[str, float]: ...


class NoShardAvailable(Exception):
    """Every shard that could serve the request failed; ``errors`` maps shard → exception."""

    def __init__(self, errors: dict[str, BaseException]) -> None:
        super().__init__("no shard could serve the request: " +
                         ", ".join(f"{s}: {type(e).__name__}" for s, e in errors.items()))
        self.errors = errors


class AdaptiveShardRouter:
    """Routes with the live gossip view, the ring and the breakers; counts fallbacks."""

    def __init__(
        self,
        view: CapabilityView,
        ring_owners: Callable[[str], Sequence[str]],
        open_peers: Callable[[], Collection[str]],
        policy: RoutingPolicy = RoutingPolicy(),
        registry: CollectorRegistry | None = None,
        *,
        attempt_timeout_s: float | None = None,
        retryable: tuple[type[BaseException], ...] = (PeerUnavailable, OSError),
    ) -> None:
        self.view = view
        self.ring_owners = ring_owners
        self.open_peers = open_peers
        self.policy = policy
        #: Budget of one dispatch attempt (the paper's T_iter); None = the callee's own timeouts.
        self.attempt_timeout_s = attempt_timeout_s
        self.retryable = retryable
        r = registry or CollectorRegistry()
        self.fallbacks = Counter(
            "themis_domain_routing_fallback_total",
            "Domain-hinted requests served by consistent-hash routing (no adapter above θ3, or all failed)",
            registry=r)
        self.decisions = Counter(
            "themis_domain_routing_decisions_total", "Routing decisions by tier (1-3, fallback, none)",
            ["tier"], registry=r)

    def rank(self, domain: str | None, key: str) -> list[RoutingDecision]:
        d = _normalise_domain(domain)
        caps = self.view.capabilities(d) if d else ()
        return rank_by_domain(d, caps, self.view.loads(), self.open_peers(), self.ring_owners(key),
                              self.policy, tiebreak_key=key)

    def route(self, domain: str | None, key: str) -> RoutingDecision:
        ranked = self.rank(domain, key)
        decision = ranked[0] if ranked else route_by_domain(
            domain, (), {}, self.open_peers(), fallback_shard=self.ring_owners(key))
        self._count(domain, decision)
        return decision

    def _count(self, domain: str | None, decision: RoutingDecision) -> None:
        if not _normalise_domain(domain):
            self.decisions.labels(tier="none").inc()
            return
        self.decisions.labels(tier=str(decision.tier) if decision.tier else "fallback").inc()
        if decision.fallback:
            self.fallbacks.inc()

    async def dispatch(
        self, domain: str | None, key: str, call: Callable[[str], Awaitable[T]]
    ) -> tuple[RoutingDecision, T]:
        """Try shards in preference order until one answers; a down/slow/garbage peer costs one try.

        ``call(shard_id)`` performs the request (locally or through the RemoteExecutor); any
        exception in ``retryable`` (default: PeerUnavailable — down, slow, garbage, breaker open —
        and OSError) and a per-attempt timeout move on to the next shard. Anything else, a
        PeerError (the peer's 4xx answer) included, propagates at once: it is an answer.
        """
        ranked = self.rank(domain, key) or [
            route_by_domain(domain, (), {}, self.open_peers(), fallback_shard=self.ring_owners(key))]
        errors: dict[str, BaseException] = {}
        for decision in ranked:
            try:
                if self.attempt_timeout_s is not None and not decision.fallback:
                    result = await asyncio.wait_for(call(decision.shard_id), self.attempt_timeout_s)
                else:
                    result = await call(decision.shard_id)
            except (TimeoutError, *self.retryable) as exc:
                errors[decision.shard_id] = exc
                continue
            self._count(domain, decision)
            return decision, result
        raise NoShardAvailable(errors)
