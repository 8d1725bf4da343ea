"""RemoteExecutor: shard-to-shard HTTP calls that fail fast, fail typed and never hang.

One pooled ``httpx.AsyncClient`` per shard process (keep-alive connections to every peer),
connect/request timeouts from settings (5 s / 30 s, paper §III-C), retries with exponential
backoff and full jitter for idempotent calls (3), and a circuit breaker per peer (5 failures /
60 s) consulted before every attempt — an open breaker refuses locally, in microseconds.

Outcomes are typed so callers can decide without parsing strings:

* :class:`PeerUnavailable` — no usable answer (breaker open, connect failure, timeout,
  transport error, 5xx, a 401 refusing this shard's signature on ``/internal``, or a body that
  is not what was asked for). Another shard may serve the
  request: fail over. Counts against the peer's breaker.
* :class:`PeerError` — the peer answered with a 4xx (``{"error": {"code", "message"}}``). That
  is an answer, not a fault: relay it. It does not count against the breaker.

TLS: pass an ``ssl.SSLContext`` (see :func:`client_ssl_context`, fed by the PEM files that
``themis_core/certificates.py`` issues) and https peer URLs; plain HTTP when TLS is off. HTTP/1.1
keep-alive (the paper's HTTP/2 would need the ``h2`` package and a server speaking it; uvicorn does not).
Metrics go to the CollectorRegistry passed in, never the global one.

Why one ~520-line module: one client whose every call goes through the same retries, breaker,
signature, trace propagation and typed outcomes; the breaker's state machine is ``breaker.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import quote

import httpx
import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import BaseModel, ValidationError
from themis_core.tracing import NoSpans, Spans, current_trace, outgoing_traceparent

from ..settings import ClusterSettings
from .breaker import BreakerRegistry, BreakerState
from .channel import ChannelPool, NoChannel, Signer

M = TypeVar("M", bound=BaseModel)
Expect = Literal["json", "bytes", "none"]
Sleep = Callable[[float], Awaitable[None]]

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
#: Failures where the request provably never reached the peer: safe to retry even a POST.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class PeerAnswer(Protocol):
    """What is read of a peer's answer: an HTTP response, or a channel's answer frame."""

    @property
    def status_code(self) -> int: ...

    @property
    def content(self) -> bytes: ...


class RemoteCallError(Exception):
    def __init__(self, peer: str, reason: str, message: str = "", *, status: int | None = None) -> None:
        super().__init__(f"{peer}: {reason}" + (f" ({message})" if message else ""))
        self.peer = peer
        self.reason = reason
        self.message = message
        self.status = status


class PeerUnavailable(RemoteCallError):
    """The peer gave no usable answer; reason ∈ circuit_open, connect_error, timeout,
    transport_error, server_error, bad_response. A 5xx with our error body keeps its ``code``
    (a coordinator's deliberate 503 says what it did)."""

    code: str | None = None


class PeerError(RemoteCallError):
    """The peer answered with a 4xx; ``code``/``message`` come from its JSON error body."""

    def __init__(self, peer: str, status: int, code: str, message: str) -> None:
        super().__init__(peer, "client_error", message, status=status)
        self.code = code


def client_ssl_context(
    ca_path: str | Path, cert_path: str | Path, key_path: str | Path, *, check_hostname: bool = True
) -> ssl.SSLContext:
    """mTLS client context: trust only the cluster CA, present this shard's certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_path))
    ctx.load_cert_chain(str(cert_path), str(key_path))
    ctx.check_hostname = check_hostname
    return ctx


def server_ssl_options(ca_path: str | Path, cert_path: str | Path, key_path: str | Path) -> dict[str, Any]:
    """uvicorn keyword arguments for an mTLS server that requires a cluster client certificate.

    Note: this makes every connection present a certificate; serving the public API without
    client certificates needs ``ssl.CERT_OPTIONAL`` and a check on ``/internal`` routes.
    """
    return {
        "ssl_certfile": str(cert_path),
        "ssl_keyfile": str(key_path),
        "ssl_ca_certs": str(ca_path),
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }


class RemoteMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "themis_remote_requests_total",
            "Shard-to-shard call attempts by peer and outcome",
            ["peer", "outcome"],
            registry=registry,
        )
        self.latency = Histogram(
            "themis_remote_request_duration_seconds",
            "Shard-to-shard call attempt latency",
            ["peer"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "themis_remote_retries_total",
            "Retried shard-to-shard attempts by peer",
            ["peer"],
            registry=registry,
        )


class RemoteExecutor:
    """Calls peers by shard id; ``resolve(shard_id)`` gives the peer's base URL."""

    def __init__(
        self,
        settings: ClusterSettings,
        resolve: Callable[[str], str],
        *,
        registry: CollectorRegistry | None = None,
        breakers: BreakerRegistry | None = None,
        ssl_context: ssl.SSLContext | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        spans: Spans | None = None,
    ) -> None:
        self.settings = settings
        self.resolve = resolve
        #: one CLIENT span per call inside a request (``tracing.Spans``; OpenTelemetry with [otel])
        self.spans = spans or NoSpans()
        self.breakers = breakers or BreakerRegistry.from_settings(settings, clock)
        registry = registry or CollectorRegistry()
        self.metrics = RemoteMetrics(registry)
        registry.register(self.breakers.collector())
        if ssl_context is None and settings.tls_enabled:
            ssl_context = client_ssl_context(
                settings.tls_ca_path,
                settings.tls_cert_path,
                settings.tls_key_path,
                check_hostname=settings.tls_check_hostname,
            )
        #: the client TLS context, also used by the engine's draft-shard client (/internal mTLS)
        self.ssl_context = ssl_context
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._clock = clock
        #: the /ready probe of ``revive`` under way per peer: callers arriving meanwhile share it
        self._revivals: dict[str, asyncio.Future[bool]] = {}
        #: signs every call with the cluster secret (``peer_auth.PeerAuth``); None: unsigned
        self.auth = auth
        #: ``/internal`` calls as frames on one WebSocket per peer; None: every call over HTTP
        #: (turned off, or a test transport stands in for the network)
        self.channels = (
            ChannelPool(
                lambda peer: self.resolve(peer),
                ssl_context=ssl_context,
                signer=auth if isinstance(auth, Signer) else None,
                headers=dict(headers or {}),
                connect_timeout_s=settings.connect_timeout_s,
                clock=clock,
                registry=registry,
            )
            if settings.peer_channel and transport is None
            else None
        )
        self.client = httpx.AsyncClient(
            auth=auth,
            timeout=httpx.Timeout(settings.request_timeout_s, connect=settings.connect_timeout_s),
            limits=httpx.Limits(
                max_connections=settings.pool_max_connections,
                max_keepalive_connections=settings.pool_max_keepalive,
            ),
            verify=ssl_context if ssl_context is not None else True,
            transport=transport,
            headers=dict(headers or {}),
            follow_redirects=False,
            trust_env=False,  # peers are on the cluster network: never route them through a proxy
            event_hooks={"request": [_propagate_trace]},
        )

    async def __aenter__(self) -> RemoteExecutor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self.channels is not None:
            await self.channels.aclose()
        await self.client.aclose()

    async def answers(self, peer: str, timeout_s: float = 1.0) -> bool:
        """Does ``peer`` answer ``/ready`` now? Outside the breaker's accounting: background
        work (anti-entropy, tombstone GC) asks first, so a peer still starting costs it a skipped
        round instead of tripping the breaker for the requests that matter."""
        try:
            r = await self.client.get(self._url(peer, "/ready"), timeout=timeout_s)
        except (httpx.HTTPError, PeerUnavailable):
            return False
        return r.status_code == 200

    async def revive(self, peer: str, timeout_s: float = 1.0) -> bool:
        """Probe an open-breaker peer's ``/ready`` now and close its breaker when it answers:
        for a caller that may not fail over to another peer (a fenced write), a breaker opened
        by failures that are over (a peer still starting) must not refuse it for a minute.
        It asks the breaker's state without taking its half-open probe, which the call that
        follows needs. Callers that come while a probe of the same peer is out share its answer,
        so a paused peer costs one probe, not one per waiting request."""
        if self.breakers.get(peer).state is BreakerState.CLOSED:
            return True
        probe = self._revivals.get(peer)
        if probe is None:
            probe = asyncio.ensure_future(self._probe_and_close(peer, timeout_s))
            self._revivals[peer] = probe
            probe.add_done_callback(lambda _: self._revivals.pop(peer, None))
        return await asyncio.shield(probe)  # a caller that gives up leaves the probe to the rest

    async def revive_or_refuse(self, peer: str) -> None:
        """``revive`` for a caller with no other peer to ask: a peer that does not answer is
        refused as an open breaker refuses it."""
        if not await self.revive(peer):
            raise PeerUnavailable(peer, "circuit_open", "breaker open and /ready does not answer")

    async def _probe_and_close(self, peer: str, timeout_s: float) -> bool:
        if not await self.answers(peer, timeout_s):
            return False
        self.breakers.get(peer).record_success()
        return True

    def open_peers(self) -> frozenset[str]:
        """Peers whose breaker is open: the router skips them."""
        return self.breakers.open_peers()

    def backoff_s(self, attempt: int) -> float:
        """Full jitter: U(0, min(max, base · 2^attempt)) — spreads retry storms after a blip."""
        cap = min(self.settings.retry_backoff_max_s, self.settings.retry_backoff_base_s * (2**attempt))
        return self._rng.uniform(0, cap)

    # ---- the one primitive ------------------------------------------------------------------

    async def request(
        self, peer: str, method: str, path: str, *, headers: Mapping[str, str] | None = None, **kw: Any
    ) -> Any:
        """``_request`` inside one CLIENT span of the calling request's trace (retries included);
        the peer's server span is its child, through the ``traceparent`` it sends."""
        method = method.upper()
        attributes = {"themis.peer": peer, "http.request.method": method, "url.path": path}
        with self.spans.client(f"{method} {peer}", current_trace.get(), attributes) as hop:
            if hop is not None:
                headers = {"traceparent": hop.header(), **(headers or {})}  # a caller's own wins
            return await self._request(peer, method, path, headers=headers, **kw)

    async def _request(
        self,
        peer: str,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        expect: Expect = "json",
        model: type[M] | None = None,
        idempotent: bool | None = None,
        retries: int | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One logical call with breaker, retries and response validation.

        ``idempotent`` defaults from the method (GET/HEAD/PUT/DELETE/OPTIONS); a POST is retried
        only when marked idempotent or when the connection provably failed before sending.
        ``retries`` overrides the setting (a router failing over to another shard passes 0).
        ``model`` validates a JSON body into that pydantic model (shape errors → bad_response).
        """
        method = method.upper()
        idem = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
        budget = self.settings.max_retries if retries is None else retries
        breaker = self.breakers.get(peer)
        url = self._url(peer, path)
        timeout = (
            None
            if timeout_s is None
            else httpx.Timeout(timeout_s, connect=min(timeout_s, self.settings.connect_timeout_s))
        )
        last: PeerUnavailable | None = None
        attempt = 0
        while True:
            if not breaker.allow():
                self.metrics.requests.labels(peer=peer, outcome="circuit_open").inc()
                raise last or PeerUnavailable(
                    peer, "circuit_open", f"retry in {breaker.seconds_until_probe():.1f} s"
                )
            started = self._clock()
            try:
                kw: dict[str, Any] = {"params": params, "headers": headers}
                if timeout is not None:
                    kw["timeout"] = timeout
                if json_body is not None:
                    kw["content"] = dumps(json_body)
                    kw["headers"] = {"content-type": "application/json", **(headers or {})}
                elif content is not None:
                    kw["content"] = content
                resp = await self._send(peer, method, url, path, kw)
            except httpx.TimeoutException as exc:
                last = self._fail(peer, "timeout", exc)
                retry_ok = idem or isinstance(exc, _NOT_SENT)
            except httpx.TransportError as exc:  # connect refused/reset, protocol garbage
                reason = "connect_error" if isinstance(exc, httpx.ConnectError) else "transport_error"
                last = self._fail(peer, reason, exc)
                retry_ok = idem or isinstance(exc, _NOT_SENT)
            else:
                self.metrics.latency.labels(peer=peer).observe(self._clock() - started)
                if resp.status_code >= 500:
                    answer = _peer_error(peer, resp)
                    if resp.status_code in (503, 507) and answer.code != "http_error":
                        # A deliberate refusal (our error body: starting, a full disk): the peer
                        # is healthy, the breaker must not count it, and the caller gets its code.
                        breaker.record_success()
                        self.metrics.requests.labels(peer=peer, outcome="refused").inc()
                        last = PeerUnavailable(peer, "server_error", answer.message, status=resp.status_code)
                        last.code = answer.code
                    else:
                        last = self._fail(
                            peer, "server_error", f"HTTP {resp.status_code}", status=resp.status_code
                        )
                    retry_ok = idem
                elif refused_signature(path, resp):
                    last = self._refused_signature(peer, resp)
                    retry_ok = True  # refused before it ran; a retry carries a fresh signature
                elif resp.status_code >= 400:
                    breaker.record_success()  # the peer is healthy; the request was refused
                    self.metrics.requests.labels(peer=peer, outcome="client_error").inc()
                    raise _peer_error(peer, resp)
                else:
                    return self._accept(peer, resp, expect, model)
            if attempt >= budget or not retry_ok or breaker.state is BreakerState.OPEN:
                raise last  # (no point sleeping before an attempt the breaker would refuse)
            attempt += 1
            self.metrics.retries.labels(peer=peer).inc()
            await self._sleep(self.backoff_s(attempt - 1))

    async def _send(self, peer: str, method: str, url: str, path: str, kw: dict[str, Any]) -> PeerAnswer:
        """One attempt: over the peer's channel for an ``/internal`` call, else HTTP."""
        if self.channels is not None and path.startswith("/internal/"):
            target = path
            if kw.get("params"):
                target += "?" + str(httpx.QueryParams(kw["params"]))
            timeout = kw.get("timeout")
            timeout_s = timeout.read if timeout is not None else self.settings.request_timeout_s
            try:
                return await self.channels.request(
                    peer, method, target, dict(kw.get("headers") or {}), kw.get("content") or b"", timeout_s
                )
            except NoChannel:
                pass
        return await self.client.request(method, url, **kw)

    def _url(self, peer: str, path: str) -> str:
        try:
            base = self.resolve(peer)
        except (KeyError, LookupError) as exc:  # not (or no longer) in the plan
            self.metrics.requests.labels(peer=peer, outcome="unknown_peer").inc()
            raise PeerUnavailable(peer, "unknown_peer") from exc
        return base.rstrip("/") + path

    @contextlib.asynccontextmanager
    async def stream(
        self, peer: str, method: str, path: str, *, headers: Mapping[str, str] | None = None, **kw: Any
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """``_stream`` inside one CLIENT span of the calling request's trace, ended when the
        stream is closed (a relayed token stream, a KV-prefix or RAID transfer)."""
        method = method.upper()
        attributes = {"themis.peer": peer, "http.request.method": method, "url.path": path}
        with self.spans.client(f"{method} {peer}", current_trace.get(), attributes) as hop:
            if hop is not None:
                headers = {"traceparent": hop.header(), **(headers or {})}  # a caller's own wins
            async with self._stream(peer, method, path, headers=headers, **kw) as chunks:
                yield chunks

    @contextlib.asynccontextmanager
    async def _stream(
        self,
        peer: str,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        chunk_size: int | None = 1 << 20,
        timeout_s: float | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Stream a response body without buffering it: large binaries (KV-prefix state, RAID
        chunks) in ``chunk_size`` pieces, or an SSE stream with ``chunk_size=None`` (each chunk
        as it arrives, so tokens are relayed as soon as the peer sends them).

        ``async with ex.stream(peer, "GET", path) as chunks: async for chunk in chunks: ...``
        Entering waits for the response headers only. No retries (a half-consumed stream cannot
        be replayed); the breaker and error types are those of :meth:`request`, and a peer that
        dies mid-stream raises PeerUnavailable from the iteration.
        """
        breaker = self.breakers.get(peer)
        url = self._url(peer, path)
        if not breaker.allow():
            self.metrics.requests.labels(peer=peer, outcome="circuit_open").inc()
            raise PeerUnavailable(peer, "circuit_open", f"retry in {breaker.seconds_until_probe():.1f} s")
        kw: dict[str, Any] = {"headers": headers}
        if json_body is not None:
            kw["json"] = json_body
        else:
            kw["content"] = content
        if timeout_s is not None:
            kw["timeout"] = httpx.Timeout(timeout_s, connect=min(timeout_s, self.settings.connect_timeout_s))
        try:
            async with self.client.stream(method.upper(), url, **kw) as resp:
                if resp.status_code >= 500:
                    raise self._fail(
                        peer, "server_error", f"HTTP {resp.status_code}", status=resp.status_code
                    )
                if refused_signature(path, resp):
                    await resp.aread()
                    raise self._refused_signature(peer, resp)
                if resp.status_code >= 400:
                    await resp.aread()
                    breaker.record_success()
                    self.metrics.requests.labels(peer=peer, outcome="client_error").inc()
                    raise _peer_error(peer, resp)

                async def chunks() -> AsyncIterator[bytes]:
                    try:
                        async for chunk in resp.aiter_bytes(chunk_size):
                            yield chunk
                    except httpx.TimeoutException as exc:
                        raise self._fail(peer, "timeout", exc) from exc
                    except httpx.TransportError as exc:
                        raise self._fail(peer, "transport_error", exc) from exc

                yield chunks()
                breaker.record_success()
                self.metrics.requests.labels(peer=peer, outcome="ok").inc()
        except httpx.TimeoutException as exc:
            raise self._fail(peer, "timeout", exc) from exc
        except httpx.TransportError as exc:
            reason = "connect_error" if isinstance(exc, httpx.ConnectError) else "transport_error"
            raise self._fail(peer, reason, exc) from exc

    def _fail(self, peer: str, reason: str, detail: object, *, status: int | None = None) -> PeerUnavailable:
        self.breakers.get(peer).record_failure()
        self.metrics.requests.labels(peer=peer, outcome=reason).inc()
        text = detail if isinstance(detail, str) else (f"{type(detail).__name__}: {detail}".rstrip(": "))
        return PeerUnavailable(peer, reason, text, status=status)

    def _refused_signature(self, peer: str, resp: PeerAnswer) -> PeerUnavailable:
        """A peer's 401 on ``/internal``: it refused this shard's signature (clock skew, a stale
        request it read late, another cluster secret). A fault between shards, never the
        client's own 401: the caller fails over or answers 503 ``peer_auth_failed``."""
        detail = _peer_error(peer, resp).message
        exc = self._fail(
            peer, "peer_auth", f"{peer} refused this shard's signed request: {detail}", status=401
        )
        exc.code = "peer_auth_failed"
        return exc

    def _accept(self, peer: str, resp: PeerAnswer, expect: Expect, model: type[M] | None) -> Any:
        breaker = self.breakers.get(peer)
        if expect == "bytes":
            value: Any = resp.content
        elif expect == "none":
            value = None
        else:
            try:
                value = orjson.loads(resp.content)
                if model is not None:
                    value = model.model_validate(value)
            except (ValueError, ValidationError) as exc:  # not JSON, or not the promised shape
                raise self._fail(
                    peer, "bad_response", f"{type(exc).__name__}: {str(exc)[:200]}", status=resp.status_code
                ) from None
        breaker.record_success()
        self.metrics.requests.labels(peer=peer, outcome="ok").inc()
        return value

    # ---- conveniences -------------------------------------------------------------------------

    async def get_json(self, peer: str, path: str, **kw: Any) -> Any:
        return await self.request(peer, "GET", path, **kw)

    async def post_json(self, peer: str, path: str, body: Any, *, idempotent: bool = False, **kw: Any) -> Any:
        return await self.request(peer, "POST", path, json_body=body, idempotent=idempotent, **kw)

    async def get_bytes(self, peer: str, path: str, **kw: Any) -> bytes:
        """Binary GET (KV-prefix export, RAID chunks)."""
        return await self.request(peer, "GET", path, expect="bytes", **kw)

    async def post_bytes(
        self,
        peer: str,
        path: str,
        data: bytes,
        *,
        expect: Expect = "json",
        idempotent: bool = False,
        **kw: Any,
    ) -> Any:
        """Binary POST (application/octet-stream), e.g. KV-prefix import or a chunk upload."""
        headers = {"content-type": "application/octet-stream", **kw.pop("headers", {})}
        return await self.request(
            peer, "POST", path, content=data, headers=headers, expect=expect, idempotent=idempotent, **kw
        )


def dumps(body: Any) -> bytes:
    """A JSON request body: orjson (several times json's speed), json for what it refuses."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(body).encode()


def internal_path(*segments: str) -> str:
    """``/internal/a/b/...`` with every segment percent-encoded (``.`` and ``..`` included), so
    no key is ever dot-segment-normalised or re-split by a client or proxy on the way."""
    return "/internal/" + "/".join(
        quote(s, safe="").replace(".", "%2E") if s in (".", "..") else quote(s, safe="") for s in segments
    )


def refused_signature(path: str, resp: PeerAnswer) -> bool:
    return resp.status_code == 401 and path.startswith("/internal/")


def _peer_error(peer: str, resp: PeerAnswer) -> PeerError:
    code, message = "http_error", f"HTTP {resp.status_code}"
    try:
        err = json.loads(resp.content)["error"]
        code, message = str(err["code"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        pass
    return PeerError(peer, resp.status_code, code, message)


async def _propagate_trace(request: httpx.Request) -> None:
    """Every hop carries the calling request's trace (W3C ``traceparent``, a new span per hop)."""
    header = outgoing_traceparent()
    if header is not None and "traceparent" not in request.headers:
        request.headers["traceparent"] = header
