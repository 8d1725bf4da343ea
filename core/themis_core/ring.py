"""Consistent-hash ring: URN → primary shard + replicas on distinct shards.

Pure and deterministic across processes, machines and Python versions: positions come from
BLAKE2b (never the built-in ``hash()``, which is salted per process), keyed by a seed so two
clusters can use independent placements. The ring is described by plain data
(``RingSpec``: shard ids, vnodes, seed, version) so the operator can write it into the
cluster plan and every shard rebuilds the identical ring from it.

Balance: each shard owns ``vnodes`` points; its share of the key space is a sum of that many
arcs, so its relative spread is ≈ 1/√vnodes. 2048 vnodes keep max/mean load around 1.04
(worst seen 1.06) at 16 shards, and adding one shard to N moves ≈ 1/(N+1) of the keys, all onto the new shard.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

DEFAULT_VNODES = 2048
_SPACE = 1 << 64


def stable_hash64(data: bytes | str, seed: int = 0) -> int:
    """A 64-bit hash that is identical everywhere (BLAKE2b, keyed by ``seed``)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    key = seed.to_bytes(8, "big", signed=False) if seed else b""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=key).digest(), "big")


@dataclass(frozen=True)
class RingSpec:
    """The serialisable description of a ring; the plan carries this, not the points."""

    shards: tuple[str, ...]
    vnodes: int = DEFAULT_VNODES
    seed: int = 0
    version: int = 1

    def __post_init__(self) -> None:
        if not self.shards:
            raise ValueError("a ring needs at least one shard")
        if len(set(self.shards)) != len(self.shards):
            raise ValueError(f"duplicate shard ids in ring: {sorted(self.shards)}")
        if self.vnodes < 1:
            raise ValueError("vnodes must be >= 1")
        if not 0 <= self.seed < _SPACE:
            raise ValueError("seed must fit in 64 unsigned bits")

    def to_dict(self) -> dict:
        return {
            "shards": list(self.shards),
            "vnodes": self.vnodes,
            "seed": self.seed,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: dict) -> RingSpec:
        return cls(
            shards=tuple(data["shards"]),
            vnodes=int(data.get("vnodes", DEFAULT_VNODES)),
            seed=int(data.get("seed", 0)),
            version=int(data.get("version", 1)),
        )


@dataclass(frozen=True)
class HashRing:
    """Lookup structure built from a :class:`RingSpec` (sorted points + owners)."""

    spec: RingSpec
    _points: tuple[int, ...] = field(repr=False)
    _owners: tuple[str, ...] = field(repr=False)
    #: (range start, copies) → owners: at most ranges × distinct copies values
    _memo: dict[tuple[int, int], tuple[str, ...]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    @classmethod
    def build(cls, spec: RingSpec) -> HashRing:
        placed: list[tuple[int, str]] = []
        for shard in spec.shards:
            for i in range(spec.vnodes):
                placed.append((stable_hash64(f"{shard}#{i}", spec.seed), shard))
        # Ties (astronomically rare) break by shard id so every process agrees.
        placed.sort()
        return cls(spec, tuple(p for p, _ in placed), tuple(s for _, s in placed))

    @classmethod
    def cached(cls, spec: RingSpec) -> HashRing:
        """The ring for ``spec``, built once per process (building costs ~10 ms per 1k points)."""
        return _build_cached(spec)

    @classmethod
    def of(
        cls, shards: Iterable[str], vnodes: int = DEFAULT_VNODES, seed: int = 0, version: int = 1
    ) -> HashRing:
        return cls.build(RingSpec(tuple(shards), vnodes, seed, version))

    @property
    def shards(self) -> tuple[str, ...]:
        return self.spec.shards

    @property
    def version(self) -> int:
        return self.spec.version

    def key_position(self, key: str | bytes) -> int:
        return stable_hash64(key, self.spec.seed)

    def primary(self, key: str | bytes) -> str:
        return self.owners(key, 1)[0]

    @property
    def ranges(self) -> int:
        """How many vnode ranges (arcs between consecutive points) the ring has."""
        return len(self._points)

    def range_of(self, key: str | bytes) -> int:
        """The vnode range ``key`` falls in (the index of the point that ends its arc)."""
        return bisect.bisect_right(self._points, self.key_position(key)) % len(self._points)

    def owners(self, key: str | bytes, copies: int) -> list[str]:
        """The ``copies`` distinct shards for ``key``: the primary first, then its successors."""
        return self._owners_from(bisect.bisect_right(self._points, self.key_position(key)), copies)

    def owners_of_range(self, index: int, copies: int) -> list[str]:
        """The owners of every key in vnode range ``index`` (``range_of``)."""
        return self._owners_from(index, copies)

    def _owners_from(self, start: int, copies: int) -> list[str]:
        """Memoised per (range, copies): a ring is immutable, and every write asks several times."""
        memo = self._memo.get((start, copies))
        if memo is None:
            memo = self._memo[(start, copies)] = tuple(self._walk(start, copies))
        return list(memo)

    def _walk(self, start: int, copies: int) -> list[str]:
        want = min(copies, len(self.spec.shards))
        if want < 1:
            raise ValueError("copies must be >= 1")
        found: list[str] = []
        n = len(self._points)
        for step in range(n):
            shard = self._owners[(start + step) % n]
            if shard not in found:
                found.append(shard)
                if len(found) == want:
                    break
        return found

    def ownership(self) -> dict[str, float]:
        """Exact fraction of the key space each shard owns as primary (arc lengths)."""
        share = dict.fromkeys(self.spec.shards, 0)
        for i, point in enumerate(self._points):
            prev = self._points[i - 1] if i else self._points[-1] - _SPACE
            # The arc (prev, point] belongs to the owner of ``point``.
            share[self._owners[i]] += point - prev
        return {s: v / _SPACE for s, v in share.items()}


@functools.lru_cache(maxsize=16)
def _build_cached(spec: RingSpec) -> HashRing:
    return HashRing.build(spec)


def moved_keys(old: HashRing, new: HashRing, keys: Sequence[str], copies: int = 1) -> list[str]:
    """Keys whose owner set differs between two rings (the resharding work list)."""
    return [k for k in keys if old.owners(k, copies) != new.owners(k, copies)]
