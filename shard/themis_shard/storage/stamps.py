"""Stamps: the total order on a key's versions that makes replicas converge byte for byte.

A stored version carries ``(version, hlc, origin)``: the per-key version counter, the hybrid
logical clock of the shard that minted it, and that shard's id. Versions are compared as that
tuple, lexicographically, so two records minted for the same version number by different
coordinators (a stale plan, a write whose outcome was unknown) are still ordered the same way
on every replica — whichever order they arrive in, every replica keeps the same winner and so
the same bytes. Equal stamps mean the same record: one coordinator never mints two records with
one hybrid-clock reading.

The hybrid logical clock (Kulkarni et al., 2014) is wall-clock milliseconds in the high bits and
a counter in the low 16: it never goes backwards on one shard, advances past any stamp the
shard has seen (``observe``), and stays close to real time, so "later by HLC" agrees with
"later" whenever clocks are roughly in sync and still is a total order when they are not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_LOGICAL_BITS = 16


@dataclass(frozen=True, order=True)
class Stamp:
    """Compare with ``<``/``>``: the higher stamp wins on every replica."""

    version: int
    hlc: int = 0
    origin: str = ""


def wins(candidate: Stamp, stored: Stamp | None) -> bool:
    """Does ``candidate`` replace ``stored`` (None: nothing stored)? Equal stamps: no (same record)."""
    return stored is None or candidate > stored


class HybridClock:
    """A shard's hybrid logical clock; thread-safe (commits run in a thread pool)."""

    def __init__(self, wall_ms: Callable[[], int] | None = None) -> None:
        self._wall_ms = wall_ms or (lambda: time.time_ns() // 1_000_000)
        self._last = 0
        self._lock = threading.Lock()

    def now(self) -> int:
        """A reading greater than every earlier reading and every observed stamp."""
        with self._lock:
            self._last = max(self._last + 1, self._wall_ms() << _LOGICAL_BITS)
            return self._last

    def observe(self, hlc: int) -> None:
        """Move past a stamp seen from another shard, so this shard's next write orders after it."""
        with self._lock:
            self._last = max(self._last, hlc)
