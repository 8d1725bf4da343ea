"""Restart back-off for crashed containers, as the kubelet does it (pure).

Kubernetes waits 10 s after the first crash and doubles the wait up to 5 minutes; a container
that ran for 10 minutes without crashing starts again from the first step. The node uses the
same shape with configurable numbers (tests want seconds, not minutes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 10.0
    max_s: float = 300.0
    #: A run at least this long resets the back-off to ``initial_s``.
    reset_after_s: float = 600.0

    def delay(self, restarts: int) -> float:
        """Wait before restart number ``restarts`` (1 = the first restart)."""
        if restarts <= 0:
            return 0.0
        return min(self.max_s, self.initial_s * 2 ** (restarts - 1))

    def next_step(self, step: int, ran_for_s: float) -> int:
        """The back-off step after a crash, given how long the container had been running."""
        return 1 if ran_for_s >= self.reset_after_s else step + 1
