"""The primary's lease from the plan authority: why a shard the authority fenced has already
stopped acting as a primary.

When the plan has ``failover`` settings, the authority (the operator in Kubernetes, ``themis
up``'s supervisor locally; ``themis_core.plan_authority``) probes every member every
``probe_interval_s``. Each answer carries this shard's monotonic clock (``now``); the next probe
grants a lease to ``lease_s`` past that reading, in this clock, so the authority may run on
another machine, and a probe delivered late — to a shard paused with it queued — grants nothing
stale (a paused process's monotonic clock keeps going). Once a member misses a probe the
authority stops granting it leases, and it fences the member only after the last lease it
granted has run out by its own count, which starts later than ours. A shard coordinates writes
and serves primary reads only while its lease holds: by the time a new epoch gives its keys to
another owner, it has stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...errors import Unavailable
from ..placement.owners import Topology


class AuthorityLease:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = float("-inf")

    def now(self) -> float:
        """The clock leases are counted in (the authority anchors the next one on it)."""
        return self._clock()

    def renew(self, until: float) -> None:
        """Hold until ``until`` (in this clock: a reading we reported plus the lease)."""
        self._until = max(self._until, until)

    def holds(self) -> bool:
        return self._clock() < self._until

    def remaining_s(self) -> float:
        return max(0.0, self._until - self._clock())


def lease_refusal(topology: Topology, lease: AuthorityLease | None) -> Unavailable | None:
    """503 when this shard may not act as a primary now: failover is on and its lease lapsed."""
    if lease is None or not topology.failover or lease.holds():
        return None
    return Unavailable(
        f"{topology.self_id} has not heard from the plan authority within its lease; it does not "
        "act as a primary until it does (or until the authority fails its keys over); nothing was "
        "written",
        code="lease_expired",
    )
