"""Every API operation as a pure description (``Call``): method, path, body, headers, whether a
retry is safe, and how to read the answer. ``ThemisClient`` and ``AsyncThemisClient`` only
execute calls, so both get each operation, its signature and its docstring from one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from .models import (
    AqlResult,
    BatchResult,
    ClusterStatus,
    Collection,
    Document,
    Embeddings,
    Health,
    InferResult,
    Operation,
    RagResult,
    SearchResult,
    TransactionResult,
    WriteResult,
)


@dataclass(frozen=True)
class Call[T]:
    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    headers: Mapping[str, str] | None = None
    #: Safe to send again after a 429/503 (reads, PUT/DELETE, search, embed).
    idempotent: bool = False


def _model[M: BaseModel](model: type[M]) -> Callable[[Any], M]:
    return model.model_validate


def _seg(value: str) -> str:
    return quote(value, safe="")


def _drop_none(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def _doc_path(collection: str, key: str) -> str:
    return f"/v1/collections/{_seg(collection)}/documents/{_seg(key)}"


def _if_match(version: int | None) -> dict[str, str] | None:
    return None if version is None else {"if-match": str(version)}


# -- health and cluster ------------------------------------------------------------------------------


def health() -> Call[Health]:
    """``GET /health``."""
    return Call("GET", "/health", _model(Health), idempotent=True)


def cluster_status() -> Call[ClusterStatus]:
    """``GET /v1/cluster/status``: members, ring version, the migration block."""
    return Call("GET", "/v1/cluster/status", _model(ClusterStatus), idempotent=True)


def raid_status() -> Call[dict[str, Any]]:
    """``GET /v1/raid/status`` as the shard answers it (layout, chunk health, rebuild)."""
    return Call("GET", "/v1/raid/status", dict, idempotent=True)


# -- collections and documents -----------------------------------------------------------------------


def declare_collection(
    name: str,
    *,
    dimension: int | None = None,
    index: str | None = None,
    embed_field: str | None = None,
    **settings: Any,
) -> Call[Collection]:
    """``PUT /v1/collections/{name}``; ``settings`` are further collection fields, sent as given
    (the shard refuses an unknown one by name)."""
    body = _drop_none({"dimension": dimension, "index": index, "embed_field": embed_field, **settings})
    return Call("PUT", f"/v1/collections/{_seg(name)}", _model(Collection), body, idempotent=True)


def collection(name: str) -> Call[Collection]:
    return Call("GET", f"/v1/collections/{_seg(name)}", _model(Collection), idempotent=True)


def collections() -> Call[list[Collection]]:
    return Call(
        "GET", "/v1/collections", lambda body: [Collection.model_validate(c) for c in body], idempotent=True
    )


def put(
    collection: str, key: str, document: Mapping[str, Any], *, if_match: int | None = None
) -> Call[WriteResult]:
    """Write a document; with ``if_match`` only over that version (else ``VersionConflict``)."""
    return Call(
        "PUT", _doc_path(collection, key), _model(WriteResult), dict(document), _if_match(if_match), True
    )


def get(collection: str, key: str) -> Call[Document]:
    """The document, or ``NotFound`` (code ``document_not_found``)."""
    return Call("GET", _doc_path(collection, key), _model(Document), idempotent=True)


def delete(collection: str, key: str, *, if_match: int | None = None) -> Call[WriteResult]:
    return Call(
        "DELETE",
        _doc_path(collection, key),
        _model(WriteResult),
        headers=_if_match(if_match),
        idempotent=True,
    )


def batch(
    collection: str, documents: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Any]]
) -> Call[BatchResult]:
    """Write many documents atomically: ``{key: document}`` or ``(key, document)`` pairs."""
    pairs = documents.items() if isinstance(documents, Mapping) else documents
    body = {"documents": [{"key": k, "document": dict(d)} for k, d in pairs]}
    return Call("POST", f"/v1/collections/{_seg(collection)}/documents:batch", _model(BatchResult), body)


def transaction(operations: Iterable[Operation | Mapping[str, Any]]) -> Call[TransactionResult]:
    """All or nothing; a stale ``if_version`` raises ``VersionConflict`` with nothing applied."""
    ops = [Operation.model_validate(o).model_dump(exclude_none=True) for o in operations]
    return Call("POST", "/v1/transactions", _model(TransactionResult), {"operations": ops})


# -- search and AQL ----------------------------------------------------------------------------------


def search(
    collection: str,
    *,
    vector: Sequence[float] | None = None,
    text: str | None = None,
    k: int = 10,
    filter: Mapping[str, Any] | None = None,
) -> Call[SearchResult]:
    """Top-``k`` by ``vector`` or by ``text`` (embedded by the shard), optionally filtered."""
    body = _drop_none({"vector": list(vector) if vector is not None else None, "text": text, "k": k})
    if filter is not None:
        body["filter"] = dict(filter)
    return Call(
        "POST", f"/v1/collections/{_seg(collection)}/search", _model(SearchResult), body, idempotent=True
    )


def aql(query: str, bind_vars: Mapping[str, Any] | None = None) -> Call[AqlResult]:
    """Run an AQL statement. Not retried on 429/503: a statement may write."""
    return Call("POST", "/v1/aql", _model(AqlResult), {"query": query, "bind_vars": dict(bind_vars or {})})


# -- inference ---------------------------------------------------------------------------------------


def infer(prompt: str, **params: Any) -> Call[InferResult]:
    """``POST /v1/infer``; ``params`` are the body's other fields (max_tokens, temperature,
    domain, adapter, seed, stop, speculative ...), sent as given."""
    return Call(
        "POST", "/v1/infer", _model(InferResult), {"prompt": prompt, **_drop_none(params), "stream": False}
    )


def stream_body(prompt: str, **params: Any) -> dict[str, Any]:
    return {"prompt": prompt, **_drop_none(params), "stream": True}


def embed(texts: Sequence[str] | None = None, *, urns: Sequence[str] | None = None) -> Call[Embeddings]:
    """Embeddings of ``texts``, or of stored documents by ``urns`` (computed where they live)."""
    if (texts is None) == (urns is None):
        raise ValueError("give exactly one of texts or urns")
    body = {"texts": list(texts)} if texts is not None else {"urns": list(urns or ())}
    return Call("POST", "/v1/embed", _model(Embeddings), body, idempotent=True)


def rag(
    query: str,
    collection: str,
    *,
    k: int | None = None,
    filter: Mapping[str, Any] | None = None,
    domain: str | None = None,
    max_tokens: int | None = None,
) -> Call[RagResult]:
    """``POST /v1/rag``: retrieve ``k`` documents from ``collection`` and answer from them."""
    body = _drop_none({"query": query, "collection": collection, "k": k, "domain": domain})
    body |= _drop_none({"max_tokens": max_tokens, "filter": dict(filter) if filter is not None else None})
    return Call("POST", "/v1/rag", _model(RagResult), body)
