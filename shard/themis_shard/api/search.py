"""Vector search (API.md "Vector search"): by vector, or by text through the embedding model."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..documents.vector_search import vector_search
from ..errors import BadRequest
from ..node import ShardNode
from ..storage.names import check_collection
from .deps import current_node
from .params import CollectionName, exactly_one_of

router = APIRouter(prefix="/v1", tags=["search"])
Node = Annotated[ShardNode, Depends(current_node)]


class SearchRequest(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra=exactly_one_of(vector={"type": "array"}, text={"type": "string"}),
    )

    vector: list[float] | None = None
    text: str | None = Field(None, min_length=1)
    k: int = Field(10, ge=1)
    filter: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_query(self) -> SearchRequest:
        if (self.vector is None) == (self.text is None):
            raise ValueError("give exactly one of 'vector' or 'text'")
        return self


class SearchResult(BaseModel):
    urn: str
    score: float
    document: dict[str, Any]


class SearchResponse(BaseModel):
    results: list[SearchResult]
    #: Shards that did not answer; with RAID1+ the results are still complete for one failure.
    shards_failed: list[str] = []


@router.post("/collections/{collection}/search", response_model=SearchResponse)
async def search(collection: CollectionName, body: SearchRequest, shard: Node) -> SearchResponse:
    check_collection(collection)
    if body.k > shard.settings.max_search_k:
        raise BadRequest(f"k may be at most {shard.settings.max_search_k}", code="k_too_large")
    vector = body.vector
    if vector is None:
        if shard.llm is None:
            raise BadRequest(
                "text search needs a shard with an embedding model", code="embedding_unavailable"
            )
        vector = list((await shard.llm.embed([body.text]))[0])
    results, failed = await vector_search(
        shard.vectors, shard.cluster, shard.metrics, collection, vector, body.k, body.filter
    )
    return SearchResponse(results=results, shards_failed=failed)
