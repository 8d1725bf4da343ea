"""AQL over HTTP (API.md "Query language"): ``POST /v1/aql`` and the peers' scan fragments."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from ..node import ShardNode
from ..tenants.caller import Caller
from .deps import current_node

router = APIRouter(tags=["aql"])
Node = Annotated[ShardNode, Depends(current_node)]


class AqlRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    query: str = Field(..., description="one AQL statement, optionally prefixed by EXPLAIN")
    bind_vars: dict[str, Any] = Field(default_factory=dict, description="values for @name / @@name")


class AqlResponse(BaseModel):
    result: list[Any]
    stats: dict[str, Any]


@router.post("/v1/aql", response_model=AqlResponse)
async def aql(
    body: AqlRequest,
    shard: Node,
    request: Request,
) -> dict:
    """Run a query. Errors: 400 ``aql_syntax_error`` (with line/column and expected tokens),
    400 for semantic errors (unknown collection/variable/function, missing bind parameter,
    wrong types) and for exceeded limits (``query_timeout``, ``result_too_large``)."""
    state = request.scope.get("state") or {}  # the key's role and tenant (AuthMiddleware)
    caller = Caller(state.get("role"), state.get("tenant") or Caller().tenant)
    return await shard.aql.execute(body.query, body.bind_vars, caller=caller)


@router.post("/internal/aql/scan", include_in_schema=False)
async def scan_fragment(shard: Node, body: Annotated[dict[str, Any], Body()]) -> dict:
    """This shard's rows of a scan coordinated elsewhere (first-owner rows, pushed FILTER/SORT/LIMIT)."""
    return await shard.aql.scan_fragment(body)
