"""Spec: the inference pipeline's decisions (pure) and the SSE relay from a peer."""

from __future__ import annotations

import asyncio
import contextlib

from themis_core.ring import HashRing
from themis_shard.api.types import InferBody
from themis_shard.cluster.routing.inference import needs_routing, plan_batch, relay_sse
from themis_shard.cluster.routing.router import RoutingDecision
from themis_shard.documents.service import pending_embeddings
from themis_shard.inference.service import engine_chunks
from themis_shard.storage.documents import Write
from themis_shard.vector.catalog import EMBEDDING_FIELD

from .peers import running
from .test_remote import make


def test_only_a_domain_in_a_cluster_needs_a_routing_decision():
    assert needs_routing("legal", clustered=True)
    assert not needs_routing(None, clustered=True)
    assert not needs_routing("legal", clustered=False)


def test_a_batch_follows_the_ranking_and_avoids_shards_that_are_down():
    ring = HashRing.of(["a", "b", "c"])

    def rank(domain, _prompt):
        return [RoutingDecision("b", domain, "adapter", False)] if domain == "legal" else []

    requests = [{"prompt": "x", "domain": "legal"}, {"prompt": "y"}, {"prompt": "z"}]
    plan = plan_batch(requests, ring, down={"c"}, rank=rank)
    assert 0 in plan.by_shard["b"]
    assert "c" not in plan.by_shard
    assert sorted(i for items in plan.by_shard.values() for i in items) == [0, 1, 2]


def test_engine_chunks_cover_the_batch_in_order():
    assert engine_chunks(0) == []
    assert [list(r) for r in engine_chunks(5, limit=2)] == [[0, 1], [2, 3], [4]]


def test_a_forwarded_request_is_the_body_as_validated():
    body = InferBody.model_validate({"prompt": "p", "domain": "legal", "stop": ["."]})
    assert body.request().to_json() == body.model_dump(exclude_none=True)


def test_an_unknown_field_is_refused_not_ignored():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="extra"):
        InferBody.model_validate({"prompt": "p", "response_format": {"type": "json_object"}})


def test_embed_on_write_picks_text_puts_without_an_embedding():
    writes = [
        Write("c", "1", {"text": "a"}),
        Write("c", "2", {"text": "b", EMBEDDING_FIELD: [1.0]}),
        Write("c", "3", None),
        Write("plain", "4", {"text": "d"}),
        Write("c", "5", {"text": 7}),
    ]
    assert pending_embeddings(writes, {"c": "text"}.get) == [(0, "a")]


def relayed(query: str):
    async def go(url):
        ex, _, _ = make({"a": url})
        async with ex:
            opened = contextlib.AsyncExitStack()
            chunks = await opened.enter_async_context(ex.stream("a", "GET", f"/sse?{query}", chunk_size=None))
            out = [chunk async for chunk in relay_sse("a", chunks, opened)]
            return out, ex.breakers.get("a").consecutive_failures

    with running() as server:
        return asyncio.run(go(server.url()))


def test_a_peer_dying_mid_stream_ends_the_relay_in_band():
    out, failures = relayed("n=500&die=1")
    assert out[:-1] == [b'data: {"token":"t%d"}\n\n' % i for i in range(500)]
    assert b'"code": "shard_unavailable"' in out[-1] and out[-1].endswith(b"data: [DONE]\n\n")
    assert failures == 1


def test_the_relay_keeps_the_peers_token_records_to_itself():
    out, failures = relayed("n=3")
    assert (
        b"".join(out)
        == b'data: {"token":"t0"}\n\ndata: {"token":"t1"}\n\ndata: {"token":"t2"}\n\ndata: [DONE]\n\n'
    )
    assert failures == 0
