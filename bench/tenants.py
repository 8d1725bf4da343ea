"""Two tenants on a real local cluster (``themis up --auth``, real shard processes and llama.cpp):
a steady tenant sends requests at a fixed rate while a flooding tenant sends as fast as its
workers can. Phases: the steady tenant alone; alongside the flooder limited by its tenant
(requests_per_s, concurrency); alongside the same flooder with no limits (what the limits buy).
With ``--max-inflight N`` the shard runs at most N inference requests at once and shares them
between tenants by weighted fair queueing (the unlimited flooder then waits its turn instead of
filling the engine's FIFO). Prints the steady tenant's p50/p99 per phase, the ratio to running
alone, and the flooder's answers by status. Numbers, not asserts: the machine is shared, compare
rows of one run.

Run: `.venv/bin/python bench/tenants.py [--seconds 20] [--steady-rps 2] [--flood-workers 16]
[--max-inflight 2]`
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _local import themis
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_core.tenant_policy import TenantPolicy

STEADY, FLOOD, UNLIMITED = new_key(), new_key(), new_key()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def call(client: httpx.AsyncClient, key: str, max_tokens: int) -> int:
    r = await client.post(
        "/v1/infer",
        json={"prompt": "Write one sentence about the sea.", "max_tokens": max_tokens, "temperature": 0},
        headers={"Authorization": f"Bearer {key}"},
    )
    return r.status_code


async def steady(client: httpx.AsyncClient, rps: float, seconds: float, max_tokens: int) -> list[float]:
    """Open loop: one request every 1/rps s whatever the answers' latency; latency of the 200s."""
    latencies: list[float] = []

    async def one() -> None:
        t0 = time.perf_counter()
        status = await call(client, STEADY, max_tokens)
        if status == 200:
            latencies.append(time.perf_counter() - t0)
        else:
            print(f"  steady tenant got {status}", file=sys.stderr)

    tasks = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(1 / rps)
    await asyncio.gather(*tasks)
    return latencies


async def flood(
    client: httpx.AsyncClient, key: str, workers: int, stop: asyncio.Event, max_tokens: int, backoff: float
):
    counts: collections.Counter[int] = collections.Counter()

    async def worker() -> None:
        while not stop.is_set():
            status = await call(client, key, max_tokens)
            counts[status] += 1
            if status == 429:
                await asyncio.sleep(backoff)  # ignores Retry-After, but is not a busy loop

    await asyncio.gather(*(worker() for _ in range(workers)))
    return counts


async def phase(url: str, args, flooder: str | None) -> tuple[list[float], collections.Counter[int]]:
    limits = httpx.Limits(max_connections=args.flood_workers + 64)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        await call(client, STEADY, args.max_tokens)  # warm the path
        stop = asyncio.Event()
        flooding = (
            asyncio.create_task(
                flood(client, flooder, args.flood_workers, stop, args.max_tokens, args.flood_backoff)
            )
            if flooder
            else None
        )
        if flooding:
            await asyncio.sleep(2)  # the flood is at full pressure before measuring
        latencies = await steady(client, args.steady_rps, args.seconds, args.max_tokens)
        stop.set()
        counts = await flooding if flooding else collections.Counter()
        return latencies, counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--steady-rps", type=float, default=2)
    parser.add_argument("--flood-workers", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--flood-rps", type=float, default=1, help="the limited flooder's requests_per_s")
    parser.add_argument("--flood-concurrency", type=int, default=1)
    parser.add_argument(
        "--flood-backoff",
        type=float,
        default=0.25,
        help="seconds a flood worker waits after a 429 (the bench's client shares the shard's CPUs)",
    )
    parser.add_argument(
        "--max-inflight",
        type=int,
        default=0,
        help="THEMIS_TENANTS_MAX_INFLIGHT: >0 shares that many slots between tenants by fair queueing",
    )
    args = parser.parse_args()
    policies = [
        TenantPolicy("flood", requests_per_s=args.flood_rps, concurrency=args.flood_concurrency),
        TenantPolicy("steady"),
        TenantPolicy("unlimited"),
    ]
    keys = [p.line() for p in policies] + [
        entry_for(STEADY, Role.client, "steady", "steady").line(),
        entry_for(FLOOD, Role.client, "flood", "flood").line(),
        entry_for(UNLIMITED, Role.client, "unlimited", "unlimited").line(),
    ]
    os.environ["THEMIS_AUTH_KEYS"] = "; ".join(keys)  # the shards inherit it, next to --auth's file
    os.environ["THEMIS_TENANTS_MAX_INFLIGHT"] = str(args.max_inflight)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "1", "--auth", "--base-port", str(port), timeout=600)
        url = f"http://127.0.0.1:{port}"
        try:
            rows = [
                ("steady alone", *asyncio.run(phase(url, args, None))),
                (
                    f"+ flood limited ({args.flood_rps:g}/s, conc {args.flood_concurrency})",
                    *asyncio.run(phase(url, args, FLOOD)),
                ),
                ("+ flood unlimited", *asyncio.run(phase(url, args, UNLIMITED))),
                ("steady alone, again (drift)", *asyncio.run(phase(url, args, None))),
            ]
        finally:
            themis(cwd, "down", timeout=120)
    print(
        f"\n== steady tenant at {args.steady_rps:g} req/s for {args.seconds:g} s, max_tokens "
        f"{args.max_tokens}; flooder: {args.flood_workers} workers, {args.flood_backoff:g} s after a 429; "
        "1 shard; "
        f"THEMIS_TENANTS_MAX_INFLIGHT={args.max_inflight} =="
    )
    header = f"{'phase':<34}{'n':>5}{'p50 s':>9}{'p99 s':>9}{'p99/alone':>11}  flooder answers"
    print(header)
    alone_p99 = pct(rows[0][1], 0.99)
    for name, lat, counts in rows:
        p99 = pct(lat, 0.99)
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "-"
        print(
            f"{name:<34}{len(lat):>5}{statistics.median(lat):>9.3f}{p99:>9.3f}"
            f"{p99 / alone_p99:>11.2f}  {answers}"
        )


if __name__ == "__main__":
    main()
