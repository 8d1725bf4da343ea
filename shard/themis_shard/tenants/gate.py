"""The node's admission of one request for one tenant: priority allowance, concurrency, rate
limits, then a fair turn at the node's in-flight slots.

Checks refuse at once, naming the tenant and the limit: ``priority`` above ``max_priority`` is
403 ``priority_not_allowed``; a tenant at its ``concurrency`` or out of its ``requests_per_s`` or
``tokens_per_min`` bucket is 429 ``tenant_rate_limited`` with ``Retry-After`` (seconds until that
limit would let the request in). A refused request takes nothing from the buckets. When the node
has ``max_inflight`` slots and they are all taken, admitted requests wait in a weighted fair queue
over tenants (cost: the tokens charged, share: the tenant's ``weight``), so a tenant with a
thousand requests queued does not delay another's next one behind all of them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from themis_core.tenant_policy import DEFAULT_TENANT, TenantPolicy

from ..errors import ThemisError
from .fair import FairQueue
from .limiter import TokenBucket
from .metrics import TenantMetrics


class TenantRefused(ThemisError):
    """429 naming the tenant and the limit (``limit``) it is over."""

    status, code = 429, "tenant_rate_limited"

    def __init__(self, tenant: str, limit: str, detail: str, wait_s: float) -> None:
        retry = max(1, math.ceil(wait_s))
        super().__init__(
            f"tenant {tenant!r} is over its {limit} limit ({detail}); retry after {retry} s",
            headers={"Retry-After": str(retry)},
        )
        self.limit = limit


@dataclass
class _Tenant:
    policy: TenantPolicy
    requests: TokenBucket | None
    tokens: TokenBucket | None
    admitted: int = 0  # holding or waiting for a node slot
    waiters: set[asyncio.Future[None]] = field(default_factory=set)


class TenantGate:
    """One per node, built in the composition root. ``max_inflight`` 0: no node-wide cap (no
    waiting; the engine's own queue orders requests)."""

    def __init__(
        self,
        policies: dict[str, TenantPolicy],
        *,
        max_inflight: int = 0,
        max_waiting: int = 1024,
        metrics: TenantMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policies = policies
        self.max_inflight = max_inflight
        self.max_waiting = max_waiting
        self.metrics = metrics
        self.clock = clock
        self._tenants: dict[str, _Tenant] = {}
        self._queue: FairQueue[asyncio.Future[None]] = FairQueue()
        self._running = 0

    def _tenant(self, name: str) -> _Tenant:
        state = self._tenants.get(name)
        if state is None:
            p = self.policies.get(name) or TenantPolicy(name or DEFAULT_TENANT)
            now = self.clock()
            requests = (
                TokenBucket(p.requests_per_s, max(1.0, p.requests_per_s), now) if p.requests_per_s else None
            )
            tokens = TokenBucket(p.tokens_per_min / 60.0, p.tokens_per_min, now) if p.tokens_per_min else None
            state = self._tenants[name] = _Tenant(p, requests, tokens)
        return state

    # -- the checks (pure but for the clock) ------------------------------------------------

    def check(self, tenant: str, *, tokens: int, priority: int) -> None:
        """Admit ``tenant``'s request (charging ``tokens``) or raise the refusal naming the limit."""
        try:
            self._check(tenant, tokens=tokens, priority=priority)
        except TenantRefused as exc:
            self._count(tenant, "throttled", limit=exc.limit)
            raise
        except ThemisError:
            self._count(tenant, "refused")
            raise
        self._count(tenant, "admitted")
        if self.metrics is not None:
            self.metrics.tokens.labels(tenant=tenant).inc(tokens)

    def _check(self, tenant: str, *, tokens: int, priority: int) -> None:
        state = self._tenant(tenant)
        p = state.policy
        if p.max_priority is not None and priority > p.max_priority:
            raise ThemisError(
                f"priority {priority} is above tenant {tenant!r}'s max_priority {p.max_priority}",
                code="priority_not_allowed",
                status=403,
            )
        if p.concurrency is not None and state.admitted >= p.concurrency:
            raise TenantRefused(tenant, "concurrency", f"{p.concurrency} requests at once", 1.0)
        if state.tokens is not None and tokens > state.tokens.capacity:
            raise ThemisError(
                f"this request is charged {tokens} tokens (max_tokens × n), more than tenant "
                f"{tenant!r}'s whole tokens_per_min {p.tokens_per_min}: lower max_tokens",
                code="over_tenant_limit",
                status=400,
            )
        if len(state.waiters) >= self.max_waiting:
            raise TenantRefused(tenant, "max_waiting", f"{self.max_waiting} requests waiting", 1.0)
        now = self.clock()
        if state.requests is not None:
            wait = state.requests.wait(1, now)
            if wait > 0:
                raise TenantRefused(tenant, "requests_per_s", f"{_num(p.requests_per_s)} per second", wait)
        if state.tokens is not None:
            wait = state.tokens.wait(tokens, now)
            if wait > 0:
                raise TenantRefused(tenant, "tokens_per_min", f"{p.tokens_per_min} tokens per minute", wait)
        if state.requests is not None:
            state.requests.take(1, now)
        if state.tokens is not None:
            state.tokens.take(tokens, now)

    def _count(self, tenant: str, outcome: str, *, limit: str | None = None) -> None:
        if self.metrics is None:
            return
        self.metrics.requests.labels(tenant=tenant, outcome=outcome).inc()
        if limit is not None:
            self.metrics.throttled.labels(tenant=tenant, limit=limit).inc()

    # -- admission --------------------------------------------------------------------------

    async def acquire(self, tenant: str, *, tokens: int, priority: int) -> None:
        """Check, then hold one of the node's slots (waiting its fair turn); pair with ``release``."""
        self.check(tenant, tokens=tokens, priority=priority)
        state = self._tenant(tenant)
        state.admitted += 1
        self._gauge(tenant, state)
        if not self.max_inflight or (self._running < self.max_inflight and not len(self._queue)):
            self._running += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiters.add(turn)
        self._queue.push(tenant, turn, cost=tokens, weight=state.policy.weight)
        self._gauge(tenant, state)
        try:
            await turn
        except BaseException:
            if not self._queue.remove(tenant, turn) and turn.done() and not turn.cancelled():
                self._release_slot()  # the slot was handed over as we left: pass it on
            state.admitted -= 1
            raise
        finally:
            state.waiters.discard(turn)
            self._gauge(tenant, state)

    def release(self, tenant: str) -> None:
        state = self._tenant(tenant)
        state.admitted -= 1
        self._gauge(tenant, state)
        self._release_slot()

    def _release_slot(self) -> None:
        self._running -= 1
        while self.max_inflight and self._running < self.max_inflight:
            turn = self._queue.pop()
            if turn is None:
                return
            if not turn.done():
                self._running += 1
                turn.set_result(None)

    def _gauge(self, tenant: str, state: _Tenant) -> None:
        if self.metrics is not None:
            self.metrics.inflight.labels(tenant=tenant).set(state.admitted - len(state.waiters))
            self.metrics.waiting.labels(tenant=tenant).set(len(state.waiters))


def _num(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else str(value)
