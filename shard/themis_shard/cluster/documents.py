"""Cluster-wide document operations: any shard accepts any request and routes it.

Writes go to the key's coordinator (its first live owner), which commits durably and then
replicates the new versions synchronously to the other owners before acknowledging; an owner
that cannot be reached gets a durable hint instead (hinted handoff) and catches up by version
when it is back. Reads go to the coordinator too and fall back to the next owner when it is
down. Forwarded calls land on ``/internal/...`` endpoints that never forward again, so a
request makes at most one hop whatever the shards believe about each other.

Limits (stated, not hidden): a transaction or batch is atomic per coordinator; a transaction
whose keys have different coordinators is refused (400 ``cross_shard_transaction``) until a
two-phase commit exists. Without consensus, two shards that each believe the other down can
both coordinate the same key; the higher version wins on reconciliation.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from ..errors import BadRequest, NotFound, ThemisError, Unavailable
from ..ring import HashRing
from ..storage.documents import Change, DocumentStore, Replicated, StoredDocument, Write
from ..storage.names import urn
from .placement import Topology, candidates, coordinator_groups
from .remote import PeerError, PeerUnavailable, RemoteExecutor
from .replication import Replication
from .views import TopologySource

log = logging.getLogger(__name__)


def write_to_json(w: Write) -> dict[str, Any]:
    return {"collection": w.collection, "key": w.key, "document": w.document, "if_version": w.if_version}


def write_from_json(d: dict[str, Any]) -> Write:
    return Write(d["collection"], d["key"], d.get("document"), d.get("if_version"))


def change_to_json(c: Change) -> dict[str, Any]:
    return {
        "collection": c.collection,
        "key": c.key,
        "version": c.version,
        "document": c.document,
        "previous_version": c.previous_version,
    }


def change_from_json(d: dict[str, Any]) -> Change:
    return Change(d["collection"], d["key"], int(d["version"]), d.get("document"), int(d["previous_version"]))


def relay(exc: PeerError) -> ThemisError:
    """A peer's 4xx answer, re-raised here unchanged (code, message, status)."""
    return ThemisError(
        exc.message or str(exc), code=getattr(exc, "code", None) or "peer_error", status=exc.status or 400
    )


class HandoffView(Protocol):
    """What reads and writes need of a resharding in progress (``migration.Handoff``)."""

    @property
    def handoff_active(self) -> bool: ...

    def previous_ring(self) -> HashRing | None: ...

    async def fetch_previous(self, collection: str, key: str) -> None: ...


