"""Where documents live and who coordinates a write — pure functions of the plan.

A document's owners are the ``copies`` distinct shards the ring gives for its URN (RAID0: 1,
RAID1/5: 2, RAID6: 3). The coordinator of a write or read is the first owner that is not known
to be down; owners believed down are not dropped but tried last, so a stale failure belief costs
latency, never availability. The coordinator commits locally and replicates synchronously to the
other owners before acknowledging.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from themis_core.plan import ClusterPlan
from themis_core.ring import HashRing

from ...storage.names import urn

#: Keys whose owners a Topology remembers (cleared when full: a cache, never a source of truth).
OWNERS_MEMO = 16_384


@dataclass(frozen=True)
class Topology:
    """The plan as this shard sees it, with the ring built once."""

    plan: ClusterPlan
    self_id: str
    ring: HashRing = field(repr=False)
    #: (collection, key) → owners: a write asks for its keys' owners several times; bounded
    _owners: dict[tuple[str, str], tuple[str, ...]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    @classmethod
    def of(cls, plan: ClusterPlan, self_id: str) -> Topology:
        return cls(plan, self_id, plan.hash_ring())

    @property
    def version(self) -> int:
        """The ring version (what a handoff is about)."""
        return self.plan.ring_version

    @property
    def epoch(self) -> int:
        """The plan epoch (what writes are fenced by): the ring version, bumped again by every
        change of the in-sync set."""
        return self.plan.plan_epoch

    @property
    def in_sync_self(self) -> bool:
        return self.self_id not in self.plan.out_of_sync

    @property
    def failover(self) -> bool:
        """Does a plan authority move the in-sync set (and so must a primary hold its lease)?"""
        return self.plan.failover is not None

    @property
    def members(self) -> list[str]:
        return [m.shard_id for m in self.plan.members]

    @property
    def peers(self) -> list[str]:
        return [m for m in self.members if m != self.self_id]

    @property
    def clustered(self) -> bool:
        return len(self.plan.members) > 1

    def url(self, shard_id: str) -> str:
        """Where peers call this shard (its internal, mTLS listener when there is one)."""
        return self.plan.member(shard_id).peer_url

    def owners(self, collection: str, key: str) -> list[str]:
        found = self._owners.get((collection, key))
        if found is None:
            if len(self._owners) >= OWNERS_MEMO:
                self._owners.clear()
            found = self._owners[(collection, key)] = tuple(
                self.ring.owners(urn(collection, key), self.plan.copies)
            )
        return list(found)

    def in_sync(self, collection: str, key: str) -> list[str]:
        """The key's owners in the in-sync set, ring order: who must hold its writes."""
        out = self.plan.out_of_sync
        return [o for o in self.owners(collection, key) if o not in out]

    def owns(self, shard_id: str, collection: str, key: str) -> bool:
        return shard_id in self.owners(collection, key)


def candidates(owners: Iterable[str], down: Collection[str]) -> list[str]:
    """Owners in ring order with the ones believed down moved (not removed) to the end."""
    owners = list(owners)
    return [o for o in owners if o not in down] + [o for o in owners if o in down]


def coordinator_groups(
    keys: Iterable[tuple[str, str]], topology: Topology, down: Collection[str]
) -> dict[str, list[tuple[str, str]]]:
    """Group (collection, key) pairs by their preferred coordinator, keeping input order."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for collection, key in keys:
        groups.setdefault(candidates(topology.owners(collection, key), down)[0], []).append((collection, key))
    return groups


def merge_top_k(result_lists: Iterable[list[dict]], k: int) -> list[dict]:
    """Merge per-shard search results: best score first, one entry per URN (replicas repeat)."""
    best: dict[str, dict] = {}
    for results in result_lists:
        for item in results:
            seen = best.get(item["urn"])
            if seen is None or item["score"] > seen["score"]:
                best[item["urn"]] = item
    return sorted(best.values(), key=lambda r: (-r["score"], r["urn"]))[:k]


def same_owners(keys: Iterable[tuple[str, str]], topology: Topology) -> bool:
    """Every key has the same owners in the same order: one primary commits them all, with one
    message per other owner, each applied atomically."""
    return len({tuple(topology.owners(c, k)) for c, k in keys}) <= 1
