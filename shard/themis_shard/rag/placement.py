"""Where a RAG answer is generated: on the shard that holds most of the retrieved passages.

The context already travels with the request, so this is about keeping generation near the data
it read (and spreading RAG load the way the data is spread), not about moving bytes. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence


def generation_shard(
    keys: Sequence[str],
    owners: Callable[[str], Sequence[str]],
    me: str,
    unavailable: Collection[str] = (),
) -> str:
    """The live shard first in the owner lists of the most hits (``keys`` best first); ties go to
    this shard, then to the owner of the better hit. ``me`` when no owner is live."""
    holders: list[str] = []
    for key in keys:
        live = [s for s in owners(key) if s not in unavailable]
        if live:
            holders.append(me if me in live else live[0])
    if not holders:
        return me
    counts = Counter(holders)
    best = max(counts.values())
    if counts.get(me) == best:
        return me
    return next(s for s in holders if counts[s] == best)