class DistributedDocuments:
    def __init__(
        self,
        store: DocumentStore,
        executor: RemoteExecutor | None,
        replication: Replication,
        topology: TopologySource,
        handoff: HandoffView | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.replication = replication
        self._plan = topology
        #: While a ring change is being handed off, reads and writes look back at the previous owners.
        self.handoff = handoff

    @property
    def topology(self) -> Topology:
        return self._plan.topology

    def _down(self) -> frozenset[str]:
        return self.executor.open_peers() if self.executor else frozenset()

    # -- writes ------------------------------------------------------------------------------
    async def commit(self, writes: list[Write]) -> list[Change]:
        """Route a set of writes that share one coordinator (else 400)."""
        topo = self.topology
        if not topo.clustered:
            return await self.commit_here(writes)
        groups = coordinator_groups([(w.collection, w.key) for w in writes], topo, self._down())
        if len(groups) > 1:
            raise BadRequest(
                "the keys of this transaction live on different shards "
                f"({', '.join(sorted(groups))}); cross-shard transactions are not supported yet",
                code="cross_shard_transaction",
            )
        first = writes[0]
        for target in candidates(topo.owners(first.collection, first.key), self._down()):
            if target == topo.self_id:
                return await self.commit_here(writes)
            try:
                # No retries on the same peer: the next owner is the better second try.
                reply = await self.executor.request(
                    target,
                    "POST",
                    "/internal/commit",
                    json_body={"writes": [write_to_json(w) for w in writes]},
                    idempotent=False,
                    retries=0,
                )
                return [change_from_json(c) for c in reply["changes"]]
            except PeerUnavailable as exc:
                log.info("coordinator %s unavailable (%s); trying the next owner", target, exc.reason)
            except PeerError as exc:
                raise relay(exc) from None
        raise Unavailable(
            f"no owner of {first.collection}/{first.key} is reachable", code="owners_unavailable"
        )

    async def commit_batch(self, writes: list[Write]) -> list[Change]:
        """A batch: atomic per coordinator, coordinators in parallel, results in input order."""
        topo = self.topology
        if not topo.clustered:
            return await self.commit_here(writes)
        groups = coordinator_groups([(w.collection, w.key) for w in writes], topo, self._down())
        by_key = {(w.collection, w.key): w for w in writes}
        results = await asyncio.gather(*(self.commit([by_key[k] for k in keys]) for keys in groups.values()))
        changes = {(c.collection, c.key): c for group in results for c in group}
        return [changes[(w.collection, w.key)] for w in writes]

    async def commit_here(self, writes: list[Write]) -> list[Change]:
        """Coordinate locally: durable commit, then synchronous replication (or hints)."""
        if self.handoff is not None and self.handoff.handoff_active:
            for w in writes:  # keys not handed off yet: continue from their newest version
                if self.store.version(w.collection, w.key) == 0:
                    await self.handoff.fetch_previous(w.collection, w.key)
        changes = await run_in_threadpool(self.store.commit, writes)
        await self.replicate(changes)
        return changes

    async def replicate(self, changes: list[Change]) -> None:
        topo = self.topology
        if not topo.clustered or not changes:
            return
        per_peer: dict[str, list[Replicated]] = {}
        for c in changes:
            for owner in topo.owners(c.collection, c.key):
                if owner != topo.self_id:
                    per_peer.setdefault(owner, []).append(
                        Replicated(c.collection, c.key, c.version, c.document)
                    )
        await asyncio.gather(*(self.replication.send(peer, items) for peer, items in per_peer.items()))

    # -- reads -------------------------------------------------------------------------------
    async def get(self, collection: str, key: str) -> StoredDocument:
        try:
            return await self._get(collection, key)
        except NotFound:
            if self.handoff is None or not self.handoff.handoff_active:
                raise
            return await self._get_previous(collection, key)

    async def _get_previous(self, collection: str, key: str) -> StoredDocument:
        """During a handoff a key may still live only on its previous owners."""
        previous = self.handoff.previous_ring()
        topo = self.topology
        for owner in candidates(previous.owners(urn(collection, key), topo.plan.copies), self._down()):
            if owner == topo.self_id or owner not in topo.members:
                continue
            try:
                reply = await self.executor.request(
                    owner, "GET", f"/internal/documents/{collection}/{key}", retries=0, timeout_s=5
                )
                return StoredDocument(collection, key, int(reply["version"]), reply["document"])
            except (PeerUnavailable, PeerError):
                continue
        raise NotFound(f"document {collection}/{key} does not exist", code="document_not_found")

    async def _get(self, collection: str, key: str) -> StoredDocument:
        """First owner that has it. An owner answering 404 does not end the search: a replica
        can hold a version whose delivery to that owner is still a pending hint."""
        topo = self.topology
        order = (
            [topo.self_id] if not topo.clustered else candidates(topo.owners(collection, key), self._down())
        )
        reached = False
        for target in order:
            if target == topo.self_id:
                reached = True
                doc = self.store.get(collection, key)
                if doc is not None:
                    return doc
                continue
            try:
                reply = await self.executor.request(
                    target, "GET", f"/internal/documents/{collection}/{key}", retries=0
                )
                return StoredDocument(collection, key, int(reply["version"]), reply["document"])
            except PeerUnavailable as exc:
                log.info("owner %s unavailable for a read (%s); trying the next", target, exc.reason)
            except PeerError as exc:
                if exc.status != 404:
                    raise relay(exc) from None
                reached = True
        if reached:
            raise NotFound(f"document {collection}/{key} does not exist", code="document_not_found")
        raise Unavailable(f"no owner of {collection}/{key} is reachable", code="owners_unavailable")
