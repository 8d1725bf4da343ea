"""Deficit round robin over tenants (Shreedhar & Varghese): each tenant has its own FIFO; on its
turn a tenant earns ``quantum × weight`` of credit and is served while its head costs no more
than its credit. A tenant with more waiting never takes more than its weighted share of cost
while others wait, and an idle tenant keeps no credit (no bursts saved up)."""

from __future__ import annotations

from collections import deque


class DeficitRoundRobin[T]:
    def __init__(self, quantum: int = 256) -> None:
        if quantum < 1:
            raise ValueError("quantum must be >= 1")
        self.quantum = quantum
        self._queues: dict[str, deque[tuple[int, T]]] = {}
        self._weights: dict[str, int] = {}
        self._deficit: dict[str, int] = {}
        self._active: deque[str] = deque()
        self._credited = False  # the head tenant got this turn's quantum

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def waiting(self, tenant: str) -> int:
        return len(self._queues.get(tenant, ()))

    def push(self, tenant: str, item: T, cost: int = 1, weight: int = 1) -> None:
        queue = self._queues.setdefault(tenant, deque())
        self._weights[tenant] = weight
        if not queue:
            self._active.append(tenant)
            self._deficit[tenant] = 0
        queue.append((max(1, cost), item))

    def pop(self) -> T | None:
        """The next item in fair order, or None when nothing waits."""
        while self._active:
            tenant = self._active[0]
            if not self._credited:
                self._deficit[tenant] += self.quantum * self._weights[tenant]
                self._credited = True
            queue = self._queues[tenant]
            cost, item = queue[0]
            if cost <= self._deficit[tenant]:
                queue.popleft()
                self._deficit[tenant] -= cost
                if not queue:
                    self._drop_head()
                return item
            self._active.rotate(-1)
            self._credited = False
        return None

    def remove(self, tenant: str, item: T) -> bool:
        """Take a waiting ``item`` out (its request went away); False when it is not waiting."""
        queue = self._queues.get(tenant)
        if not queue:
            return False
        for entry in queue:
            if entry[1] is item:
                queue.remove(entry)
                break
        else:
            return False
        if not queue:
            if self._active and self._active[0] == tenant:
                self._drop_head()
            else:
                self._active.remove(tenant)
                self._deficit[tenant] = 0
        return True

    def _drop_head(self) -> None:
        tenant = self._active.popleft()
        self._deficit[tenant] = 0
        self._credited = False
