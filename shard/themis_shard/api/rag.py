"""``POST /v1/rag`` (API.md "Inference"): answer a question from a collection's documents.

The body is validated here (unknown fields refused by name); ``rag.RagService`` retrieves and
places the generation; the answer is JSON, or SSE with the sources first when ``stream``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import BadRequest
from ..inference.local import InferRequest
from ..inference.service import InferenceService
from ..llm.sampling import generation_budget
from ..node import ShardNode
from ..rag.service import RagService, rag_result, rag_stream
from ..storage.names import check_collection
from .deps import current_node, inference, runtime, sse_response
from .params import collection_field

router = APIRouter(tags=["inference"])
Node = Annotated[ShardNode, Depends(current_node)]
Inference = Annotated[InferenceService, Depends(inference)]


class RagBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    query: str = Field(..., min_length=1, description="the question")
    collection: str = collection_field("a collection with a vector index (embed_field or embeddings)")
    k: int = Field(5, ge=1, description="passages retrieved as context")
    filter: dict[str, Any] | None = Field(None, description="the vector search's filter")
    domain: str | None = Field(None, description="generate where the router sends this domain")
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    stream: bool = False

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query may not be blank")
        return value


def rag_service(request: Request, shard: Node) -> RagService:
    rt = runtime(request)  # 503 llm_disabled / llm_not_ready: the question needs the embedding model
    return RagService(
        shard.store,
        shard.vectors,
        shard.cluster,
        shard.metrics,
        rt.embed,
        passage_chars=shard.aql.settings.rag_context_chars,
    )


@router.post("/v1/rag")
async def rag(
    body: RagBody,
    request: Request,
    shard: Node,
    svc: Inference,
    service: Annotated[RagService, Depends(rag_service)],
):
    """``{"answer", "sources": [{"urn", "score"}], "shard_id", "usage", "timings"}``; with
    ``stream``, SSE: ``{"sources"}``, then ``{"token"}`` events, ``{"done": true, ...}``, ``[DONE]``.
    Errors: 404 ``collection_not_found``, 400 ``not_indexed`` (no embeddings), 404 ``no_context``
    (nothing matched), 400 ``k_too_large``, 503 without an embedding model."""
    check_collection(body.collection)
    if body.k > shard.settings.max_search_k:
        raise BadRequest(f"k may be at most {shard.settings.max_search_k}", code="k_too_large")
    llm = shard.settings.llm  # a max_tokens over the limit is refused before any retrieval
    generation_budget(body.max_tokens, llm.default_max_tokens, llm.max_tokens_limit)
    retrieved = await service.retrieve(body.query, body.collection, body.k, body.filter)
    req = InferRequest(
        prompt=retrieved.prompt,
        domain=body.domain,
        max_tokens=body.max_tokens,
        temperature=body.temperature,
        stream=body.stream,
    )
    if body.domain is not None:  # the domain's adapter/shard wins over data locality
        answer = (await svc.infer(req, request.is_disconnected)).answer
    else:
        answer = await service.generate_on(
            service.data_shard(retrieved),
            req.to_json(),
            lambda: svc.infer_here(req, request.is_disconnected),
        )
    if isinstance(answer, dict):
        return rag_result(retrieved, answer)
    return sse_response(rag_stream(retrieved, answer))
