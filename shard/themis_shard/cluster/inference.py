"""Cluster-wide inference: domain routing, scatter-gather batches and data-local EMBED.

* ``/v1/infer`` with a ``domain`` goes to the shard the adaptive router picks (announced
  adapter accuracy, latency, load, open breakers; consistent hash as the last tier). When this
  shard is the choice it runs here — no extra hop. Forwarded calls land on ``/internal/infer``,
  which never routes again; SSE streams are relayed byte for byte.
* ``/v1/infer:batch`` is split by ``scatter.split_batch`` into per-shard sub-batches, each run
  by that shard's continuous-batching engine at once; ``scatter.gather`` merges in order.
* ``/v1/embed`` with ``urns`` embeds every document on a shard that holds it (grouped per
  shard), so document text never crosses the cluster (§IV-E).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from fastapi.responses import StreamingResponse
from prometheus_client import CollectorRegistry, Counter, Histogram

from ..errors import BadRequest, ThemisError, Unavailable
from ..storage.names import parse_urn, urn
from .documents import relay
from .placement import candidates, coordinator_groups
from .remote import PeerError, PeerUnavailable, _peer_error
from .router import NoShardAvailable
from .scatter import BatchItem, gather, split_batch

log = logging.getLogger(__name__)

FAN_OUT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)


class InferenceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.forwarded = Counter(
            "themis_inference_forwarded_total",
            "Inference requests by where they ran",
            ["where"],
            registry=registry,
        )
        self.fan_out = Histogram(
            "themis_batch_fan_out_latency_seconds",
            "Scatter-gather batch latency (dispatch to last result)",
            buckets=FAN_OUT_BUCKETS,
            registry=registry,
        )
        self.sub_batch = Histogram(
            "themis_batch_sub_batch_size",
            "Items per shard sub-batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=registry,
        )
        self.batch_retried = Counter(
            "themis_batch_retried_items_total", "Batch items retried on another shard", registry=registry
        )
        self.batch_failed = Counter(
            "themis_batch_failed_items_total", "Batch items answered with an error", registry=registry
        )
        self.embed_local = Counter(
            "themis_embed_urns_total",
            "URNs embedded, by where (local or remote)",
            ["where"],
            registry=registry,
        )


class InferenceRouting:
    def __init__(self, service, registry: CollectorRegistry) -> None:
        self.service = service
        self.metrics = InferenceMetrics(registry)

    @property
    def _topo(self):
        return self.service.topology

    def routes(self, domain: str | None) -> bool:
        """Does a request with this domain need a routing decision (vs. running here)?"""
        return bool(domain) and self._topo.clustered

    # -- single requests -------------------------------------------------------------------------
    async def infer(self, body: dict[str, Any], local: Callable[[], Awaitable[Any]]) -> Any:
        """Run where the router says; ``local()`` runs it on this shard."""
        me = self._topo.self_id
        stream = bool(body.get("stream"))

        async def call(shard: str) -> Any:
            if shard == me:
                self.metrics.forwarded.labels(where="local").inc()
                return await local()
            result = await (
                self._forward_stream(shard, body)
                if stream
                else self.service.executor.request(
                    shard, "POST", "/internal/infer", json_body=body, idempotent=False, retries=0
                )
            )
            self.metrics.forwarded.labels(where="remote").inc()
            return result

        try:
            _, result = await self.service.router.dispatch(body.get("domain"), body.get("prompt", ""), call)
        except PeerError as exc:
            raise relay(exc) from None
        except NoShardAvailable as exc:
            raise Unavailable(f"no shard could serve the request: {exc}", code="no_shard_available") from None
        return result

    async def _forward_stream(self, shard: str, body: dict[str, Any]) -> StreamingResponse:
        """Open the peer's SSE stream; connection failures before the first byte fail over."""
        ex = self.service.executor
        breaker = ex.breakers.get(shard)
        if not breaker.allow():
            raise PeerUnavailable(shard, "circuit_open")
        request = ex.client.build_request("POST", f"{self.service._resolve(shard)}/internal/infer", json=body)
        try:
            resp = await ex.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            breaker.record_failure()
            raise PeerUnavailable(shard, "connect_error", str(exc)) from None
        if resp.status_code >= 500:
            await resp.aclose()
            breaker.record_failure()
            raise PeerUnavailable(shard, "server_error", f"HTTP {resp.status_code}", status=resp.status_code)
        breaker.record_success()
        if resp.status_code >= 400:
            await resp.aread()
            await resp.aclose()
            raise _peer_error(shard, resp)

        async def relay_bytes() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            except httpx.HTTPError as exc:  # the peer died mid-stream: end cleanly, in-band
                err = {"error": {"code": "shard_unavailable", "message": f"{shard}: {exc}"}}
                yield f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n".encode()
            finally:
                await resp.aclose()

        return StreamingResponse(
            relay_bytes(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # -- batches -----------------------------------------------------------------------------
    def plan_batch(self, requests: list[dict[str, Any]]):
        topo = self._topo
        down = self.service.executor.open_peers() | self.service.view.dead_peers()
        available = [s for s in topo.ring.shards if s not in down] or list(topo.ring.shards)
        items = []
        for i, r in enumerate(requests):
            ranked = [d.shard_id for d in self.service.router.rank(r.get("domain"), str(r.get("prompt", "")))]
            ranked = [s for s in ranked if s in topo.ring.shards] or list(
                topo.ring.owners(str(r.get("prompt", "")), len(topo.ring.shards))
            )
            items.append(BatchItem(i, r.get("domain"), tuple(ranked)))
        return split_batch(items, available)

    async def infer_batch(
        self,
        requests: list[dict[str, Any]],
        local_batch: Callable[[list[dict[str, Any]]], Awaitable[list[dict]]],
        timeout_s: float,
        on_result: Callable[[int, dict], Awaitable[None]] | None = None,
    ) -> list[dict]:
        me = self._topo.self_id
        assignment = self.plan_batch(requests)
        started = time.monotonic()

        async def send(shard: str, indices: list[int]) -> list[dict]:
            sub = [requests[i] for i in indices]
            self.metrics.sub_batch.observe(len(sub))
            if shard == me:
                return await local_batch(sub)
            remaining = max(0.1, timeout_s - (time.monotonic() - started))
            reply = await self.service.executor.request(
                shard,
                "POST",
                "/internal/infer:batch",
                json_body={"requests": sub},
                idempotent=False,
                retries=0,
                timeout_s=remaining,
            )
            return reply["results"]

        results, stats = await gather(
            assignment,
            len(requests),
            send,
            timeout_s,
            retryable=(PeerUnavailable, OSError),
            on_result=on_result,
        )
        self.metrics.fan_out.observe(stats.seconds)
        self.metrics.batch_retried.inc(stats.retried)
        self.metrics.batch_failed.inc(stats.failed_items)
        return results

    def stream_batch(
        self,
        requests: list[dict[str, Any]],
        local_batch: Callable[[list[dict[str, Any]]], Awaitable[list[dict]]],
        timeout_s: float,
    ) -> StreamingResponse:
        """NDJSON, one ``{"index": i, ...result}`` line per item as soon as it completes."""
        queue: asyncio.Queue = asyncio.Queue()

        async def on_result(index: int, value: dict) -> None:
            await queue.put({"index": index, **value})

        async def lines() -> AsyncIterator[bytes]:
            task = asyncio.create_task(self.infer_batch(requests, local_batch, timeout_s, on_result))
            sent = 0
            try:
                while sent < len(requests):
                    item = await queue.get()
                    sent += 1
                    yield (json.dumps(item, separators=(",", ":")) + "\n").encode()
                await task
            finally:
                if not task.done():
                    task.cancel()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    # -- data-local embeddings -----------------------------------------------------------------
    async def embed_urns(
        self, urns: list[str], local: Callable[[list[tuple[str, str]]], Awaitable[list[list[float]]]]
    ) -> list[list[float]]:
        """Embed each document on a shard holding it; results in URN order."""
        parsed = [parse_urn(u) for u in urns]
        topo = self._topo
        if not topo.clustered:
            self.metrics.embed_local.labels(where="local").inc(len(parsed))
            return await local(parsed)
        down = self.service.executor.open_peers()
        groups = coordinator_groups(parsed, topo, down)
        out: dict[tuple[str, str], list[float]] = {}

        async def run(shard: str, keys: list[tuple[str, str]]) -> None:
            for target in candidates([shard, *[s for s in topo.owners(*keys[0]) if s != shard]], down):
                if target == topo.self_id:
                    vectors = await local(keys)
                    self.metrics.embed_local.labels(where="local").inc(len(keys))
                else:
                    try:
                        reply = await self.service.executor.request(
                            target,
                            "POST",
                            "/internal/embed",
                            json_body={"urns": [urn(*k) for k in keys]},
                            idempotent=True,
                            retries=0,
                        )
                    except PeerUnavailable:
                        continue
                    except PeerError as exc:
                        raise relay(exc) from None
                    vectors = reply["embeddings"]
                    self.metrics.embed_local.labels(where="remote").inc(len(keys))
                out.update(zip(keys, vectors, strict=True))
                return
            raise Unavailable(f"no shard holding {urn(*keys[0])} is reachable", code="owners_unavailable")

        # Keys in one group share a coordinator but maybe not all owners: regroup by owner set.
        by_owners: dict[tuple[str, tuple[str, ...]], list[tuple[str, str]]] = {}
        for shard, keys in groups.items():
            for k in keys:
                by_owners.setdefault((shard, tuple(topo.owners(*k))), []).append(k)
        await asyncio.gather(*(run(shard, keys) for (shard, _), keys in by_owners.items()))
        return [out[k] for k in parsed]


async def embed_local_documents(node, keys: list[tuple[str, str]]) -> list[list[float]]:
    """Embed documents held by this shard, from their collection's ``embed_field`` (or "text")."""
    if node.llm is None:
        raise BadRequest("this shard has no embedding model", code="embedding_unavailable")
    texts = []
    for collection, key in keys:
        doc = node.store.get(collection, key)
        if doc is None:
            raise ThemisError(
                f"document {urn(collection, key)} does not exist", code="document_not_found", status=404
            )
        field = (
            node.store.collection(collection).embed_field if node.store.has_collection(collection) else None
        ) or "text"
        text = doc.document.get(field)
        if not isinstance(text, str) or not text:
            raise BadRequest(
                f"{urn(collection, key)} has no text in field {field!r} to embed", code="no_text"
            )
        texts.append(text)
    return await node.llm.embed(texts)
