"""Circuit breaker: opens after N consecutive failures, probes once after the window, closes on success."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from themis_shard.cluster.transport.breaker import BreakerRegistry, BreakerState, CircuitBreaker


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def breaker(clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker(failure_threshold=5, recovery_s=60.0, clock=clock)


def test_starts_closed_and_allows_calls():
    b = breaker(FakeClock())
    assert b.state is BreakerState.CLOSED
    assert b.allow()


def test_opens_after_five_consecutive_failures_not_four():
    b = breaker(FakeClock())
    for _ in range(4):
        b.record_failure()
    assert b.state is BreakerState.CLOSED and b.allow()
    b.record_failure()
    assert b.state is BreakerState.OPEN
    assert not b.allow()


def test_a_success_resets_the_consecutive_count():
    b = breaker(FakeClock())
    for _ in range(4):
        b.record_failure()
    b.record_success()
    for _ in range(4):
        b.record_failure()
    assert b.state is BreakerState.CLOSED


def test_half_open_after_recovery_window_allows_exactly_one_probe():
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(5):
        b.record_failure()
    clock.advance(59.9)
    assert b.state is BreakerState.OPEN and not b.allow()
    assert 0 < b.seconds_until_probe() <= 0.1 + 1e-9
    clock.advance(0.1)
    assert b.state is BreakerState.HALF_OPEN
    assert b.allow()  # the probe
    assert not b.allow()  # nobody else while the probe is out


def test_probe_success_closes():
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(5):
        b.record_failure()
    clock.advance(60)
    assert b.allow()
    b.record_success()
    assert b.state is BreakerState.CLOSED and b.allow() and b.consecutive_failures == 0


def test_probe_failure_reopens_for_another_full_window():
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(5):
        b.record_failure()
    clock.advance(60)
    assert b.allow()
    b.record_failure()
    assert b.state is BreakerState.OPEN
    clock.advance(59)
    assert not b.allow()
    clock.advance(1)
    assert b.state is BreakerState.HALF_OPEN


def test_late_failures_while_open_do_not_extend_the_window():
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(5):
        b.record_failure()
    clock.advance(30)
    b.record_failure()  # an in-flight call from before the opening times out
    clock.advance(30)
    assert b.state is BreakerState.HALF_OPEN


def test_a_lost_probe_expires_so_the_peer_is_not_stuck_half_open():
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(5):
        b.record_failure()
    clock.advance(60)
    assert b.allow()  # probe handed out, outcome never reported (caller cancelled)
    clock.advance(60)
    assert b.allow()


def test_registry_creates_breakers_per_peer_and_lists_open_ones():
    clock = FakeClock()
    reg = BreakerRegistry(failure_threshold=2, recovery_s=10, clock=clock)
    reg.get("a").record_failure()
    reg.get("a").record_failure()
    reg.get("b").record_failure()
    assert reg.open_peers() == {"a"}
    assert reg.states() == {"a": BreakerState.OPEN, "b": BreakerState.CLOSED}
    assert reg.state("never-seen") is BreakerState.CLOSED
    clock.advance(10)
    assert reg.open_peers() == frozenset()
    assert reg.state("a") is BreakerState.HALF_OPEN


def test_gauge_reports_states_at_scrape_time():
    clock = FakeClock()
    reg = BreakerRegistry(failure_threshold=1, recovery_s=10, clock=clock)
    metrics = CollectorRegistry()
    metrics.register(reg.collector())
    reg.get("a").record_failure()
    reg.get("b").record_success()
    assert metrics.get_sample_value("themis_circuit_breaker_state", {"peer": "a"}) == 2
    assert metrics.get_sample_value("themis_circuit_breaker_state", {"peer": "b"}) == 0
    clock.advance(10)  # no event happened, yet the scrape sees half-open
    assert metrics.get_sample_value("themis_circuit_breaker_state", {"peer": "a"}) == 1
    reg.forget("a")
    assert metrics.get_sample_value("themis_circuit_breaker_state", {"peer": "a"}) is None
