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
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter
from themis_core.ring import stable_hash64

from ..transport.remote import PeerUnavailable

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
    return list(
        iter_ranked(domain, candidates, loads, open_breakers, fallback, policy, tiebreak_key=tiebreak_key)
    )


def iter_ranked(
    domain: str | None,
    candidates: Iterable[Capability],
    loads: Mapping[str, float],
    open_breakers: Collection[str],
    fallback: str | Sequence[str] | None,
    policy: RoutingPolicy = RoutingPolicy(),
    *,
    tiebreak_key: str = "",
) -> Iterator[RoutingDecision]:
    """:func:`rank_by_domain`, lazily: the head costs only the shards skipped to reach it."""
    want = _normalise_domain(domain)
    table = ScoreTable.build(want, candidates if want else (), policy)
    return table.ranked(loads, open_breakers, fallback, tiebreak_key)


class ScoreTable:
    """One domain's candidates, best adapter per shard, sorted by (tier, score) — the paper's σ map.

    Built once per gossip change (the wrapper caches it), so a routing decision walks the
    sorted list from the top, skipping open breakers, and sorts only the band of equal scores
    it stops in (LEAST_LOADED needs the live loads, so that part is per request).
    """

    __slots__ = ("any_candidate", "domain", "entries", "policy", "reasons")

    def __init__(
        self,
        domain: str,
        entries: list[tuple[int, float, Capability]],
        any_candidate: bool,
        policy: RoutingPolicy,
    ) -> None:
        self.domain = domain
        self.entries = entries  # (tier index, score, capability), sorted by tier then score desc
        self.any_candidate = any_candidate
        self.policy = policy
        self.reasons = [f"tier{t + 1}: accuracy_delta > {th}" for t, th in enumerate(policy.thresholds)]

    @classmethod
    def build(cls, domain: str, candidates: Iterable[Capability], policy: RoutingPolicy) -> ScoreTable:
        want = _normalise_domain(domain)
        thresholds = policy.thresholds
        best: dict[str, tuple[int, float, Capability]] = {}
        any_candidate = False
        for cap in candidates:
            d = cap.domain
            if d != want and _normalise_domain(d) != want:
                continue
            s = policy.score(cap)
            if not math.isfinite(s):  # finite iff α and λ are (γ ≥ 0)
                continue
            any_candidate = True
            tier = next((t for t, th in enumerate(thresholds) if cap.accuracy_delta > th), None)
            if tier is None:
                continue
            old = best.get(cap.shard_id)
            if old is None or tier < old[0] or (tier == old[0] and s > old[1]):
                best[cap.shard_id] = (tier, s, cap)
        entries = sorted(best.values(), key=lambda e: (e[0], -e[1]))
        return cls(want, entries, any_candidate, policy)

    def ranked(
        self,
        loads: Mapping[str, float],
        open_breakers: Collection[str],
        fallback: str | Sequence[str] | None,
        tiebreak_key: str = "",
    ) -> Iterator[RoutingDecision]:
        entries, tol = self.entries, self.policy.tie_tolerance
        i, n = 0, len(entries)
        while i < n:
            tier, top, cap = entries[i]
            if cap.shard_id in open_breakers:
                i += 1
                continue
            # The band: following entries of the same tier whose score ties with this one.
            j = i + 1
            while j < n and entries[j][0] == tier and top - entries[j][1] <= tol:
                j += 1
            band = [e for e in entries[i:j] if e[2].shard_id not in open_breakers]
            if len(band) > 1:
                band.sort(
                    key=lambda e: (
                        loads.get(e[2].shard_id, 0.0),
                        stable_hash64(f"{tiebreak_key}\x00{e[2].shard_id}"),
                    )
                )
            for t, s, c in band:
                yield RoutingDecision(c.shard_id, t + 1, self.reasons[t], False, s, c.adapter_id or None)
            i = j

        if not self.domain:
            reason = "no domain hint: consistent hash"
        elif not self.any_candidate:
            reason = "no live adapter for domain: consistent hash"
        else:
            reason = f"no adapter above θ{len(self.policy.thresholds)}: consistent hash"
        seen: set[str] = set()
        ranked_ids = None
        for shard in _as_sequence(fallback):
            if shard in seen or shard in open_breakers:
                continue
            if ranked_ids is None:
                ranked_ids = {e[2].shard_id for e in entries}
            if shard in ranked_ids:
                continue
            seen.add(shard)
            yield RoutingDecision(shard, None, reason, True)


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
    head = next(
        iter_ranked(
            domain, candidates, loads, open_breakers, fallback_shard, policy, tiebreak_key=tiebreak_key
        ),
        None,
    )
    if head is not None:
        return head
    owners = _as_sequence(fallback_shard)
    if not owners:
        raise ValueError("no candidate and no fallback shard: pass the ring owner(s) of the key")
    return RoutingDecision(owners[0], None, "every candidate's breaker is open", True)


