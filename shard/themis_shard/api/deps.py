"""Request-scoped access to the shard's parts, and small header parsers."""

from __future__ import annotations

from fastapi import Request

from ..documents.service import DocumentService
from ..errors import BadRequest, Unavailable
from ..node import ShardNode


def node(request: Request) -> ShardNode:
    shard = getattr(request.app.state, "node", None)
    if shard is None:
        raise Unavailable("shard is starting", code="starting")
    return shard


def document_service(shard: ShardNode) -> DocumentService:
    """The shard's document service; built per request because the embedding model (``shard.llm``)
    comes up after the node is opened."""
    return DocumentService(shard.store, shard.cluster.documents, shard.llm)


def parse_if_match(value: str | None) -> int | None:
    """``If-Match: 3`` or ``If-Match: "3"`` (ETag form) → 3; absent → None."""
    if value is None:
        return None
    text = value.strip().removeprefix("W/").strip('"')
    if not text.isdigit():
        raise BadRequest(
            f"If-Match must be a document version number, got {value!r}", code="invalid_if_match"
        )
    return int(text)
