"""Merkle digests of what two owners share, per vnode range — the pure half of anti-entropy.

Two shards that own some keys in common compare exactly those keys. Each side hashes every
shared record — storage key and stamp (``storage.stamps``), so equal digests mean equal
records — into the leaf of the vnode range the key falls in (XOR of per-record hashes: order
does not matter, and an empty range is all zeros). Leaves are grouped ``fanout`` to a bucket,
and buckets are what travel first: only buckets whose digests differ are opened, and only the
records in them are exchanged, so two replicas that agree cost one small message.

A shard keeps its leaves current as it writes (``storage.digests``), so a round costs the
ranges, not the records; ``leaf_digests`` is the same computation over a list of records, the
reference the kept leaves are checked against.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from themis_core.ring import HashRing

from ...storage.digests import DIGEST_BYTES, Partition
from ...storage.digests import record_hash as stored_record_hash
from ...storage.names import storage_key, storage_key_urn, urn
from ...storage.stamps import Stamp

ZERO = bytes(DIGEST_BYTES)
#: Leaves (vnode ranges) per bucket: 6144 ranges (3 shards × 2048 vnodes) make 96 buckets.
FANOUT = 64


@dataclass(frozen=True)
class Pair:
    """The keys two shards both own under one ring."""

    ring: HashRing
    copies: int
    a: str
    b: str
    #: range → do both shards own it (every key of a vnode range has the same owners)
    _shared: dict[int, bool] = field(default_factory=dict, compare=False, repr=False)

    def shares(self, collection: str, key: str) -> bool:
        return self.shares_leaf(self.leaf(collection, key))

    def shares_leaf(self, leaf: int) -> bool:
        shared = self._shared.get(leaf)
        if shared is None:
            owners = self.ring.owners_of_range(leaf, self.copies)
            shared = self._shared[leaf] = self.a in owners and self.b in owners
        return shared

    def leaf(self, collection: str, key: str) -> int:
        return self.ring.range_of(urn(collection, key))

    def bucket(self, collection: str, key: str) -> int:
        return self.leaf(collection, key) // FANOUT

    def partition(self) -> Partition:
        """The ring's vnode ranges as the leaves a store keeps digests for."""
        ring = self.ring
        return Partition(ring.spec, lambda skey: ring.range_of(storage_key_urn(skey)))


def record_hash(collection: str, key: str, stamp: Stamp) -> bytes:
    return stored_record_hash(storage_key(collection, key), stamp)


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(DIGEST_BYTES, "big")


def leaf_digests(records: Iterable[tuple[str, str, Stamp]], pair: Pair) -> dict[int, bytes]:
    """Leaf (vnode range) → digest of the shared records in it; empty leaves are left out."""
    leaves: dict[int, bytes] = {}
    for collection, key, stamp in records:
        leaf = pair.leaf(collection, key)  # one hash per record: owners come per range
        if pair.shares_leaf(leaf):
            leaves[leaf] = _xor(leaves.get(leaf, ZERO), record_hash(collection, key, stamp))
    return {leaf: d for leaf, d in leaves.items() if d != ZERO}


def shared_leaves(leaves: dict[int, bytes], pair: Pair) -> dict[int, bytes]:
    """The leaves of a whole store's digests (``storage.digests``) that ``pair`` shares."""
    return {leaf: d for leaf, d in leaves.items() if pair.shares_leaf(leaf)}


def bucket_digests(leaves: dict[int, bytes]) -> dict[int, str]:
    """Bucket → hash of its leaves in order (hex, for the wire); empty buckets are left out."""
    grouped: dict[int, list[tuple[int, bytes]]] = {}
    for leaf, digest in leaves.items():
        grouped.setdefault(leaf // FANOUT, []).append((leaf, digest))
    out = {}
    for bucket, items in grouped.items():
        h = hashlib.blake2b(digest_size=DIGEST_BYTES)
        for leaf, digest in sorted(items):
            h.update(leaf.to_bytes(4, "big") + digest)
        out[bucket] = h.hexdigest()
    return out


def differing(mine: dict[int, str], theirs: dict[int, str]) -> set[int]:
    """Buckets whose digests differ (one side empty counts)."""
    return {b for b in set(mine) | set(theirs) if mine.get(b) != theirs.get(b)}


def newer_than(
    mine: dict[tuple[str, str], Stamp], theirs: dict[tuple[str, str], Stamp]
) -> list[tuple[str, str]]:
    """Keys where ``mine`` holds a record that outranks ``theirs`` (or they lack the key)."""
    return [k for k, stamp in mine.items() if k not in theirs or stamp > theirs[k]]
