"""``POST /v1/rag`` (API.md "Inference"): answer a question from a collection's documents, and
``POST /v1/rag:replay``: re-run an answer against the document versions it cited.

The body is validated here (unknown fields refused by name); ``rag.RagService`` retrieves and
places the generation; the answer is JSON, or SSE with the sources first when ``stream``. A JSON
answer carries ``replay`` (``rag.provenance``): the body ``/v1/rag:replay`` takes back, as is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import BadRequest
from ..inference.local import InferRequest
from ..inference.service import InferenceService
from ..llm.sampling import generation_budget
from ..node import ShardNode
from ..rag.provenance import pick_seed, replay_record
from ..rag.service import RagService, rag_result, rag_stream
from ..storage.names import check_collection, parse_urn
from ..wire import JsonInt
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
    seed: JsonInt | None = Field(
        None, ge=0, le=2**53 - 1, description="sampling seed; unset: the shard picks one and reports it"
    )
    consistency: Literal["latest", "snapshot"] = Field(
        "latest",
        description="snapshot: every passage read as it stood at one hybrid time (snapshot_hlc)",
    )
    stream: bool = False
    speculative: bool | None = Field(
        None,
        description="decode with the shard's draft source (prompt lookup: the answer's quotes of its "
        "passages come several tokens a step); unset: the shard's rag_speculative (on by default)",
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query may not be blank")
        return value


class ReplaySource(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    urn: str
    version: JsonInt = Field(..., ge=1)
    hlc: JsonInt | None = Field(None, ge=0, description="the version's stamp: a reused number is 410")


class ReplayBody(BaseModel):
    """``/v1/rag``'s ``replay`` object, sent back as it came."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    query: str = Field(..., min_length=1)
    collection: str = collection_field("the collection the answer was retrieved from")
    sources: list[ReplaySource] = Field(..., min_length=1, description="the passages, in prompt order")
    model: str | None = None
    adapter: str | None = None
    domain: str | None = None
    seed: JsonInt = Field(..., ge=0, le=2**53 - 1)
    max_tokens: JsonInt | None = Field(..., ge=1, description="null: the shard's default")
    temperature: float = Field(..., ge=0)
    passage_chars: JsonInt = Field(..., ge=1)
    speculative: bool = Field(False, description="the answer was decoded speculatively")
    answer: str | None = Field(None, description="the answer to compare with (reproduced)")


async def rag_service(request: Request, shard: Node) -> RagService:
    """The node's retrieval service, once the engine can embed the question: 503
    ``llm_disabled`` / ``llm_not_ready`` before anything else is looked at."""
    runtime(request)
    return shard.rag


@router.post("/v1/rag")
async def rag(
    body: RagBody,
    request: Request,
    shard: Node,
    svc: Inference,
    service: Annotated[RagService, Depends(rag_service)],
):
    """``{"answer", "sources": [{"urn", "version", "hlc", "score"}], "model", "adapter", "seed",
    "shard_id", "usage", "timings", "replay"}``; with ``stream``, SSE: ``{"sources", "seed"}``,
    then ``{"token"}`` events, ``{"done": true, ...}``, ``[DONE]``. Errors: 404
    ``collection_not_found``, 400 ``not_indexed`` (no embeddings), 404 ``no_context`` (nothing
    matched), 400 ``k_too_large``, 410 ``snapshot_unavailable``, 503 without an embedding model."""
    check_collection(body.collection)
    if body.k > shard.settings.max_search_k:
        raise BadRequest(f"k may be at most {shard.settings.max_search_k}", code="k_too_large")
    llm = shard.settings.llm  # a max_tokens over the limit is refused before any retrieval
    max_tokens = generation_budget(body.max_tokens, llm.default_max_tokens, llm.max_tokens_limit)
    retrieved = await service.retrieve(
        body.query, body.collection, body.k, body.filter, snapshot=body.consistency == "snapshot"
    )
    seed = pick_seed(body.seed)
    temperature = 0.0 if body.temperature is None else body.temperature
    speculative = service.speculative if body.speculative is None else body.speculative
    req = InferRequest(
        prompt=retrieved.prompt,
        shared_prefix_chars=retrieved.shared_chars,
        domain=body.domain,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        stream=body.stream,
        speculative=speculative,
    )
    answer = await generate(request, svc, req)
    if not isinstance(answer, dict):
        return sse_response(rag_stream(retrieved, answer, seed))
    out = rag_result(retrieved, answer, seed)
    out["replay"] = replay_record(
        query=body.query,
        collection=body.collection,
        sources=retrieved.sources,
        generation=answer,
        domain=body.domain,
        seed=seed,
        max_tokens=max_tokens,
        temperature=temperature,
        passage_chars=service.passage_chars,
        speculative=speculative,
    )
    return out


async def generate(request: Request, svc: InferenceService, req: InferRequest):
    """The one inference pipeline places it: where the router sends ``domain``, else on the shard
    whose KV cache holds the longest prefix of the prompt when that beats its load, else here."""
    return (await svc.infer(req, request.is_disconnected)).answer


@router.post("/v1/rag:replay")
async def rag_replay(
    body: ReplayBody,
    request: Request,
    shard: Node,
    svc: Inference,
    service: Annotated[RagService, Depends(rag_service)],
):
    """Re-run an answer from ``/v1/rag``'s ``replay`` object: the cited versions are read (here or
    from an owner), the prompt rebuilt, and the same model, adapter, seed and sampling generate
    again. ``{"answer", "reproduced", "sources", "model", "adapter", "seed", ...}``; ``reproduced``
    is exact text equality with ``answer`` sent (null when none was). Errors: 410
    ``version_compacted`` (the message names URN@version), 404 ``version_not_found``,
    ``model_not_found``, ``adapter_not_found``, 400 for a URN outside ``collection``."""
    check_collection(body.collection)
    if len(body.sources) > shard.settings.max_search_k:
        raise BadRequest(f"at most {shard.settings.max_search_k} sources", code="k_too_large")
    for source in body.sources:
        if parse_urn(source.urn)[0] != body.collection:
            raise BadRequest(
                f"source {source.urn} is not in collection {body.collection!r}", code="invalid_urn"
            )
    llm = shard.settings.llm
    generation_budget(body.max_tokens, llm.default_max_tokens, llm.max_tokens_limit)
    shard.store.collection(body.collection)  # 404 collection_not_found
    retrieved = await service.replay_sources(
        body.query, [(s.urn, s.version, s.hlc) for s in body.sources], body.passage_chars
    )
    req = InferRequest(
        prompt=retrieved.prompt,
        shared_prefix_chars=retrieved.shared_chars,
        model=body.model,
        adapter=body.adapter,
        domain=body.domain,
        max_tokens=body.max_tokens,
        temperature=body.temperature,
        seed=body.seed,
        speculative=body.speculative,
    )
    answer = await generate(request, svc, req)
    out = rag_result(retrieved, answer, body.seed)
    out["reproduced"] = None if body.answer is None else answer.get("text") == body.answer
    return out
