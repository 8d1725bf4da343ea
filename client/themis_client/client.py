"""``ThemisClient``: the public REST API (API.md) over one pooled ``httpx.Client``.

Calls are methods with typed results (``models``) and typed exceptions (``errors``). Any shard
serves the whole API, so the client may be given several shard URLs: a shard that cannot be
reached is skipped for the next one. Retries (``retry``):

* a connect failure is retried for every call, on the next URL — nothing reached a server;
* 429 / 503 (the shard shed load or the key's owners are down) only for idempotent calls
  (reads, PUT/DELETE, search, embed), with backoff and the server's ``Retry-After``.

Sync only; an async twin would share ``errors``, ``models``, ``retry`` and ``sse`` unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from .errors import ThemisConnectionError, ThemisError, error_from_response
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
    StreamToken,
    TransactionResult,
    WriteResult,
)
from .retry import RetryPolicy, should_retry_status
from .sse import DONE, sse_events

M = TypeVar("M", bound=BaseModel)
_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)


def _seg(value: str) -> str:
    return quote(value, safe="")


def _drop_none(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


class ThemisClient:
    """``ThemisClient("http://shard-0:8700", api_key=...)``; use as a context manager or ``close()``.

    ``http`` is an already-built ``httpx.Client`` to send through (a test's in-process app, a
    client with custom TLS); when it is given, ``verify``/``cert``/``timeout`` are its own.
    ``headers`` are sent with every request (a ``traceparent``, say).
    """

    def __init__(
        self,
        base_url: str | Sequence[str] | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        verify: Any = True,
        cert: Any = None,
        headers: Mapping[str, str] | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        if base_url is None and http is None:
            raise ValueError("give base_url (one shard URL or several) or http")
        urls = [base_url] if isinstance(base_url, str) else list(base_url or [str(http.base_url)])
        if not urls:
            raise ValueError("base_url is empty")
        self.urls = [u.rstrip("/") for u in urls]
        self.retry = retry or RetryPolicy()
        self._headers = dict(headers or {})
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._own_http = http is None
        self.http = http or httpx.Client(timeout=timeout, verify=verify, cert=cert)
        self._current = 0

    # -- plumbing ----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    def __enter__(self) -> ThemisClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
        stream: bool = False,
    ) -> httpx.Response:
        """One call with the retry policy; a non-2xx answer raises its typed exception."""
        hdrs = {**self._headers, **(headers or {})}
        attempt = 0
        while True:
            attempt += 1
            url = self.urls[self._current] + path
            try:
                request = self.http.build_request(method, url, json=json, headers=hdrs)
                response = self.http.send(request, stream=stream)
            except _CONNECT_ERRORS as exc:
                self._current = (self._current + 1) % len(self.urls)
                if attempt >= self.retry.attempts:
                    raise ThemisConnectionError(0, "unreachable", f"{method} {url}: {exc}") from exc
                time.sleep(self.retry.delay(attempt))
                continue
            if response.is_success:
                return response
            if should_retry_status(response.status_code, idempotent) and attempt < self.retry.attempts:
                response.close()
                time.sleep(self.retry.delay(attempt, response.headers.get("retry-after")))
                continue
            if stream:
                response.read()
                response.close()
            raise _error(response)

    def _call(
        self,
        model: type[M],
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
    ) -> M:
        response = self._send(method, path, json=json, headers=headers, idempotent=idempotent)
        return model.model_validate(response.json())

    # -- health and cluster ------------------------------------------------------------------------

    def health(self) -> Health:
        return self._call(Health, "GET", "/health", idempotent=True)

    def cluster_status(self) -> ClusterStatus:
        return self._call(ClusterStatus, "GET", "/v1/cluster/status", idempotent=True)

    def raid_status(self) -> dict[str, Any]:
        """``GET /v1/raid/status`` as the shard answers it (layout, chunk health, rebuild)."""
        return self._send("GET", "/v1/raid/status", idempotent=True).json()

    # -- collections and documents -----------------------------------------------------------------

    def declare_collection(
        self,
        name: str,
        *,
        dimension: int | None = None,
        index: str | None = None,
        embed_field: str | None = None,
        **settings: Any,
    ) -> Collection:
        """``PUT /v1/collections/{name}``; ``settings`` are further collection fields, sent as given
        (the shard refuses an unknown one by name)."""
        body = _drop_none({"dimension": dimension, "index": index, "embed_field": embed_field, **settings})
        return self._call(Collection, "PUT", f"/v1/collections/{_seg(name)}", json=body, idempotent=True)

    def collection(self, name: str) -> Collection:
        return self._call(Collection, "GET", f"/v1/collections/{_seg(name)}", idempotent=True)

    def collections(self) -> list[Collection]:
        response = self._send("GET", "/v1/collections", idempotent=True)
        return [Collection.model_validate(c) for c in response.json()]

    def put(
        self, collection: str, key: str, document: Mapping[str, Any], *, if_match: int | None = None
    ) -> WriteResult:
        """Write a document; with ``if_match`` only over that version (else ``VersionConflict``)."""
        return self._call(
            WriteResult,
            "PUT",
            _doc_path(collection, key),
            json=dict(document),
            headers=_if_match(if_match),
            idempotent=True,
        )

    def get(self, collection: str, key: str) -> Document:
        """The document, or ``NotFound`` (code ``document_not_found``)."""
        return self._call(Document, "GET", _doc_path(collection, key), idempotent=True)

    def delete(self, collection: str, key: str, *, if_match: int | None = None) -> WriteResult:
        return self._call(
            WriteResult, "DELETE", _doc_path(collection, key), headers=_if_match(if_match), idempotent=True
        )

    def batch(
        self, collection: str, documents: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Any]]
    ) -> BatchResult:
        """Write many documents atomically: ``{key: document}`` or ``(key, document)`` pairs."""
        pairs = documents.items() if isinstance(documents, Mapping) else documents
        body = {"documents": [{"key": k, "document": dict(d)} for k, d in pairs]}
        return self._call(
            BatchResult,
            "POST",
            f"/v1/collections/{_seg(collection)}/documents:batch",
            json=body,
            idempotent=False,
        )

    def transaction(self, operations: Iterable[Operation | Mapping[str, Any]]) -> TransactionResult:
        """All or nothing; a stale ``if_version`` raises ``VersionConflict`` with nothing applied."""
        ops = [Operation.model_validate(o).model_dump(exclude_none=True) for o in operations]
        return self._call(
            TransactionResult, "POST", "/v1/transactions", json={"operations": ops}, idempotent=False
        )

    # -- search and AQL ----------------------------------------------------------------------------

    def search(
        self,
        collection: str,
        *,
        vector: Sequence[float] | None = None,
        text: str | None = None,
        k: int = 10,
        filter: Mapping[str, Any] | None = None,
    ) -> SearchResult:
        body = _drop_none({"vector": list(vector) if vector is not None else None, "text": text, "k": k})
        if filter is not None:
            body["filter"] = dict(filter)
        return self._call(
            SearchResult, "POST", f"/v1/collections/{_seg(collection)}/search", json=body, idempotent=True
        )

    def aql(self, query: str, bind_vars: Mapping[str, Any] | None = None) -> AqlResult:
        """Run an AQL statement. Not retried on 429/503: a statement may write."""
        body = {"query": query, "bind_vars": dict(bind_vars or {})}
        return self._call(AqlResult, "POST", "/v1/aql", json=body, idempotent=False)

    # -- inference ---------------------------------------------------------------------------------

    def infer(self, prompt: str, **params: Any) -> InferResult:
        """``POST /v1/infer``; ``params`` are the body's other fields (max_tokens, temperature,
        domain, adapter, seed, stop, speculative ...), sent as given."""
        body = {"prompt": prompt, **_drop_none(params), "stream": False}
        return self._call(InferResult, "POST", "/v1/infer", json=body, idempotent=False)

    def stream(self, prompt: str, **params: Any) -> InferStream:
        """A streamed generation: ``with client.stream(p) as s: for t in s: ...``, then ``s.result``.
        Refusals (unknown adapter, full queue) raise before the first token."""
        body = {"prompt": prompt, **_drop_none(params), "stream": True}
        return InferStream(self._send("POST", "/v1/infer", json=body, idempotent=False, stream=True))

    def embed(self, texts: Sequence[str] | None = None, *, urns: Sequence[str] | None = None) -> Embeddings:
        if (texts is None) == (urns is None):
            raise ValueError("give exactly one of texts or urns")
        body = {"texts": list(texts)} if texts is not None else {"urns": list(urns or ())}
        return self._call(Embeddings, "POST", "/v1/embed", json=body, idempotent=True)

    def rag(
        self,
        query: str,
        collection: str,
        *,
        k: int | None = None,
        filter: Mapping[str, Any] | None = None,
        domain: str | None = None,
        max_tokens: int | None = None,
    ) -> RagResult:
        """``POST /v1/rag``: retrieve ``k`` documents from ``collection`` and answer from them."""
        body = _drop_none({"query": query, "collection": collection, "k": k, "domain": domain})
        body |= _drop_none({"max_tokens": max_tokens, "filter": dict(filter) if filter is not None else None})
        return self._call(RagResult, "POST", "/v1/rag", json=body, idempotent=False)


class InferStream:
    """Iterates ``StreamToken``s; after the last one, ``result`` is the final ``InferResult``
    (the server's ``done`` event). An error event mid-stream raises its typed exception."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.result: InferResult | None = None

    def __iter__(self) -> Iterator[StreamToken]:
        try:
            for event in sse_events(self._response.iter_lines()):
                if event == DONE:
                    return
                if "error" in event:
                    err = event["error"]
                    raise error_from_response(503 if err.get("code") == "unavailable" else 500, event)
                if event.get("done"):
                    self.result = InferResult.model_validate(event)
                    continue
                yield StreamToken.model_validate(event)
        finally:
            self._response.close()

    def text(self) -> str:
        """Consume the stream; the concatenated tokens."""
        return "".join(t.token for t in self)

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> InferStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _doc_path(collection: str, key: str) -> str:
    return f"/v1/collections/{_seg(collection)}/documents/{_seg(key)}"


def _if_match(version: int | None) -> dict[str, str] | None:
    return None if version is None else {"if-match": str(version)}


def _error(response: httpx.Response) -> ThemisError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return error_from_response(response.status_code, body, response.text)
