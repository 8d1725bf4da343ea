"""Where an inference request runs in the cluster: domain routing, scatter-gather batches and
data-local EMBED. Decisions and transport only: the caller supplies the local work, and what
comes back is a result or an async stream of bytes: HTTP framing is the API layer's business.

* A request with a ``domain`` goes to the shard the router picks (announced adapter accuracy,
  KV-prefix holders, latency, load, open breakers; consistent hash as the last tier). When this
  shard is the choice it runs here (no extra hop). Forwarded calls land on ``/internal/infer``,
  which never routes again; SSE streams are relayed, and a generation stream whose shard dies
  resumes on another (``resume.py``). A non-streamed request whose shard dies runs again on the
  next one. Every answer says which shard produced it (``Routed``).
* A batch is split by ``scatter.split_batch`` into per-shard sub-batches, each run by that
  shard's continuous-batching engine at once; ``scatter.gather`` merges them in order.
* ``urns`` are embedded on a shard that holds each document (grouped per shard), so document
  text never crosses the cluster (§IV-E; ``embedding.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from themis_core.ring import HashRing

from ...errors import ThemisError, Unavailable
from ..documents.coordinator import relay
from ..placement.views import TopologySource
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .embedding import UrnEmbedding
from .resume import Opened, resumable_stream, sse_events, token_id
from .router import AdaptiveShardRouter, NoShardAvailable, RoutingDecision
from .scatter import Assignment, BatchItem, gather, split_batch

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
        self.prefix_routed = Counter(
            "themis_inference_prefix_routed_total",
            "Requests without a domain sent from the shard they landed on to the shard holding a "
            "longer KV prefix of their prompt, or to the batching engine of the host it shares",
            registry=registry,
        )
        self.resumptions = Counter(
            "themis_inference_resumptions_total",
            "Routed generations moved to another shard after the one generating them died "
            "(kind: stream, resumed after the tokens sent; request, run again)",
            ["kind"],
            registry=registry,
        )
        self.embed_local = Counter(
            "themis_embed_urns_total",
            "URNs embedded, by where (local or remote)",
            ["where"],
            registry=registry,
        )


def needs_routing(domain: str | None, clustered: bool) -> bool:
    """Only a request with a domain, in a cluster, has a choice of shard; any other runs here."""
    return bool(domain) and clustered


def plan_batch(
    requests: Sequence[dict[str, Any]],
    ring: HashRing,
    down: Collection[str],
    rank: Callable[[str | None, str], Sequence[RoutingDecision]],
) -> Assignment:
    """Assign the items of a batch to shards: each prefers its router ranking (else its hash
    owners), shards believed down take nothing unless every shard is."""
    shards = list(ring.shards)
    available = [s for s in shards if s not in down] or shards
    items = []
    for i, r in enumerate(requests):
        prompt = str(r.get("prompt", ""))
        ranked = [d.shard_id for d in rank(r.get("domain"), prompt) if d.shard_id in shards]
        items.append(BatchItem(i, r.get("domain"), tuple(ranked or ring.owners(prompt, len(shards)))))
    return split_batch(items, available)


@dataclass(frozen=True)
class Routed:
    """An answer and the shard that produced it (a stream: the shard it started on)."""

    shard: str
    answer: Any


#: Runs a request body on this shard (a resumed stream's continuation may land here).
LocalBody = Callable[[dict[str, Any]], Awaitable[Any]]


class Overloaded(PeerUnavailable):
    """A shard answered 429 (its queue is full): the router moves on to the next one."""


def _skip(shard: str, call: Callable[[str], Awaitable[Any]]) -> Callable[[str], Awaitable[Any]]:
    """``call`` that treats ``shard`` as already tried (it was full)."""

    async def other(s: str) -> Any:
        if s == shard:
            raise Overloaded(s, "overloaded", "tried first", status=429)
        return await call(s)

    return other


#: A peer that failed this way may have taken the request and died on it (not refused it).
LOST_AFTER_SENDING = frozenset({"transport_error", "timeout", "server_error"})


def stream_error(shard: str, exc: PeerUnavailable) -> bytes:
    """The in-band end of a relayed SSE stream whose peer died after the first byte."""
    err = {"error": {"code": "shard_unavailable", "message": str(exc) or shard}}
    return f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n".encode()


async def relay_sse(
    shard: str, chunks: AsyncIterator[bytes], opened: contextlib.AsyncExitStack
) -> AsyncIterator[bytes]:
    """Relay a peer's SSE stream without its ``event: token`` records (the router's alone);
    ``opened`` holds its response and is closed when this ends (or the client goes away). A
    failure mid-stream counts against the peer's breaker and ends the stream in-band."""
    try:
        async with opened:
            async for event in sse_events(chunks):
                if token_id(event) is None:
                    yield event
    except PeerUnavailable as exc:
        yield stream_error(shard, exc)


