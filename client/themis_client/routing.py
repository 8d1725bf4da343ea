"""Token-aware routing: send a key's request straight to its primary shard.

Any shard serves any key, but a write that lands on a shard that is not the key's primary takes
one more hop (the shard forwards it to the primary, which coordinates it). Like token-aware
drivers of Cassandra or ScyllaDB, :class:`KeyRouter` rebuilds the cluster's consistent-hash ring
from ``GET /v1/cluster/status`` (its ``ring`` and ``members``) and names the primary itself.
The placement is the shard's (``themis_core.ring``): BLAKE2b positions of ``shard#i`` vnodes,
keyed by the ring seed, and a key's owners are the distinct shards clockwise from the position
of its URN. A stale ring costs a hop (the shard forwards), never a wrong answer; call
:meth:`KeyRouter.refresh` after a resharding.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from .models import ClusterStatus


def position(data: str, seed: int) -> int:
    """A 64-bit ring position (BLAKE2b keyed by the seed; the shard's ``stable_hash64``)."""
    key = seed.to_bytes(8, "big") if seed else b""
    return int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8, key=key).digest(), "big")


@dataclass(frozen=True)
class KeyRouter:
    """Which shard is a document's primary, and its URL."""

    shards: tuple[str, ...]
    urls: Mapping[str, str]
    seed: int
    points: tuple[int, ...]
    owners_at: tuple[str, ...]

    @classmethod
    def from_status(cls, status: ClusterStatus) -> KeyRouter:
        if status.ring is None:
            raise ValueError("this cluster's status carries no ring (a shard older than token-aware routing)")
        ring = status.ring
        placed = sorted((position(f"{s}#{i}", ring.seed), s) for s in ring.shards for i in range(ring.vnodes))
        return cls(
            tuple(ring.shards),
            {m.shard_id: (m.url or "").rstrip("/") for m in status.members},
            ring.seed,
            tuple(p for p, _ in placed),
            tuple(s for _, s in placed),
        )

    @classmethod
    def from_cluster(cls, url: str, headers: Mapping[str, str] | None = None) -> KeyRouter:
        """Read the ring from any shard (``/v1/cluster/status`` needs an admin key when keys are on)."""
        r = httpx.get(f"{url.rstrip('/')}/v1/cluster/status", headers=dict(headers or {}), timeout=30)
        r.raise_for_status()
        return cls.from_status(ClusterStatus.model_validate(r.json()))

    def owners(self, collection: str, key: str, copies: int) -> list[str]:
        """The key's ``copies`` owners, its primary first."""
        start = bisect.bisect_right(self.points, position(f"urn:themis:{collection}:{key}", self.seed))
        found: list[str] = []
        n = len(self.points)
        for step in range(n):
            shard = self.owners_at[(start + step) % n]
            if shard not in found:
                found.append(shard)
                if len(found) == min(copies, len(self.shards)):
                    break
        return found

    def primary(self, collection: str, key: str) -> str:
        return self.owners(collection, key, 1)[0]

    def url(self, shard_id: str) -> str:
        return self.urls[shard_id]

    def primary_url(self, collection: str, key: str) -> str:
        return self.urls[self.primary(collection, key)]

    def refresh(self, url: str, headers: Mapping[str, str] | None = None) -> KeyRouter:
        return KeyRouter.from_cluster(url, headers)
