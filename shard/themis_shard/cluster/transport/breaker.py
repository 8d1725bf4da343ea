"""Per-peer circuit breakers (closed → open → half-open → closed), pure and clock-injected.

Why: a dead or sick peer must cost a caller nothing after it has failed a few times in a row —
an open breaker refuses calls locally (no connect attempt, no timeout), so routing skips the
peer and falls back at once (paper §V-A). After the recovery window one probe is let through
(half-open); its success closes the breaker, its failure re-opens it for another window.

The state machine never reads the time itself: it asks the injected ``clock`` (monotonic
seconds), so tests drive it without sleeping. The open → half-open transition is evaluated
lazily whenever the state is read, so there is no timer task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

Clock = Callable[[], float]


class BreakerState(IntEnum):
    """Values are the gauge's: ``themis_circuit_breaker_state{peer}``."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass
class CircuitBreaker:
    """One peer's breaker. Callers ask :meth:`allow` before a call and report its outcome."""

    failure_threshold: int = 5
    recovery_s: float = 60.0
    clock: Clock = time.monotonic
    consecutive_failures: int = 0
    _opened_at: float | None = field(default=None, repr=False)
    #: When the half-open probe was handed out; a probe whose outcome is never reported
    #: (caller cancelled) expires after another recovery window so the peer is not stuck.
    _probe_at: float | None = field(default=None, repr=False)

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self.clock() - self._opened_at >= self.recovery_s:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def allow(self) -> bool:
        """May a call go out now? In half-open, only one probe at a time is allowed."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.OPEN:
            return False
        now = self.clock()
        if self._probe_at is not None and now - self._probe_at < max(self.recovery_s, 1e-9):
            return False
        self._probe_at = now
        return True

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self._opened_at = None
        self._probe_at = None

    def record_failure(self) -> None:
        self.consecutive_failures += 1
        state = self.state
        if state is BreakerState.OPEN:
            return  # a late failure of a call issued before opening must not extend the window
        if state is BreakerState.HALF_OPEN or self.consecutive_failures >= self.failure_threshold:
            self._opened_at = self.clock()
            self._probe_at = None

    def seconds_until_probe(self) -> float:
        """0 when a call may be attempted (closed / half-open), else time left in the window."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self.recovery_s - (self.clock() - self._opened_at))


class BreakerRegistry:
    """The breakers of all peers, created on first use with the same settings."""

    def __init__(
        self, failure_threshold: int = 5, recovery_s: float = 60.0, clock: Clock = time.monotonic
    ) -> None:
        self.failure_threshold = failure_threshold
        self.recovery_s = recovery_s
        self.clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    @classmethod
    def from_settings(cls, settings, clock: Clock = time.monotonic) -> BreakerRegistry:
        return cls(settings.breaker_failure_threshold, settings.breaker_recovery_s, clock)

    def get(self, peer: str) -> CircuitBreaker:
        breaker = self._breakers.get(peer)
        if breaker is None:
            breaker = CircuitBreaker(self.failure_threshold, self.recovery_s, self.clock)
            self._breakers[peer] = breaker
        return breaker

    def state(self, peer: str) -> BreakerState:
        breaker = self._breakers.get(peer)
        return breaker.state if breaker else BreakerState.CLOSED

    def states(self) -> dict[str, BreakerState]:
        return {peer: b.state for peer, b in self._breakers.items()}

    def open_peers(self) -> frozenset[str]:
        """Peers a router must skip now (open and still inside the recovery window)."""
        return frozenset(p for p, b in self._breakers.items() if b.state is BreakerState.OPEN)

    def unclosed_peers(self) -> frozenset[str]:
        """Peers whose breaker is open or half-open: an out-of-band probe may close them (a
        half-open probe handed to a caller that never reported back would else hold the peer
        for another window)."""
        return frozenset(p for p, b in self._breakers.items() if b.state is not BreakerState.CLOSED)

    def forget(self, peer: str) -> None:
        """Drop a peer that left the cluster plan (its series disappears from the gauge)."""
        self._breakers.pop(peer, None)

    def collector(self) -> BreakerStateCollector:
        return BreakerStateCollector(self)


class BreakerStateCollector(Collector):
    """Exposes ``themis_circuit_breaker_state{peer}`` computed at scrape time.

    A scrape-time collector (rather than a Gauge set on transitions) is right here because the
    open → half-open transition happens by the passage of time, not by an event.
    """

    def __init__(self, breakers: BreakerRegistry) -> None:
        self._breakers = breakers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "themis_circuit_breaker_state",
            "Circuit breaker per peer: 0 closed, 1 half-open, 2 open",
            labels=["peer"],
        )
        for peer, state in sorted(self._breakers.states().items()):
            family.add_metric([peer], int(state))
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("themis_circuit_breaker_state", "Circuit breaker per peer", labels=["peer"])
