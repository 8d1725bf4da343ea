"""Online resharding: move each key to its new owners when the ring changes, while serving.

Pull-based. When a shard adopts a ring version it pages, from every other member, exactly the
entries (documents and tombstones) it owns under the new ring but did not own under the
previous one; each page is installed with ``apply_replicated``, so versions decide every race
with foreground writes and a replayed page is a no-op. Each key is sent by one source — its
first previous owner that the puller can reach — so a move costs one copy, not one per replica.
Start-up catch-up is the same protocol with no previous ring: every owned key is offered.

Correctness while moving: the new coordinator of a key that has not arrived yet reads through
to the previous owners before writing (so versions stay monotonic and no acknowledged write can
be overwritten by an older, later-arriving copy), and reads that miss fall back to the previous
owners until every member reports the handoff complete. Only then does a shard purge the copies
it no longer owns; a shard that left the ring reports "drained" and may be stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..ring import HashRing, RingSpec
from ..storage.documents import DocumentStore, Replicated, StoredDocument, Tombstone
from ..storage.names import storage_key, urn

log = logging.getLogger(__name__)


class MigrationState(StrEnum):
    IDLE = "idle"  # no ring change seen since start
    MIGRATING = "migrating"  # pulling the keys this shard gained
    DONE = "done"  # pulled everything; waiting for the other members
    PURGED = "purged"  # everyone done; copies this shard lost were dropped
    DRAINED = "drained"  # this shard left the ring and holds nothing any more


COMPLETE_STATES = frozenset({MigrationState.DONE, MigrationState.PURGED, MigrationState.DRAINED})


# -- pure placement decisions ------------------------------------------------------------------
def is_moved_to(requester: str, key_urn: str, ring: HashRing, previous: HashRing | None, copies: int) -> bool:
    """Does ``requester`` need this key: it owns it now and (if there was a previous ring) did not before?"""
    if requester not in ring.owners(key_urn, copies):
        return False
    return previous is None or requester not in previous.owners(key_urn, copies)


def designated_source(
    key_urn: str,
    requester: str,
    ring: HashRing,
    previous: HashRing | None,
    copies: int,
    unreachable: Collection[str],
) -> str | None:
    """The one shard that sends this key to ``requester``: its first previous owner (current
    owners when there is no previous ring) other than the requester that is not unreachable."""
    holders = (previous or ring).owners(key_urn, copies)
    for shard in holders:
        if shard != requester and shard not in unreachable:
            return shard
    return None


def entries_to_send(
    entries: Iterable[StoredDocument | Tombstone],
    self_id: str,
    requester: str,
    ring: HashRing,
    previous: HashRing | None,
    copies: int,
    unreachable: Collection[str],
) -> list[StoredDocument | Tombstone]:
    return [
        e
        for e in entries
        if is_moved_to(requester, urn(e.collection, e.key), ring, previous, copies)
        and designated_source(urn(e.collection, e.key), requester, ring, previous, copies, unreachable)
        == self_id
    ]


def keys_to_purge(
    entries: Iterable[StoredDocument | Tombstone], self_id: str, ring: HashRing, copies: int
) -> list[tuple[str, str]]:
    """Copies this shard holds but no longer owns."""
    return [
        (e.collection, e.key) for e in entries if self_id not in ring.owners(urn(e.collection, e.key), copies)
    ]


# -- wire format ---------------------------------------------------------------------------------
def encode_entry(e: StoredDocument | Tombstone) -> dict[str, Any]:
    return {"collection": e.collection, "key": e.key, "version": e.version, "document": e.document}


def decode_entries(items: list[dict[str, Any]]) -> list[Replicated]:
    return [Replicated(i["collection"], i["key"], int(i["version"]), i.get("document")) for i in items]


def serve_page(store: DocumentStore, self_id: str, request: dict[str, Any], page_size: int) -> dict[str, Any]:
    """The sender's side of one ``POST /internal/sync`` page (pure but for the store read).
    The placement test runs on the key, so values that stay put are never decoded."""
    ring = HashRing.cached(RingSpec.from_dict(request["ring"]))
    previous = HashRing.cached(RingSpec.from_dict(request["previous"])) if request.get("previous") else None
    after = bytes.fromhex(request["after"]) if request.get("after") else None
    requester, copies = request["shard"], int(request["copies"])
    unreachable = set(request.get("unreachable", ()))

    def keep(collection: str, key: str) -> bool:
        key_urn = urn(collection, key)
        return (
            is_moved_to(requester, key_urn, ring, previous, copies)
            and designated_source(key_urn, requester, ring, previous, copies, unreachable) == self_id
        )

    send, cursor = store.scan_page(after, page_size, keep)
    scanned = page_size if cursor else len(send)
    return {
        "items": [encode_entry(e) for e in send],
        "next": cursor.hex() if cursor else None,
        "scanned": scanned,
    }


def entry_bytes(items: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(i["document"])) if i["document"] is not None else 0 for i in items)


def raw_key(collection: str, key: str) -> bytes:
    return storage_key(collection, key)


@dataclass
class MigrationProgress:
    """What ``/v1/cluster/status`` and the metrics show about the current handoff."""

    ring_version: int = 0
    state: MigrationState = MigrationState.IDLE
    keys_received: int = 0
    bytes_received: int = 0
    keys_purged: int = 0
    #: dropped copies whose owners lacked that version and got it pushed before the purge
    keys_handed_over: int = 0
    peers_pending: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    started_at: float | None = None
    finished_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ring_version": self.ring_version,
            "state": self.state.value,
            "keys_received": self.keys_received,
            "bytes_received": self.bytes_received,
            "keys_purged": self.keys_purged,
            "keys_handed_over": self.keys_handed_over,
            "peers_pending": sorted(self.peers_pending),
            "unreachable": sorted(self.unreachable),
            "seconds": round((self.finished_at or time.time()) - self.started_at, 3)
            if self.started_at
            else 0,
        }


async def bounded_gather(limit: int, *aws):
    sem = asyncio.Semaphore(limit)

    async def run(aw):
        async with sem:
            return await aw

    return await asyncio.gather(*(run(a) for a in aws))
