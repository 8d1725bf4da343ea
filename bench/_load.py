"""A closed-loop load driver: ``clients`` concurrent callers, each issuing its next request as
soon as the last one answered, for a fixed time. Shared by the peer comparison so Themis and
its peer get the very same client (one pooled ``httpx.AsyncClient``, HTTP/1.1 keep-alive)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
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

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


def pool(clients: int, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=60,
        headers=headers or {},
        limits=httpx.Limits(max_connections=clients * 4 + 8, max_keepalive_connections=clients * 4 + 8),
        trust_env=False,
    )


async def run(op: Op, clients: int, seconds: float, headers: dict[str, str] | None = None) -> Result:
    """Drive ``op`` from ``clients`` callers for ``seconds`` (after one warm-up call each)."""
    done = failed = 0
    errors: list[str] = []
    async with pool(clients, headers) as http:
        await asyncio.gather(*(op(http, c, -1) for c in range(clients)), return_exceptions=True)
        stop = time.perf_counter() + seconds

        async def caller(c: int) -> None:
            nonlocal done, failed
            i = 0
            while time.perf_counter() < stop:
                try:
                    await op(http, c, i)
                    done += 1
                except Exception as exc:
                    failed += 1
                    if not errors:
                        errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller(c) for c in range(clients)))
        elapsed = time.perf_counter() - started
    return Result(done, failed, elapsed, errors[0] if errors else "")


def measure(op: Op, clients: int, seconds: float, headers: dict[str, str] | None = None) -> Result:
    return asyncio.run(run(op, clients, seconds, headers))