class InferenceRouting:
    """Routes single requests, batches and URN embeddings; ``local`` callables do this shard's part."""

    def __init__(
        self,
        topology: TopologySource,
        executor: RemoteExecutor,
        router: AdaptiveShardRouter,
        unavailable: Callable[[], frozenset[str]],
        registry: CollectorRegistry,
        announced: Callable[[], list[tuple[str, str]]] = list,
        *,
        stream_resumptions: int = 2,
        prefix_target: Callable[[str], str | None] | None = None,
    ) -> None:
        """``announced``: (adapter id, domain) of the adapters peers announce through gossip;
        ``stream_resumptions``: moves one stream may make when its shard dies;
        ``prefix_target``: a request key → the shard to run a request without a domain on
        instead of here (it holds a longer prefix: ``prefix_routing.prefix_target``), or None."""
        self._plan = topology
        self.executor = executor
        self.router = router
        #: peers behind an open breaker or dead to gossip
        self._unavailable = unavailable
        self._announced = announced
        self.metrics = InferenceMetrics(registry)
        self.stream_resumptions = stream_resumptions
        self._prefix_target = prefix_target
        self.embedding = UrnEmbedding(topology, executor, self.metrics.embed_local)

    @property
    def _topo(self):
        return self._plan.topology

    @property
    def clustered(self) -> bool:
        return self._topo.clustered

    def placed_adapters(self) -> list[tuple[str, str]]:
        """(name, domain) of every adapter the cluster serves: placed by the plan, or announced
        through gossip (loaded on a shard through ``/v1/adapters``)."""
        out = {a.name: a.domain for a in self._topo.plan.adapters}
        for name, domain in self._announced():
            out.setdefault(name, domain)
        return sorted(out.items())

    def routes(self, domain: str | None) -> bool:
        """Does a request with this domain need a routing decision (vs. running here)?"""
        return needs_routing(domain, self._topo.clustered)

    # -- single requests -------------------------------------------------------------------------
    async def infer(self, body: dict[str, Any], local: LocalBody, *, holder: str | None = None) -> Routed:
        """Run where the router says; ``local(body)`` runs it on this shard. A streamed request
        answers with the peer's SSE bytes, opened before this returns (so a peer that fails
        before its first byte fails over to the next shard), and resumes on another shard when
        its own dies mid-stream. ``holder``: for a request without a domain, the shard
        ``prefix_holder`` found (it runs there, or here when that shard cannot take it)."""
        return await self.forward(
            "/internal/infer",
            body,
            domain=body.get("domain"),
            key=str(body.get("prompt", "")),
            local=lambda: local(body),
            resumable=local,
            holder=holder,
        )

    async def forward(
        self,
        path: str,
        body: dict[str, Any],
        *,
        domain: str | None,
        key: str,
        local: Callable[[], Awaitable[Any]],
        resumable: LocalBody | None = None,
        holder: str | None = None,
    ) -> Routed:
        """One request through the router: to the shard it picks for ``domain`` (KV-prefix
        holders of ``key``, load, breakers; ``path`` is the peer's ``/internal`` twin), or here
        when there is no choice to make (no domain, or a lone shard). A dead, slow or overloaded
        (429) shard passes the request to the next one; only when every shard is full does the
        client see the 429. A peer that dies after taking a non-streamed request passes it on
        too (counted as a resumption). With ``resumable`` (``resumable(body)`` runs a body here,
        a continuation included) a peer's stream survives its death; without, it ends in-band.
        A request without a domain runs on the shard holding a longer KV prefix of ``key``
        (``holder`` when the caller looked it up already), else here."""
        me = self._topo.self_id
        stream = bool(body.get("stream"))

        async def call(shard: str) -> Any:
            if shard == me:
                try:
                    result = await local()
                except ThemisError as exc:
                    if exc.status == 429 and self._topo.clustered:
                        raise Overloaded(shard, "overloaded", exc.message, status=429) from exc
                    raise
                self.metrics.forwarded.labels(where="local").inc()
                return result
            try:
                if stream and resumable is not None:
                    opened = await self._open(shard, path, body)
                    result = resumable_stream(
                        opened,
                        body,
                        lambda cont, tried: self._reopen(path, cont, domain, key, tried, resumable),
                        limit=self.stream_resumptions,
                        on_resume=self.metrics.resumptions.labels(kind="stream").inc,
                    )
                elif stream:
                    result = await self._open_stream(shard, path, body)
                else:
                    result = await self.executor.request(
                        shard, "POST", path, json_body=body, idempotent=False, retries=0
                    )
            except PeerError as exc:
                if exc.status == 429:
                    raise Overloaded(shard, "overloaded", exc.message, status=429) from exc
                raise
            except PeerUnavailable as exc:
                if not stream and exc.reason in LOST_AFTER_SENDING:
                    self.metrics.resumptions.labels(kind="request").inc()
                raise
            self.metrics.forwarded.labels(where="remote").inc()
            return result

        try:
            if not self.routes(domain):
                target = holder or self.prefix_holder(key)
                if target is not None:
                    try:
                        result = await call(target)
                    except PeerUnavailable:  # dead, slow or full (429): it runs here, as it would have
                        pass
                    else:
                        self.metrics.prefix_routed.inc()
                        return Routed(target, result)
                try:
                    return Routed(me, await call(me))
                except Overloaded:  # full here: the router's choice among the others
                    decision, result = await self.router.dispatch(domain, key, _skip(me, call))
                    return Routed(decision.shard_id, result)
            decision, result = await self.router.dispatch(domain, key, call)
        except PeerError as exc:
            raise relay(exc) from None
        except NoShardAvailable as exc:
            if exc.errors and all(isinstance(e, Overloaded) for e in exc.errors.values()):
                raise ThemisError(
                    "every shard's inference queue is full",
                    code="queue_full",
                    status=429,
                    headers={"Retry-After": "1"},
                ) from None
            raise Unavailable(f"no shard could serve the request: {exc}", code="no_shard_available") from None
        return Routed(decision.shard_id, result)

    def prefix_holder(self, key: str) -> str | None:
        """A shard holding a longer KV prefix of ``key`` than this one, or the batching engine of
        the host this one shares, worth the hop; never raises (a request must not fail because
        of the prefix directory)."""
        if self._prefix_target is None or not key or not self._topo.clustered:
            return None
        try:
            target = self._prefix_target(key)
        except Exception:
            log.debug("prefix routing skipped", exc_info=True)
            return None
        return target if target != self._topo.self_id else None

    async def _open(self, shard: str, path: str, body: dict[str, Any]) -> Opened:
        """A peer's stream, open (headers received): a peer that fails before that raises here."""
        closer = contextlib.AsyncExitStack()
        try:
            chunks = await closer.enter_async_context(
                self.executor.stream(shard, "POST", path, json_body=body, chunk_size=None)
            )
        except BaseException:
            await closer.aclose()
            raise
        return Opened(shard, chunks, closer)

    async def _open_stream(self, shard: str, path: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        opened = await self._open(shard, path, body)
        assert opened.closer is not None
        return relay_sse(shard, opened.chunks, opened.closer)

    async def _reopen(
        self,
        path: str,
        body: dict[str, Any],
        domain: str | None,
        key: str,
        tried: frozenset[str],
        local: LocalBody,
    ) -> Opened:
        """The continuation of a stream on the router's next choice that has not failed it."""
        me = self._topo.self_id

        async def call(shard: str) -> Opened:
            if shard in tried:
                raise PeerUnavailable(shard, "lost_stream", "this stream already failed there")
            if shard == me:
                return Opened(me, await local(body))
            return await self._open(shard, path, body)

        _, opened = await self.router.dispatch(domain, key, call)
        return opened

    # -- batches -----------------------------------------------------------------------------
    def plan_batch(self, requests: list[dict[str, Any]]) -> Assignment:
        return plan_batch(requests, self._topo.ring, self._unavailable(), self.router.rank)

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
            reply = await self.executor.request(
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
    ) -> AsyncIterator[bytes]:
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

        return lines()

    # -- data-local embeddings -----------------------------------------------------------------
    async def embed_urns(
        self, urns: list[str], local: Callable[[list[tuple[str, str]]], Awaitable[list[list[float]]]]
    ) -> list[list[float]]:
        """Embed each document on a shard holding it; results in URN order (``embedding.py``)."""
        return await self.embedding.embed_urns(urns, local)
