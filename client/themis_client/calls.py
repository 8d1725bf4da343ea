"""Every API operation as a pure description (``Call``): method, path, body, headers, whether a
retry is safe, and how to read the answer. ``ThemisClient`` and ``AsyncThemisClient`` only
execute calls, so both get each operation, its signature and its docstring from one place.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from .models import (
    Adapter,
    Adapters,
    AqlResult,
    BatchResult,
    ClusterStatus,
    Collection,
    Document,
    Embeddings,
    Health,
    InferBatchResult,
    InferResult,
    Operation,
    RagResult,
    SearchResult,
    TransactionOutcome,
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
    #: ``parse`` reads the body as text, not JSON (``/metrics``).
    text: bool = False


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


def metrics() -> Call[str]:
    """``GET /metrics``: the shard's Prometheus text exposition."""
    return Call("GET", "/metrics", str, idempotent=True, text=True)


def raid_status() -> Call[dict[str, Any]]:
    """``GET /v1/raid/status`` as the shard answers it (layout, chunk health, rebuild)."""
    return Call("GET", "/v1/raid/status", dict, idempotent=True)


def raid_verify() -> Call[dict[str, Any]]:
    """``POST /v1/raid/verify``: crc-check every local unit (repairs are scheduled for bad ones)."""
    return Call("POST", "/v1/raid/verify", dict, idempotent=True)


def raid_rebuild(*, assemble: bool = False) -> Call[dict[str, Any]]:
    """``POST /v1/raid/rebuild``: repair this shard's units from its peers now (blocks until done);
    ``assemble`` also reassembles and re-verifies the model file. ``{"operation", "units"}``.
    Not retried: its 503 means beyond the layout's tolerance, which waiting does not change."""
    return Call("POST", "/v1/raid/rebuild", dict, {"assemble": assemble})


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


def transaction(
    operations: Iterable[Operation | Mapping[str, Any]], *, txn_id: str | None = None
) -> Call[TransactionResult]:
    """All or nothing; a stale ``if_version`` raises ``VersionConflict`` with nothing applied.
    ``txn_id`` (``new_txn_id()``): chosen before sending, so that ``transaction_outcome`` can
    tell the outcome when the response is lost (a broken connection, a 503
    ``transaction_outcome_unknown``). Never retried here: resending an id is refused (409)."""
    ops = [Operation.model_validate(o).model_dump(exclude_none=True) for o in operations]
    body: dict[str, Any] = {"operations": ops}
    if txn_id is not None:
        body["id"] = txn_id
    return Call("POST", "/v1/transactions", _model(TransactionResult), body)


def new_txn_id() -> str:
    """A fresh transaction id for ``transaction(..., txn_id=...)``."""
    return uuid.uuid4().hex


def transaction_outcome(txn_id: str) -> Call[TransactionOutcome]:
    """``GET /v1/transactions/{id}``: committed, aborted, in_progress or unknown. Asking about
    an id no shard knows makes it abort for good, so "aborted" is definite."""
    return Call("GET", f"/v1/transactions/{_seg(txn_id)}", _model(TransactionOutcome), idempotent=True)


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


def infer_batch(
    requests: Iterable[Mapping[str, Any]], *, timeout_s: float | None = None
) -> Call[InferBatchResult]:
    """``POST /v1/infer:batch``: scatter-gathered; results in request order, a failed item an
    ``InferItemError`` in its place. Each request is an ``/v1/infer`` body (without ``stream``)."""
    body = _drop_none({"requests": [dict(r) for r in requests], "timeout_s": timeout_s})
    return Call("POST", "/v1/infer:batch", _model(InferBatchResult), body)


def embed(texts: Sequence[str] | None = None, *, urns: Sequence[str] | None = None) -> Call[Embeddings]:
    """Embeddings of ``texts``, or of stored documents by ``urns`` (computed where they live)."""
    if (texts is None) == (urns is None):
        raise ValueError("give exactly one of texts or urns")
    body = {"texts": list(texts)} if texts is not None else {"urns": list(urns or ())}
    return Call("POST", "/v1/embed", _model(Embeddings), body, idempotent=True)


def rag_body(
    query: str,
    collection: str,
    *,
    k: int | None = None,
    filter: Mapping[str, Any] | None = None,
    domain: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    consistency: str | None = None,
) -> dict[str, Any]:
    body = _drop_none({"query": query, "collection": collection, "k": k, "domain": domain})
    return body | _drop_none(
        {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
            "consistency": consistency,
            "filter": dict(filter) if filter is not None else None,
        }
    )


def rag(
    query: str,
    collection: str,
    *,
    k: int | None = None,
    filter: Mapping[str, Any] | None = None,
    domain: str | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    consistency: str | None = None,
) -> Call[RagResult]:
    """``POST /v1/rag``: retrieve ``k`` documents from ``collection`` and answer from them; the
    result cites each source at its version and carries ``replay``. ``consistency="snapshot"``
    reads every passage as it stood at one hybrid time."""
    body = rag_body(
        query,
        collection,
        k=k,
        filter=filter,
        domain=domain,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        consistency=consistency,
    )
    return Call("POST", "/v1/rag", _model(RagResult), body)


def rag_replay(record: Mapping[str, Any]) -> Call[RagResult]:
    """``POST /v1/rag:replay``: re-run an answer (its ``replay``) against the document versions it
    cited; ``reproduced`` says whether it came out the same. 410 once a version was compacted."""
    return Call("POST", "/v1/rag:replay", _model(RagResult), dict(record))


# -- adapters ----------------------------------------------------------------------------------------


def adapters() -> Call[Adapters]:
    """``GET /v1/adapters``: the adapters loaded on the answering shard."""
    return Call("GET", "/v1/adapters", _model(Adapters), idempotent=True)


def load_adapter(
    name: str,
    *,
    domain: str | None = None,
    path: str | None = None,
    source: str | None = None,
    sha256: str | None = None,
    evaluate: bool | None = None,
) -> Call[Adapter]:
    """``POST /v1/adapters`` (admin): load a GGUF LoRA from ``path`` on the shard, or ``source``
    (a path or an http(s) URL the shard fetches); with ``evaluate``, measured on held-out data
    before it is announced. Not retried: a second load of the same name is a conflict."""
    body = _drop_none(
        {
            "name": name,
            "domain": domain,
            "path": path,
            "source": source,
            "sha256": sha256,
            "evaluate": evaluate,
        }
    )
    return Call("POST", "/v1/adapters", _model(Adapter), body)


def unload_adapter(name: str) -> Call[dict[str, Any]]:
    """``DELETE /v1/adapters/{name}`` (admin): ``{"unloaded": name}``."""
    return Call("DELETE", f"/v1/adapters/{_seg(name)}", dict, idempotent=True)
