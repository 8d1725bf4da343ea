"""A closed-loop load driver: ``clients`` concurrent callers, each issuing its next request as
soon as the last one answered, for a fixed time. Shared by the peer comparison so Themis and
its peer get the very same client: an ``httpx.AsyncClient`` per caller, HTTP/1.1 keep-alive,
so each caller holds one connection per server it calls, as etcd's own ``benchmark`` tool
gives each client its connection.

Not one client shared by every caller: httpcore's pool scans its connections and waiting
requests on every request, so with one pool the driver's own CPU per request grew with the
callers — measured on 3 shards, GET: 1.44 ms at 16 callers and 6.9 ms at 64 (146 GET/s),
against 0.45–0.52 ms with a client per caller (2,170 GET/s at 64) — and on 2 cores the
comparison measured the driver, for both peers alike, pressing every ratio towards 1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

#: op(http, client index, request index): one request; raises on any failure.
Op = Callable[[httpx.AsyncClient, int, int], Awaitable[None]]


@dataclass(frozen=True)
class Result:
    done: int
    failed: int
    seconds: float
    first_error: str = ""
    #: CPU seconds the server processes used during the timed phase (None: not measured)
    server_cpu_s: float | None = None

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_op(self) -> float | None:
        """Server CPU per completed request: steadier than a rate on a shared, noisy machine."""
        if self.server_cpu_s is None or not self.done:
            return None
        return 1000 * self.server_cpu_s / self.done


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of ``pids`` so far (Linux ``/proc``)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat(5))
    return total / os.sysconf("SC_CLK_TCK")


def caller_client(headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """One caller's client: a connection per server it calls, kept alive."""
    return httpx.AsyncClient(timeout=60, headers=headers or {}, trust_env=False)


async def run(
    op: Op, clients: int, seconds: float, headers: dict[str, str] | None = None, pids: Sequence[int] = ()
) -> Result:
    """Drive ``op`` from ``clients`` callers for ``seconds`` (after one warm-up call each);
    with ``pids``, also the CPU time those server processes spent meanwhile."""
    done = failed = 0
    errors: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        https = [await stack.enter_async_context(caller_client(headers)) for _ in range(clients)]
        await asyncio.gather(*(op(https[c], c, -1) for c in range(clients)), return_exceptions=True)
        stop = time.perf_counter() + seconds

        async def caller(c: int) -> None:
            nonlocal done, failed
            http, i = https[c], 0
            while time.perf_counter() < stop:
                try:
                    await op(http, c, i)
                    done += 1
                except Exception as exc:
                    failed += 1
                    if not errors:
                        errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                i += 1

        cpu = cpu_seconds(pids) if pids else None
        started = time.perf_counter()
        await asyncio.gather(*(caller(c) for c in range(clients)))
        elapsed = time.perf_counter() - started
        if cpu is not None:
            cpu = cpu_seconds(pids) - cpu
    return Result(done, failed, elapsed, errors[0] if errors else "", cpu)


def measure(
    op: Op, clients: int, seconds: float, headers: dict[str, str] | None = None, pids: Sequence[int] = ()
) -> Result:
    return asyncio.run(run(op, clients, seconds, headers, pids))
