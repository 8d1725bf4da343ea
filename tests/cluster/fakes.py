"""Fakes for the cluster service's parts: peers answered in process, each over a real RocksDB.

``FakePeers`` is an ``httpx`` transport that plays every peer a part talks to: the
``/internal/...`` endpoints the cluster uses, backed by each peer's own ``DocumentStore`` (so
versions decide races exactly as on a real shard). A peer can be taken down (connection
refused) and brought back. Calls are recorded by (peer, method, path).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from themis_core.plan import ClusterPlan, ClusterSpec, Member, build_plan
from themis_shard.cluster.placement.migration import encode_entry, serve_page
from themis_shard.cluster.placement.owners import Topology
from themis_shard.cluster.placement.views import LivePlan
from themis_shard.cluster.replication import tombstone_gc
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.remote import RemoteExecutor
from themis_shard.storage.documents import DocumentStore
from themis_shard.storage.record_wire import decode_items


def url_of(shard_id: str) -> str:
    return f"http://{shard_id}.test"


def spec(n: int, raid_mode: str = "raid1", **kw: Any) -> ClusterSpec:
    members = tuple(Member(shard_id=f"s-{i}", url=url_of(f"s-{i}")) for i in range(n))
    return ClusterSpec(name="test", members=members, raid_mode=raid_mode, vnodes=64, **kw)


def plan_of(n: int, raid_mode: str = "raid1", previous: ClusterPlan | None = None, **kw: Any) -> ClusterPlan:
    return build_plan(spec(n, raid_mode, **kw), previous=previous)


def live(plan: ClusterPlan, self_id: str = "s-0", **settings: Any) -> LivePlan:
    return LivePlan(Topology.of(plan, self_id), ClusterSettings(**settings).with_router(plan.router))


async def no_sleep(_: float) -> None:
    return None


def error(status: int, code: str, message: str = "") -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message or code}})


class FakePeer:
    def __init__(self, shard_id: str, store: DocumentStore) -> None:
        self.shard_id = shard_id
        self.store = store
        self.up = True
        #: takes calls and never answers them (a paused process)
        self.paused = False
        #: what ``GET /internal/migration`` answers (None: as if the endpoint failed)
        self.migration: dict | None = {"ring_version": 0, "state": "idle"}
        self.search_results: list[dict] = []
        self.collections: dict[str, dict] = {}
        self.gossip: list[dict] = []
        #: answers ``POST /internal/gossip`` (e.g. another shard's ``Gossiper.handle``)
        self.gossip_handler: Callable[[dict], Awaitable[dict]] | None = None
        self.page_size = 500
        #: serves ``/internal/replicate/batch`` (False: a peer of a version without it, 404)
        self.batches = True
        #: answers ``/internal/anti-entropy/...`` (an ``AntiEntropy`` over this peer's store)
        self.anti_entropy = None
        #: answers ``/internal/gc/...`` (a ``TombstoneGC`` over this peer's store)
        self.gc = None

    def handle(self, method: str, path: str, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        parts = path.strip("/").split("/")
        if path == "/ready":
            return httpx.Response(200, json={"ready": True})
        if (method, path) == ("POST", "/internal/replicate"):
            if body.get("fence"):  # a coordinated write: all of it, or the newer records it lost to
                applied, newer = self.store.apply_coordinated(decode_items(body["items"]))
                return httpx.Response(
                    200, json={"applied": len(applied), "newer": [encode_entry(e) for e in newer]}
                )
            applied = self.store.apply_replicated(decode_items(body["items"]))
            return httpx.Response(200, json={"applied": len(applied)})
        if (method, path) == ("POST", "/internal/replicate/batch") and self.batches:
            answers = self.store.apply_coordinated_many([decode_items(m["items"]) for m in body["messages"]])
            return httpx.Response(
                200,
                json={
                    "results": [
                        {"applied": len(applied), "newer": [encode_entry(e) for e in newer]}
                        for applied, newer in answers
                    ]
                },
            )
        if method == "POST" and path.startswith("/internal/anti-entropy/") and self.anti_entropy is not None:
            serve = (
                self.anti_entropy.serve_digests
                if path.endswith("digests")
                else self.anti_entropy.serve_records
            )
            return httpx.Response(200, json=serve(body))
        if path.startswith("/internal/gc/") and self.gc is not None:
            if path.endswith("watermark"):
                return httpx.Response(200, json={"watermark": self.gc.watermark()})
            dropped = self.gc.drop([tombstone_gc.decode(i) for i in body["items"]])
            return httpx.Response(200, json={"dropped": [tombstone_gc.encode(t) for t in dropped]})
        if (method, path) == ("POST", "/internal/sync"):
            return httpx.Response(200, json=serve_page(self.store, self.shard_id, body, self.page_size))
        if (method, path) == ("POST", "/internal/versions"):
            return httpx.Response(
                200, json={"versions": self.store.versions([tuple(k) for k in body["keys"]])}
            )
        if (method, path) == ("GET", "/internal/migration"):
            return httpx.Response(200, json=self.migration) if self.migration else error(500, "internal")
        if (method, path) == ("POST", "/internal/gossip"):
            self.gossip.append(body)
            return httpx.Response(200, json={})
        if method == "GET" and parts[:2] == ["internal", "documents"]:
            collection, key = parts[2], parts[3]
            found = self.store.get_entry(collection, key)
            if found is None or (found.document is None and "tombstones" not in request.url.params):
                return error(404, "document_not_found")
            return httpx.Response(
                200,
                json={
                    "version": found.version,
                    "document": found.document,
                    "hlc": found.hlc,
                    "origin": found.origin,
                },
            )
        if method == "PUT" and parts[:2] == ["internal", "collections"]:
            self.collections[parts[2]] = body
            return httpx.Response(200, json=body)
        if method == "POST" and parts[:2] == ["internal", "collections"] and parts[3:] == ["search"]:
            if parts[2] not in self.collections:
                return error(404, "collection_not_found")
            return httpx.Response(200, json={"results": self.search_results})
        return error(404, "no_route", f"{method} {path}")


class FakePeers:
    """Every peer, by shard id; ``transport`` goes into a ``RemoteExecutor``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.peers: dict[str, FakePeer] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.transport = httpx.MockTransport(self._handle)

    def add(self, shard_id: str) -> FakePeer:
        peer = FakePeer(shard_id, DocumentStore(self.root / shard_id))
        self.peers[shard_id] = peer
        return peer

    def __getitem__(self, shard_id: str) -> FakePeer:
        return self.peers[shard_id]

    def close(self) -> None:
        for peer in self.peers.values():
            peer.store.close()

    def calls_to(self, shard_id: str, path: str | None = None) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[0] == shard_id and (path is None or c[2] == path)]

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        shard_id = request.url.host.removesuffix(".test")
        peer = self.peers.get(shard_id)
        if peer is None or not peer.up:
            raise httpx.ConnectError("connection refused", request=request)
        self.calls.append((shard_id, request.method, request.url.path))
        if peer.paused:
            await asyncio.Event().wait()
        if request.url.path == "/internal/gossip" and peer.gossip_handler is not None:
            return httpx.Response(200, json=await peer.gossip_handler(json.loads(request.content)))
        return peer.handle(request.method, request.url.path, request)

    def executor(self, current: LivePlan) -> RemoteExecutor:
        return RemoteExecutor(current.settings, current.url, transport=self.transport, sleep=no_sleep)


@contextmanager
def fake_peers(root: Path, *shard_ids: str) -> Iterator[FakePeers]:
    peers = FakePeers(root)
    for shard_id in shard_ids:
        peers.add(shard_id)
    try:
        yield peers
    finally:
        peers.close()
