"""The executor's storage edge: documents and vectors of the local shard and of the cluster.

Scans are ring-aware scatter-gather: every live shard scans only the rows it is the first
live owner of (``candidates(owners, down)[0] == self``), so replicas never duplicate a row and
the rows of a shard believed down are served by its next owner. A shard that fails during the
scatter is added to ``down`` and the fragment is asked again of the others. Limitation: a
replica that missed writes (hints not yet delivered) serves its possibly stale copy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from ..cluster.documents.coordinator import relay
from ..cluster.placement.owners import candidates
from ..cluster.transport.remote import PeerError, PeerUnavailable
from ..errors import NotFound, Unavailable
from ..storage.collections import CollectionConfig
from ..storage.documents import Change, StoredDocument, Write
from ..storage.names import KEY_RE, parse_urn, urn
from . import codec
from .evaluate import evaluate
from .nodes import ScanNode
from .values import sort_key, truthy

SCAN_PATH = "/internal/aql/scan"


def as_row(collection: str, doc: StoredDocument) -> dict[str, Any]:
    """A document as AQL sees it: its body plus the system attributes _key, _urn, _version."""
    return {**doc.document, "_key": doc.key, "_urn": urn(collection, doc.key), "_version": doc.version}


@dataclass
class ScanResult:
    rows: list[dict[str, Any]]
    scanned: int = 0
    shards: list[str] = field(default_factory=list)


def scan_rows(
    documents: Iterable[StoredDocument],
    node: ScanNode,
    binds: Mapping[str, Any],
    keep: Callable[[str], bool] | None = None,
    deadline: float | None = None,
) -> ScanResult:
    """One shard's part of a scan: owned rows that pass the pushed FILTERs, sorted and cut to
    ``top`` when the fragment carries SORT/LIMIT. Pure apart from reading ``documents``."""
    out: list[tuple[tuple, dict]] = []
    scanned = 0
    for doc in documents:
        if keep is not None and not keep(doc.key):
            continue
        scanned += 1
        if deadline is not None and scanned % 1024 == 0 and time.monotonic() > deadline:
            from .errors import limit_exceeded

            raise limit_exceeded("the query ran out of time during a scan", "query_timeout")
        row = as_row(node.collection, doc)
        env = {node.var: row}
        if all(truthy(evaluate(f, env, binds)) for f in node.filters):
            keys = tuple(evaluate(e, env, binds) for e, _ in node.sort)
            out.append((keys, row))
            if not node.sort and node.top is not None and len(out) >= node.top:
                break
    if node.sort:
        out.sort(key=sort_key(tuple(asc for _, asc in node.sort)))
    if node.top is not None:
        out = out[: node.top]
    if node.fields is not None:
        keep_fields = (*node.fields, "_key", "_urn", "_version")
        return ScanResult([{k: row[k] for k in keep_fields if k in row} for _, row in out], scanned)
    return ScanResult([row for _, row in out], scanned)


def encode_scan(node: ScanNode) -> dict[str, Any]:
    return {
        "var": node.var,
        "collection": node.collection,
        "filters": codec.encode(node.filters),
        "sort": codec.encode(node.sort),
        "top": node.top,
        "fields": None if node.fields is None else list(node.fields),
    }


def decode_scan(body: Mapping[str, Any]) -> ScanNode:
    sort = tuple((expr, bool(asc)) for expr, asc in codec.decode(body.get("sort") or []))
    fields = body.get("fields")
    return ScanNode(
        str(body["var"]),
        str(body["collection"]),
        codec.decode(body.get("filters") or []),
        sort,
        body.get("top"),
        fields=None if fields is None else tuple(str(f) for f in fields),
    )


class NodeData:
    """Storage access for a query coordinated by this shard (``node``: a ShardNode)."""

    def __init__(self, node) -> None:
        self.node = node

    @property
    def topology(self):
        return self.node.cluster.topology

    def collections(self) -> dict[str, CollectionConfig]:
        return {c.name: c for c in self.node.store.collections()}

    async def cluster_collections(self) -> dict[str, CollectionConfig]:
        """Local configs plus the peers': a collection created implicitly by a write exists only
        on the shards that store its documents, which need not include the coordinator."""
        out = self.collections()
        executor = self.node.cluster.executor

        async def ask(peer: str) -> list[dict]:
            try:
                reply = await executor.request(peer, "GET", "/internal/collections", retries=0, timeout_s=5)
                return reply["collections"]
            except (PeerUnavailable, PeerError, KeyError, TypeError):
                return []

        replies = await asyncio.gather(*(ask(p) for p in self.topology.peers))
        for configs in replies:
            for raw in configs:
                config = CollectionConfig.model_validate(raw)
                out.setdefault(config.name, config)
        return out

    def members(self) -> list[str]:
        return self.topology.members if self.topology.clustered else [self.topology.self_id]

    # -- scans ------------------------------------------------------------------------------
    def local_scan(
        self,
        node: ScanNode,
        binds: Mapping[str, Any],
        down: Iterable[str] = (),
        deadline: float | None = None,
    ) -> ScanResult:
        """This shard's fragment (runs in a worker thread)."""
        topo = self.topology
        keep = None
        if topo.clustered:
            down = frozenset(down)
            me = topo.self_id

            def keep(key: str) -> bool:
                return candidates(topo.owners(node.collection, key), down)[0] == me

        if not self.node.store.has_collection(node.collection):
            return ScanResult([], 0, [topo.self_id])
        # The ownership test runs on the key before the value is decoded (2/3 of the copies skipped
        # cheaply under RAID1 at 3 shards).
        result = scan_rows(self.node.store.scan(node.collection, keep=keep), node, binds, None, deadline)
        result.shards = [topo.self_id]
        return result

    async def scan(self, node: ScanNode, binds: Mapping[str, Any], deadline: float) -> ScanResult:
        topo = self.topology
        if not topo.clustered:
            return await run_in_threadpool(self.local_scan, node, binds, (), deadline)
        executor = self.node.cluster.executor
        down = set(executor.open_peers())
        body = {"fragment": encode_scan(node), "bind_vars": dict(binds), "timeout_s": 0.0}
        for _ in range(len(topo.members)):
            targets = [m for m in topo.members if m not in down] or [topo.self_id]

            async def one(target: str, down_now: frozenset[str]) -> ScanResult:
                if target == topo.self_id:
                    return await run_in_threadpool(self.local_scan, node, binds, down_now, deadline)
                timeout = max(0.1, deadline - time.monotonic())
                reply = await executor.request(
                    target,
                    "POST",
                    SCAN_PATH,
                    json_body={**body, "down": sorted(down_now), "timeout_s": timeout},
                    idempotent=True,
                    retries=1,
                    timeout_s=timeout,
                )
                return ScanResult(reply["rows"], int(reply.get("scanned", 0)), [target])

            frozen = frozenset(down)
            results = await asyncio.gather(*(one(t, frozen) for t in targets), return_exceptions=True)
            failed = []
            for target, result in zip(targets, results, strict=True):
                if isinstance(result, PeerUnavailable):
                    failed.append(target)
                elif isinstance(result, PeerError):
                    raise relay(result) from None
                elif isinstance(result, BaseException):
                    raise result
            if not failed:
                merged = ScanResult([], 0, [])
                for result in results:
                    merged.rows.extend(result.rows)
                    merged.scanned += result.scanned
                    merged.shards.extend(result.shards)
                return merged
            down |= set(failed)
        raise Unavailable(f"no live shard could scan {node.collection!r}", code="owners_unavailable")

    # -- point reads ------------------------------------------------------------------------
    async def lookup(self, collection: str, key: Any) -> dict[str, Any] | None:
        if not isinstance(key, str) or not KEY_RE.fullmatch(key):
            return None
        try:
            return as_row(collection, await self.node.cluster.documents.get(collection, key))
        except NotFound:
            return None

    def owners(self, collection: str, key: Any) -> list[str]:
        topo = self.topology
        if not topo.clustered or not isinstance(key, str) or not KEY_RE.fullmatch(key):
            return [topo.self_id]
        return topo.owners(collection, key)

    async def document(self, urn_value: str) -> tuple[str, dict[str, Any] | None]:
        collection, key = parse_urn(urn_value)
        return collection, await self.lookup(collection, key)

    # -- vectors ----------------------------------------------------------------------------
    async def vector_search(
        self, collection: str, vector: list[float], k: int, flt: dict | None
    ) -> tuple[list[tuple[float, dict[str, Any]]], list[str]]:
        """Top-k through the vector index (every shard's when clustered); (score, row) pairs and
        the shards that failed to answer."""
        node = self.node
        index = node.vectors.index(collection)

        async def local() -> list[dict]:
            started = time.perf_counter()
            hits = await run_in_threadpool(node.vectors.search, collection, vector, k, flt)
            node.metrics.vector_searches.labels(index=index.kind).inc()
            node.metrics.vector_search_latency.labels(index=index.kind).observe(time.perf_counter() - started)
            return [
                {
                    "urn": urn(collection, d.key),
                    "score": h.score,
                    "document": d.document,
                    "version": d.version,
                }
                for h, d in hits
            ]

        failed: list[str] = []
        if node.cluster.topology.clustered:
            results, failed = await node.cluster.search(
                collection, {"vector": vector, "k": k, "filter": flt}, local
            )
        else:
            results = await local()
        rows = []
        for r in results:
            _, key = parse_urn(r["urn"])
            row = {**r["document"], "_key": key, "_urn": r["urn"]}
            if "version" in r:
                row["_version"] = r["version"]
            rows.append((float(r["score"]), row))
        return rows, failed

    # -- writes -----------------------------------------------------------------------------
    async def commit(self, writes: list[Write]) -> list[Change]:
        """Through the document service, so AQL writes get embed-on-write as API writes do."""
        node = self.node
        return await node.documents.commit(writes)
