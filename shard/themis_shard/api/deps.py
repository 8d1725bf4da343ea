"""Request-scoped access to the shard's parts, small header parsers, and stream responses."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import orjson
from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from ..documents.service import DocumentService
from ..errors import BadRequest, Unavailable, llm_disabled
from ..inference.service import InferenceService
from ..node import ShardNode

if TYPE_CHECKING:  # the engine (llama.cpp) is imported only by shards that run one
    from ..llm.runtime import LLMRuntime


def node(request: Request) -> ShardNode:
    shard = getattr(request.app.state, "node", None)
    if shard is None:
        raise Unavailable("shard is starting", code="starting")
    return shard


async def current_node(request: Request) -> ShardNode:
    """``node`` as a FastAPI dependency. Async on purpose: FastAPI runs a plain ``def``
    dependency in its thread pool, a worker-thread hop (and GIL handoff) on every request."""
    return node(request)


def document_service(shard: ShardNode) -> DocumentService:
    return shard.documents


def runtime(request: Request) -> LLMRuntime:
    rt = getattr(request.app.state, "llm", None)
    if rt is None:
        settings = getattr(request.app.state, "settings", None)
        if settings is not None and settings.llm.enabled:  # the node (and its engine) is still opening
            raise Unavailable("the model is still loading", code="llm_not_ready")
        raise llm_disabled(settings.shard_id if settings is not None else "")
    if not rt.ready:
        raise Unavailable("the model is still loading", code="llm_not_ready")
    return rt


def shard_id(request: Request) -> str:
    settings = getattr(request.app.state, "settings", None)
    return getattr(settings, "shard_id", "") or ""


async def inference(request: Request) -> InferenceService:
    """The node's one inference pipeline (built at start-up, never per request). While the node
    opens, 503 ``llm_not_ready`` (``llm_disabled`` on a shard without a model), as its engine says."""
    if getattr(request.app.state, "node", None) is None:
        runtime(request)
    return node(request).inference


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_response(body: AsyncIterator[bytes], headers: dict[str, str] | None = None) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})})


#: Names the shard generating a routed answer (a stream: the one it started on), as the shard
#: ids of ``/v1/cluster/status``.
SHARD_HEADER = "X-Themis-Shard"


def routed_response(shard: str, answer: dict | AsyncIterator[bytes]):
    """A routed answer as HTTP: JSON or SSE, with the ``X-Themis-Shard`` header."""
    headers = {SHARD_HEADER: shard}
    if isinstance(answer, dict):
        return JSONResponse(answer, headers=headers)
    return sse_response(answer, headers)


def json_answer(payload: dict) -> Response:
    """``payload`` as JSON by orjson, past FastAPI's encoder: for answers made of many floats
    (embeddings), which the default encoder walks value by value (3–4 ms for 8×384 floats
    against 0.1 ms; on a data-local EMBED that was the hop's whole cost twice over)."""
    return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


def ndjson_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="application/x-ndjson")


#: ``3``, ``"3"`` or ``W/"3"`` (ETag forms): ASCII digits only (``str.isdigit`` also takes ``²``).
IF_MATCH_PATTERN = r'^\s*(W/)?("[0-9]+"|[0-9]+)\s*$'
_IF_MATCH_RE = re.compile(IF_MATCH_PATTERN)


def parse_if_match(value: str | None) -> int | None:
    """``If-Match: 3`` or ``If-Match: "3"`` (ETag form) → 3; absent → None."""
    if value is None:
        return None
    if not _IF_MATCH_RE.fullmatch(value):
        raise BadRequest(
            f"If-Match must be a document version number, got {value!r}", code="invalid_if_match"
        )
    return int(value.strip().removeprefix("W/").strip('"'))
