"""A token bucket with the clock passed in: pure, so tests drive time by hand."""

from __future__ import annotations


class TokenBucket:
    """``rate`` units per second refill up to ``capacity``; starts full."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self._level = capacity
        self._at = now

    def level(self, now: float) -> float:
        if now > self._at:
            self._level = min(self.capacity, self._level + (now - self._at) * self.rate)
            self._at = now
        return self._level

    def wait(self, n: float, now: float) -> float:
        """Seconds until ``n`` units are there (0: now). ``n`` over the capacity never fits: inf."""
        if n > self.capacity:
            return float("inf")
        missing = n - self.level(now)
        return 0.0 if missing <= 0 else missing / self.rate

    def take(self, n: float, now: float) -> None:
        self._level = self.level(now) - n
