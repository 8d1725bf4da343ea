"""Scatter-gather batch inference (paper §IV-B): split a batch across shards, gather in order.

``split_batch`` is the pure policy. Items are grouped by domain (B_d); each group prefers the
shards its router ranking lists (best first); unclassified items prefer their consistent-hash
shard. No shard takes more than its fair share ⌈|B| / N⌉ (times ``slack``): the overflow of a
big group spills to the group's next-best shards, then to the least-loaded shards — which keeps
Jain's fairness index of the per-shard load high (the paper asks ≥ 0.75) without scattering a
domain over shards that lack its adapter unless it must.

``gather`` dispatches the sub-batches concurrently under one collective timeout; a sub-batch
whose shard fails or times out is retried once on the next-best shard, items that still fail
become error entries, and the merged result keeps the request order exactly.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BatchItem:
    index: int
    domain: str | None
    #: Shards in preference order for this item (router ranking, or the hash owners).
    preference: tuple[str, ...]


@dataclass(frozen=True)
class Assignment:
    #: shard → item indices (in request order).
    by_shard: dict[str, list[int]]
    #: item index → shards to try next if its shard fails (for the one retry).
    fallbacks: dict[int, tuple[str, ...]] = field(default_factory=dict)


def jain_fairness(loads: Sequence[float]) -> float:
    """(Σx)² / (n·Σx²): 1 when all equal, 1/n when one shard takes everything."""
    if not loads or not any(loads):
        return 1.0
    return sum(loads) ** 2 / (len(loads) * sum(x * x for x in loads))


def split_batch(items: Sequence[BatchItem], shards: Sequence[str], slack: float = 1.0) -> Assignment:
    """Assign every item to exactly one available shard, preferring its ranking, within the cap."""
    available = list(dict.fromkeys(shards))
    if not available:
        raise ValueError("no shard available")
    if not items:
        return Assignment({})
    cap = max(1, math.ceil(len(items) / len(available) * slack))
    load = dict.fromkeys(available, 0)
    by_shard: dict[str, list[int]] = {s: [] for s in available}
    fallbacks: dict[int, tuple[str, ...]] = {}
    # Larger groups first: they are the ones that must spill, and small ones then fit their top shard.
    groups: dict[tuple[str | None, tuple[str, ...]], list[BatchItem]] = {}
    for item in items:
        groups.setdefault((item.domain, item.preference), []).append(item)
    for (_, preference), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ranked = [s for s in preference if s in load]
        for item in members:
            target = next((s for s in ranked if load[s] < cap), None)
            if target is None:  # the group's shards are full: least-loaded shard overall
                target = min(available, key=lambda s: (load[s], available.index(s)))
            load[target] += 1
            by_shard[target].append(item.index)
            fallbacks[item.index] = tuple(s for s in (*ranked, *available) if s != target)
    return Assignment({s: sorted(ix) for s, ix in by_shard.items() if ix}, fallbacks)


Send = Callable[[str, list[int]], Awaitable[list[dict]]]


@dataclass
class GatherStats:
    sub_batches: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    failed_items: int = 0
    seconds: float = 0.0


async def gather(
    assignment: Assignment,
    n_items: int,
    send: Send,
    timeout_s: float,
    retryable: tuple[type[BaseException], ...] = (Exception,),
    on_result: Callable[[int, dict], Awaitable[None]] | None = None,
) -> tuple[list[dict], GatherStats]:
    """Run every sub-batch concurrently (one retry elsewhere on failure) within ``timeout_s``;
    returns results in request order (``{"error": ...}`` entries for items that failed)."""
    started = time.monotonic()
    deadline = started + timeout_s
    results: list[dict | None] = [None] * n_items
    stats = GatherStats(sub_batches={s: len(ix) for s, ix in assignment.by_shard.items()})

    async def deliver(index: int, value: dict) -> None:
        results[index] = value
        if on_result is not None:
            await on_result(index, value)

    async def run(shard: str, indices: list[int], attempt: int) -> None:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError("collective timeout")
            out = await asyncio.wait_for(send(shard, indices), remaining)
            if len(out) != len(indices):
                raise ValueError(f"{shard} answered {len(out)} results for {len(indices)} items")
        except (*retryable, TimeoutError) as exc:
            if attempt == 0 and time.monotonic() < deadline:
                retry: dict[str, list[int]] = {}
                for i in indices:
                    nxt = next(iter(assignment.fallbacks.get(i, ())), None)
                    if nxt is not None and nxt != shard:
                        retry.setdefault(nxt, []).append(i)
                    else:
                        await deliver(i, _error(exc, shard))
                stats.retried += sum(len(v) for v in retry.values())
                await asyncio.gather(*(run(s, ix, 1) for s, ix in retry.items()))
                return
            for i in indices:
                await deliver(i, _error(exc, shard))
            return
        for i, value in zip(indices, out, strict=True):
            await deliver(i, value)

    await asyncio.gather(*(run(s, ix, 0) for s, ix in assignment.by_shard.items()))
    final = [
        r if r is not None else {"error": {"code": "not_dispatched", "message": "item was not dispatched"}}
        for r in results
    ]
    stats.failed_items = sum(1 for r in final if "error" in r)
    stats.seconds = time.monotonic() - started
    return final, stats


def _error(exc: BaseException, shard: str) -> dict:
    code = "timeout" if isinstance(exc, TimeoutError) else "shard_unavailable"
    return {
        "error": {
            "code": code,
            "message": f"{shard}: {exc}" if str(exc) else f"{shard}: {type(exc).__name__}",
        }
    }


def preferences(
    domains: Sequence[str | None], rank: Callable[[str | None, int], Sequence[str]]
) -> list[BatchItem]:
    """Items with their preference lists from a ranking function (router or ring)."""
    return [BatchItem(i, d, tuple(rank(d, i))) for i, d in enumerate(domains)]


def loads_of(assignment: Assignment, shards: Sequence[str]) -> Mapping[str, int]:
    return {s: len(assignment.by_shard.get(s, [])) for s in shards}