# ---- the thin stateful wrapper -----------------------------------------------------------


class CapabilityView(Protocol):
    """Read side of the gossip state the router needs (see ``gossip_state.RoutingView``).

    A view may also offer ``version() -> Hashable``: a token that changes whenever
    ``capabilities`` could answer differently; the router then caches per-domain tables.
    """

    def capabilities(self, domain: str) -> Iterable[Capability]: ...

    def loads(self) -> Mapping[str, float]: ...


class NoShardAvailable(Exception):
    """Every shard that could serve the request failed; ``errors`` maps shard → exception."""

    def __init__(self, errors: dict[str, BaseException]) -> None:
        super().__init__(
            "no shard could serve the request: "
            + ", ".join(f"{s}: {type(e).__name__}" for s, e in errors.items())
        )
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
        self._tables: dict[str, tuple[Hashable, ScoreTable]] = {}
        r = registry or CollectorRegistry()
        self.fallbacks = Counter(
            "themis_domain_routing_fallback_total",
            "Domain-hinted requests served by consistent-hash routing (no adapter above θ3, or all failed)",
            registry=r,
        )
        self.decisions = Counter(
            "themis_domain_routing_decisions_total",
            "Routing decisions by tier (1-3, fallback, none)",
            ["tier"],
            registry=r,
        )

    def rank(self, domain: str | None, key: str) -> list[RoutingDecision]:
        return list(self._iter(domain, key))

    @classmethod
    def from_settings(
        cls,
        view: CapabilityView,
        ring_owners: Callable[[str], Sequence[str]],
        open_peers: Callable[[], Collection[str]],
        settings,
        registry: CollectorRegistry | None = None,
        **kw,
    ) -> AdaptiveShardRouter:
        """``settings``: ClusterSettings, or the plan's RouterSettings (thresholds/γ from the plan)."""
        return cls(view, ring_owners, open_peers, RoutingPolicy.from_settings(settings), registry, **kw)

    def set_policy(self, policy: RoutingPolicy) -> None:
        """New thresholds/γ (the plan was reloaded): cached tables are dropped."""
        self.policy = policy
        self._tables.clear()

    def table(self, domain: str) -> ScoreTable:
        """The domain's ScoreTable, rebuilt only when the view's ``version()`` token changes."""
        version = getattr(self.view, "version", None)
        token = version() if version is not None else None
        cached = self._tables.get(domain)
        if token is not None and cached is not None and cached[0] == token:
            return cached[1]
        table = ScoreTable.build(domain, self.view.capabilities(domain) if domain else (), self.policy)
        if token is not None:
            if len(self._tables) >= 1024:  # domains come from requests: bound the cache
                self._tables.clear()
            self._tables[domain] = (token, table)
        return table

    def _iter(self, domain: str | None, key: str) -> Iterator[RoutingDecision]:
        d = _normalise_domain(domain)
        return self.table(d).ranked(self.view.loads(), self.open_peers(), self.ring_owners(key), key)

    def route(self, domain: str | None, key: str) -> RoutingDecision:
        decision = next(self._iter(domain, key), None) or route_by_domain(
            domain, (), {}, self.open_peers(), fallback_shard=self.ring_owners(key)
        )
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
        errors: dict[str, BaseException] = {}
        for decision in self._iter(domain, key):
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
        if not errors:  # every candidate's breaker is open: one last try at the ring owner
            decision = route_by_domain(domain, (), {}, (), fallback_shard=self.ring_owners(key))
            try:
                result = await call(decision.shard_id)
            except (TimeoutError, *self.retryable) as exc:
                errors[decision.shard_id] = exc
            else:
                self._count(domain, decision)
                return decision, result
        raise NoShardAvailable(errors)
