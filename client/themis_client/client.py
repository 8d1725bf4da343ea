"""``ThemisClient`` and ``AsyncThemisClient``: the public REST API (API.md) over one pooled httpx
client. Each operation is described once in ``calls``; these classes execute descriptions.

Any shard serves the whole API, so a client may be given several shard URLs: one that cannot be
reached is skipped for the next. Retries (``retry``):

* a connect failure is retried for every call, on the next URL — nothing reached a server;
* a connection that breaks after the request was sent (but not one that timed out) is retried
  on the next URL only for a safe call (GET: a read changes nothing); anything else may have
  been applied and is never sent again: ``ThemisConnectionError`` with code ``connection_lost``;
* 429 / 503 (the shard shed load, or a key's owners are down) only for idempotent calls
  (reads, PUT/DELETE, search, embed), with backoff and the server's ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Concatenate

import httpx

from . import calls
from .calls import Call
from .errors import ThemisConnectionError, ThemisError, error_from_response
from .models import InferResult, RagSource, StreamToken
from .retry import RetryPolicy, retries_lost_connection, should_retry_status
from .sse import DONE, SseDecoder, sse_events

_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)


class _Base:
    def __init__(
        self,
        base_url: str | Sequence[str] | None,
        http: httpx.Client | httpx.AsyncClient | None,
        api_key: str | None,
        retry: RetryPolicy | None,
        headers: Mapping[str, str] | None,
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
        self._current = 0

    def _request(self, http, call_method: str, path: str, json: Any, headers: Mapping[str, str] | None):
        return http.build_request(
            call_method,
            self.urls[self._current] + path,
            json=json,
            headers={**self._headers, **(headers or {})},
        )

    def _unreachable(self, attempt: int, request: httpx.Request, exc: Exception) -> float:
        """Move to the next URL; the wait before the next try, or raise when out of tries."""
        self._current = (self._current + 1) % len(self.urls)
        if attempt >= self.retry.attempts:
            raise _connection_error("unreachable", request, exc) from exc
        return self.retry.delay(attempt)

    def _lost(self, attempt: int, request: httpx.Request, exc: Exception) -> float:
        """The connection broke after the request was sent (the shard died, a read timed out):
        the wait before sending a safe call again on the next URL; otherwise raise
        ``connection_lost``, since the shard may have applied it (and a timed-out call is not
        repeated: it would only wait as long again)."""
        if (
            retries_lost_connection(request.method)
            and not isinstance(exc, httpx.TimeoutException)
            and attempt < self.retry.attempts
        ):
            self._current = (self._current + 1) % len(self.urls)
            return self.retry.delay(attempt)
        raise _connection_error("connection_lost", request, exc) from exc

    def _retry_after(self, attempt: int, response: httpx.Response, idempotent: bool) -> float | None:
        if should_retry_status(response.status_code, idempotent) and attempt < self.retry.attempts:
            return self.retry.delay(attempt, response.headers.get("retry-after"))
        return None


def _connection_error(code: str, request: httpx.Request, exc: Exception) -> ThemisConnectionError:
    error = ThemisConnectionError(0, code, f"{request.method} {request.url}: {exc!r}")
    error.request = f"{request.method} {request.url.path}"
    return error


def _signature(build: Callable[..., Any]) -> inspect.Signature:
    """``build``'s signature as a method's: ``self`` first, returning what the call parses to
    (so ``help()`` and IDEs show ``put(self, ...) -> WriteResult``)."""
    sig = inspect.signature(build)
    ret = sig.return_annotation
    if isinstance(ret, str) and ret.startswith("Call[") and ret.endswith("]"):
        ret = ret[5:-1]
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    return sig.replace(parameters=[self_param, *sig.parameters.values()], return_annotation=ret)


def _sync[**P, T](build: Callable[P, Call[T]]) -> Callable[Concatenate[ThemisClient, P], T]:
    @functools.wraps(build)
    def method(self: ThemisClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(build(*args, **kwargs))

    del method.__wrapped__  # type: ignore[attr-defined]
    method.__signature__ = _signature(build)  # type: ignore[attr-defined]
    return method


def _async[**P, T](build: Callable[P, Call[T]]) -> Callable[Concatenate[AsyncThemisClient, P], Awaitable[T]]:
    @functools.wraps(build)
    async def method(self: AsyncThemisClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run(build(*args, **kwargs))

    del method.__wrapped__  # type: ignore[attr-defined]
    method.__signature__ = _signature(build)  # type: ignore[attr-defined]
    return method


class ThemisClient(_Base):
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
        super().__init__(base_url, http, api_key, retry, headers)
        self._own_http = http is None
        self.http = http or httpx.Client(timeout=timeout, verify=verify, cert=cert)

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    def __enter__(self) -> ThemisClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, method: str, path: str, *, json: Any = None, headers=None, idempotent: bool, stream=False):
        """One HTTP exchange under the retry policy; a non-2xx answer raises its typed exception."""
        attempt = 0
        while True:
            attempt += 1
            request = self._request(self.http, method, path, json, headers)
            try:
                response = self.http.send(request, stream=stream)
            except _CONNECT_ERRORS as exc:
                time.sleep(self._unreachable(attempt, request, exc))
                continue
            except httpx.TransportError as exc:
                time.sleep(self._lost(attempt, request, exc))
                continue
            if response.is_success:
                return response
            wait = self._retry_after(attempt, response, idempotent)
            if stream:
                response.read()
                response.close()
            if wait is None:
                raise _error(response)
            time.sleep(wait)

    def run[T](self, call: Call[T]) -> T:
        response = self.send(
            call.method, call.path, json=call.json, headers=call.headers, idempotent=call.idempotent
        )
        return call.parse(response.text if call.text else response.json())

    health = _sync(calls.health)
    metrics = _sync(calls.metrics)
    cluster_status = _sync(calls.cluster_status)
    raid_status = _sync(calls.raid_status)
    raid_verify = _sync(calls.raid_verify)
    raid_rebuild = _sync(calls.raid_rebuild)
    declare_collection = _sync(calls.declare_collection)
    collection = _sync(calls.collection)
    collections = _sync(calls.collections)
    put = _sync(calls.put)
    get = _sync(calls.get)
    delete = _sync(calls.delete)
    batch = _sync(calls.batch)
    transaction = _sync(calls.transaction)
    transaction_outcome = _sync(calls.transaction_outcome)
    search = _sync(calls.search)
    aql = _sync(calls.aql)
    infer = _sync(calls.infer)
    infer_batch = _sync(calls.infer_batch)
    embed = _sync(calls.embed)
    rag = _sync(calls.rag)
    rag_replay = _sync(calls.rag_replay)
    adapters = _sync(calls.adapters)
    load_adapter = _sync(calls.load_adapter)
    unload_adapter = _sync(calls.unload_adapter)

    def stream(self, prompt: str, **params: Any) -> InferStream:
        """A streamed generation: ``with client.stream(p) as s: for t in s: ...``, then ``s.result``.
        Refusals (unknown adapter, full queue) raise before the first token."""
        body = calls.stream_body(prompt, **params)
        return InferStream(self.send("POST", "/v1/infer", json=body, idempotent=False, stream=True))

    def stream_rag(self, query: str, collection: str, **params: Any) -> InferStream:
        """``POST /v1/rag`` streamed: ``sources`` is set once the first event is read, then the
        tokens; ``params`` as for ``rag``."""
        body = {**calls.rag_body(query, collection, **params), "stream": True}
        return InferStream(self.send("POST", "/v1/rag", json=body, idempotent=False, stream=True))


class AsyncThemisClient(_Base):
    """The same API for asyncio: ``async with AsyncThemisClient(url) as db: await db.get(...)``."""

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
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(base_url, http, api_key, retry, headers)
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(timeout=timeout, verify=verify, cert=cert)

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncThemisClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(
        self, method: str, path: str, *, json: Any = None, headers=None, idempotent: bool, stream=False
    ):
        attempt = 0
        while True:
            attempt += 1
            request = self._request(self.http, method, path, json, headers)
            try:
                response = await self.http.send(request, stream=stream)
            except _CONNECT_ERRORS as exc:
                await asyncio.sleep(self._unreachable(attempt, request, exc))
                continue
            except httpx.TransportError as exc:
                await asyncio.sleep(self._lost(attempt, request, exc))
                continue
            if response.is_success:
                return response
            wait = self._retry_after(attempt, response, idempotent)
            if stream:
                await response.aread()
                await response.aclose()
            if wait is None:
                raise _error(response)
            await asyncio.sleep(wait)

    async def run[T](self, call: Call[T]) -> T:
        response = await self.send(
            call.method, call.path, json=call.json, headers=call.headers, idempotent=call.idempotent
        )
        return call.parse(response.text if call.text else response.json())

    health = _async(calls.health)
    metrics = _async(calls.metrics)
    cluster_status = _async(calls.cluster_status)
    raid_status = _async(calls.raid_status)
    raid_verify = _async(calls.raid_verify)
    raid_rebuild = _async(calls.raid_rebuild)
    declare_collection = _async(calls.declare_collection)
    collection = _async(calls.collection)
    collections = _async(calls.collections)
    put = _async(calls.put)
    get = _async(calls.get)
    delete = _async(calls.delete)
    batch = _async(calls.batch)
    transaction = _async(calls.transaction)
    transaction_outcome = _async(calls.transaction_outcome)
    search = _async(calls.search)
    aql = _async(calls.aql)
    infer = _async(calls.infer)
    infer_batch = _async(calls.infer_batch)
    embed = _async(calls.embed)
    rag = _async(calls.rag)
    rag_replay = _async(calls.rag_replay)
    adapters = _async(calls.adapters)
    load_adapter = _async(calls.load_adapter)
    unload_adapter = _async(calls.unload_adapter)

    async def stream(self, prompt: str, **params: Any) -> AsyncInferStream:
        """``async with await db.stream(p) as s: async for t in s: ...``, then ``s.result``."""
        body = calls.stream_body(prompt, **params)
        return AsyncInferStream(
            await self.send("POST", "/v1/infer", json=body, idempotent=False, stream=True)
        )

    async def stream_rag(self, query: str, collection: str, **params: Any) -> AsyncInferStream:
        body = {**calls.rag_body(query, collection, **params), "stream": True}
        return AsyncInferStream(await self.send("POST", "/v1/rag", json=body, idempotent=False, stream=True))


def _event(event: Any) -> StreamToken | InferResult | list[RagSource] | None:
    """A token, the final result (``done``), a RAG stream's sources (its first event), None for
    ``[DONE]``; an error event raises."""
    if event == DONE:
        return None
    if "error" in event:
        err = event["error"]
        raise error_from_response(503 if err.get("code") in ("unavailable", "engine_error") else 500, event)
    if event.get("done"):
        return InferResult.model_validate(event)
    if "sources" in event and "token" not in event:
        return [RagSource.model_validate(s) for s in event["sources"]]
    return StreamToken.model_validate(event)


class InferStream:
    """Iterates ``StreamToken``s; after the last one, ``result`` is the final ``InferResult``
    (the server's ``done`` event). An error event mid-stream raises its typed exception."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.result: InferResult | None = None
        #: A RAG stream's passages (``stream_rag``), read before its first token.
        self.sources: list[RagSource] | None = None

    def __iter__(self) -> Iterator[StreamToken]:
        try:
            for raw in sse_events(self._response.iter_lines()):
                item = _event(raw)
                if item is None:
                    return
                if isinstance(item, InferResult):
                    self.result = item
                elif isinstance(item, list):
                    self.sources = item
                else:
                    yield item
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


class AsyncInferStream:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.result: InferResult | None = None
        self.sources: list[RagSource] | None = None

    async def __aiter__(self) -> AsyncIterator[StreamToken]:
        decoder = SseDecoder()
        try:
            async for line in self._response.aiter_lines():
                raw = decoder.line(line)
                if raw is None:
                    continue
                item = _event(raw)
                if item is None:
                    return
                if isinstance(item, InferResult):
                    self.result = item
                elif isinstance(item, list):
                    self.sources = item
                else:
                    yield item
        finally:
            await self._response.aclose()

    async def aclose(self) -> None:
        await self._response.aclose()

    async def __aenter__(self) -> AsyncInferStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _error(response: httpx.Response) -> ThemisError:
    try:
        body = response.json()
    except ValueError:
        body = None
    error = error_from_response(response.status_code, body, response.text)
    error.request = f"{response.request.method} {response.request.url.path}"
    return error
