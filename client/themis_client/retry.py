"""When to retry and how long to wait: pure, so the policy is tested without a network."""

from __future__ import annotations

import random
from dataclasses import dataclass

RETRY_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` includes the first try. Backoff is exponential with full jitter, capped;
    a server's ``Retry-After`` (seconds) wins when it is longer, up to ``max_delay_s``."""

    attempts: int = 4
    base_delay_s: float = 0.1
    max_delay_s: float = 5.0

    def delay(self, attempt: int, retry_after: str | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before try number ``attempt + 1`` (``attempt`` counts from 1)."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        wait = (rng or random).uniform(0, ceiling)
        hinted = _seconds(retry_after)
        if hinted is not None:
            wait = max(wait, min(hinted, self.max_delay_s))
        return wait


NO_RETRY = RetryPolicy(attempts=1)


def should_retry_status(status: int, idempotent: bool) -> bool:
    """429/503 mean the shard refused before doing the work, but only an idempotent call is
    retried on them: a retried write could otherwise apply twice if the refusal came late."""
    return idempotent and status in RETRY_STATUSES


#: Methods that change nothing on the server (RFC 9110 §9.2.1).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def retries_lost_connection(method: str) -> bool:
    """A connection that broke before the answer came (a shard shutting down closed it, a pod
    moved under a Service) is sent again only for a safe method: whatever the shard did with
    it, nothing changed. Go's ``net/http`` and browsers retry the same way. A write is never
    sent again: it may have been applied."""
    return method.upper() in SAFE_METHODS


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
