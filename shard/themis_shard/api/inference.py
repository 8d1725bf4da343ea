"""Inference routes (API.md "Inference"): /v1/infer, /v1/infer:batch, /v1/embed, and the
``/internal`` twins that peers forward to (which run here and never route again).

Handlers stay thin: validate the body (``types``), ask the ``InferenceService`` (which decides
where the request runs) and turn its answer into HTTP: a dict as JSON, a byte stream as SSE
(one generation) or NDJSON (a batch). Everything that can be refused (unknown model/adapter,
bad sampling, oversize prompt, full queue) is refused before a stream starts.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, Request, Response

from ..cluster.transport.vectors_wire import CONTENT_TYPE as VECTORS
from ..cluster.transport.vectors_wire import encode_vectors
from ..errors import BadRequest, PayloadTooLarge
from ..inference.service import Answer, InferenceService
from ..node import ShardNode
from .deps import inference, json_answer, ndjson_response, node, routed_response, sse_response
from .frame_handlers import FrameHandler, TypedBody, frame_handler
from .types import EmbedBody, EmbedUrnsBody, InferBatchBody, InferBody, infer_item

router = APIRouter(tags=["inference"])
Inference = Annotated[InferenceService, Depends(inference)]


def _answer(answer: Answer):
    return answer if isinstance(answer, dict) else sse_response(answer)


def _public(body: InferBody, where: str = "") -> InferBody:
    if body.resume is not None:
        raise BadRequest(f"{where}resume is set by the cluster's router only", code="invalid_request")
    return body


@router.post("/v1/infer")
async def infer(body: InferBody, request: Request, svc: Inference):
    """Runs here, or, with a ``domain`` in a cluster, on the shard the router picks (named by
    the ``X-Themis-Shard`` header); a routed stream outlives the death of its shard."""
    routed = await svc.infer(_public(body).request(), request.is_disconnected)
    return routed_response(routed.shard, routed.answer)


@router.post("/internal/infer", include_in_schema=False)
async def infer_here(body: InferBody, request: Request, svc: Inference):
    return _answer(await svc.infer_here(body.request(), request.is_disconnected, every_token=True))


@router.post("/v1/infer:batch")
async def infer_batch(body: InferBatchBody, request: Request, svc: Inference):
    """Scatter-gather (§IV-B): results in request order; a failed item is ``{"error"}`` in place.
    The whole request is refused (4xx) for an empty or oversize batch or a malformed item."""
    limit = node(request).settings.max_batch_requests
    if len(body.requests) > limit:
        raise PayloadTooLarge(f"at most {limit} requests per batch", code="batch_too_large")
    items = []
    for i, raw in enumerate(body.requests):
        item = _public(infer_item(raw, f"requests[{i}]"), f"requests[{i}]: ")
        if item.stream:
            raise BadRequest(
                f"requests[{i}]: stream is not supported inside a batch (stream the batch)",
                code="invalid_request",
            )
        items.append(item.request())
    answer = await svc.infer_batch(
        items,
        stream=body.stream,
        timeout_s=body.timeout_s,
        disconnected=request.is_disconnected,
    )
    return {"results": answer} if isinstance(answer, list) else ndjson_response(answer)


@router.post("/internal/infer:batch", include_in_schema=False)
async def infer_batch_here(body: InferBatchBody, request: Request, svc: Inference):
    items = [infer_item(raw, f"requests[{i}]").request() for i, raw in enumerate(body.requests)]
    return {"results": await svc.infer_batch_here(items, request.is_disconnected)}


@router.post("/v1/embed")
async def embed(body: EmbedBody, svc: Inference):
    """Texts embed here; URNs embed on the shards that hold the documents (§IV-E)."""
    if body.urns is None:
        out = await svc.embed_texts(body.texts)
        return json_answer({"embeddings": out.embeddings, "dimension": out.dimension, "model": out.model})
    if body.texts is not None:
        raise BadRequest("give texts or urns, not both", code="invalid_request")
    vectors = await svc.embed_urns(body.urns)
    dimension = len(vectors[0]) if vectors else 0
    return json_answer({"embeddings": vectors, "dimension": dimension, "urns": body.urns})


@router.post("/internal/embed", include_in_schema=False)
async def embed_here(body: EmbedUrnsBody, svc: Inference):
    return json_answer({"embeddings": await svc.embed_urns_here(body.urns)})


@router.post("/internal/embed/vectors", include_in_schema=False)
async def embed_rows_here(body: EmbedUrnsBody, svc: Inference) -> Response:
    """``/internal/embed`` as float32 rows (``vectors_wire``): what a peer routing EMBED asks for."""
    return Response(encode_vectors(await svc.embed_urns_here_rows(body.urns)), media_type=VECTORS)


async def _embed_here_frame(body: EmbedUrnsBody, shard: ShardNode) -> dict:
    return {"embeddings": await shard.inference.embed_urns_here(body.urns)}


async def _embed_rows_frame(body: EmbedUrnsBody, shard: ShardNode) -> np.ndarray:
    return await shard.inference.embed_urns_here_rows(body.urns)


def _vectors_body(rows: np.ndarray) -> bytes:
    return TypedBody(encode_vectors(rows), VECTORS)


#: Routes the peer channel calls directly (``api/channel.py``): EMBED by URN is the hop that
#: data-local embedding adds, and the paper holds it to a few per cent of the embedding itself.
FRAME_HANDLERS: dict[tuple[str, str], FrameHandler] = {
    ("POST", "/internal/embed"): frame_handler(EmbedUrnsBody, _embed_here_frame),
    ("POST", "/internal/embed/vectors"): frame_handler(EmbedUrnsBody, _embed_rows_frame, _vectors_body),
}
