"""Cluster front of the inference API: routing, scatter-gather and data-local EMBED.

These routes are registered before the engine's (``api/inference.py``), take the public paths
and decide *where* a request runs (``cluster/inference.py``); the engine's handlers do the local
work, on this shard or — through the ``/internal/...`` twins below, which never route again — on
the chosen peer. The public schema is the engine's (these twins stay out of OpenAPI).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..cluster.inference import embed_local_documents
from ..errors import BadRequest, PayloadTooLarge
from . import inference
from .deps import node

router = APIRouter(include_in_schema=False)

#: Largest sub-batch one engine call takes (the engine's own batch limit).
ENGINE_BATCH_LIMIT = 256


class ClusterBatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: list[dict[str, Any]] = Field(..., min_length=1)
    #: NDJSON stream of ``{"index", ...result}`` lines as items complete (first answers early).
    stream: bool = False
    #: Collective timeout of the scatter-gather (paper: T_scatter = 30 s).
    timeout_s: float = Field(30.0, gt=0, le=600)


def _infer_body(raw: dict[str, Any], where: str) -> inference.InferBody:
    try:
        return inference.InferBody.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise BadRequest(f"{where}: {loc}: {first.get('msg')}", code="invalid_request") from None


@router.post("/v1/infer")
async def infer(body: inference.InferBody, request: Request):
    shard = node(request)
    routing = shard.cluster.inference
    if not routing.routes(body.domain):
        return await inference.infer(body, request)
    return await routing.infer(body.model_dump(exclude_none=True), lambda: inference.infer(body, request))


@router.post("/internal/infer")
async def infer_here(body: inference.InferBody, request: Request):
    return await inference.infer(body, request)


async def _local_batch(items: list[dict[str, Any]], request: Request) -> list[dict]:
    out: list[dict] = []
    for start in range(0, len(items), ENGINE_BATCH_LIMIT):
        chunk = [
            _infer_body(r, f"requests[{start + i}]")
            for i, r in enumerate(items[start : start + ENGINE_BATCH_LIMIT])
        ]
        out += (await inference.infer_batch(inference.InferBatchBody(requests=chunk), request))["results"]
    return out


@router.post("/v1/infer:batch")
async def infer_batch(body: ClusterBatchBody, request: Request):
    """Scatter-gather (§IV-B): results in request order; a failed item is ``{"error"}`` in place.
    The whole request is refused (4xx) for an empty or oversize batch or a malformed item."""
    shard = node(request)
    limit = shard.settings.max_batch_requests
    if len(body.requests) > limit:
        raise PayloadTooLarge(f"at most {limit} requests per batch", code="batch_too_large")
    for i, item in enumerate(body.requests):
        if _infer_body(item, f"requests[{i}]").stream:
            raise BadRequest(
                f"requests[{i}]: stream is not supported inside a batch (stream the batch)",
                code="invalid_request",
            )
    routing = shard.cluster.inference

    async def local(items: list[dict[str, Any]]) -> list[dict]:
        return await _local_batch(items, request)

    if not shard.cluster.topology.clustered:
        if body.stream:
            return routing.stream_batch(body.requests, local, body.timeout_s)
        return {"results": await local(body.requests)}
    if body.stream:
        return routing.stream_batch(body.requests, local, body.timeout_s)
    return {"results": await routing.infer_batch(body.requests, local, body.timeout_s)}


@router.post("/internal/infer:batch")
async def infer_batch_here(body: ClusterBatchBody, request: Request):
    return {"results": await _local_batch(body.requests, request)}


class EmbedUrnsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    urns: list[str] = Field(..., min_length=1, max_length=4096)


@router.post("/v1/embed")
async def embed(body: inference.EmbedBody, request: Request):
    """Texts embed here; URNs embed on the shards that hold the documents (§IV-E)."""
    if body.urns is None:
        return await inference.embed(body, request)
    if body.texts is not None:
        raise BadRequest("give texts or urns, not both", code="invalid_request")
    shard = node(request)
    vectors = await shard.cluster.inference.embed_urns(
        body.urns, lambda keys: embed_local_documents(shard, keys)
    )
    dim = len(vectors[0]) if vectors else 0
    return {"embeddings": vectors, "dimension": dim, "urns": body.urns}


@router.post("/internal/embed")
async def embed_here(body: EmbedUrnsBody, request: Request):
    from ..storage.names import parse_urn

    shard = node(request)
    return {"embeddings": await embed_local_documents(shard, [parse_urn(u) for u in body.urns])}
