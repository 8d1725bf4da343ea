"""Weighted fair queueing over tenants, in its start-time form (SFQ, Goyal et al. 1996).

Each request gets a virtual start ``max(V, the tenant's last finish)`` and finish ``start + cost /
weight``; the smallest start goes next (arrival order on a tie) and ``V`` becomes its start. So a
tenant's backlog is spread along virtual time at its weighted rate while another tenant's new request
starts at ``V``, i.e. next: a flooder's thousand queued requests never stand in front of another
tenant's one. A tenant that was idle restarts at ``V``: no credit saved up, no burst to catch up.
"""

from __future__ import annotations

import heapq
import itertools


class FairQueue[T]:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str, T]] = []
        self._finish: dict[str, float] = {}
        self._order = itertools.count()
        self.virtual_time = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, tenant: str, item: T, cost: int = 1, weight: int = 1) -> None:
        start = max(self.virtual_time, self._finish.get(tenant, 0.0))
        self._finish[tenant] = start + max(1, cost) / weight
        heapq.heappush(self._heap, (start, next(self._order), tenant, item))

    def pop(self) -> T | None:
        """The next item in fair order, or None when nothing waits."""
        if not self._heap:
            return None
        start, _, _, item = heapq.heappop(self._heap)
        self.virtual_time = start
        return item

    def remove(self, tenant: str, item: T) -> bool:
        """Take a waiting ``item`` out (its request went away); False when it is not waiting."""
        for i, entry in enumerate(self._heap):
            if entry[2] == tenant and entry[3] is item:
                self._heap.pop(i)
                heapq.heapify(self._heap)
                return True
        return False
