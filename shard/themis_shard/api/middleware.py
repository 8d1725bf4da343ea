"""Pure-ASGI middleware (streaming-safe, unlike BaseHTTPMiddleware): request-size limit and
per-route request metrics."""

from __future__ import annotations

import json
import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import error_body
from ..metrics import ShardMetrics
from .asgi import read_body, replaying, send_json


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a body passes its limit. An ``HTTPException``, so a route
    reading its body answers 413 through the app's handlers; a middleware reading it (the
    ``/internal`` signature check) lets it rise to :class:`BodyLimitMiddleware`, which answers."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes")


class BodyLimitMiddleware:
    """The one body limit of every route, public and ``/internal``: 413 for a body over
    ``max_bytes``, declared (Content-Length: before reading) or streamed (chunked: as soon as
    the bytes read pass it, never buffering more). ``path_limits`` gives a few binary
    endpoints (KV-state import) their own, larger limit."""

    def __init__(self, app: ASGIApp, max_bytes: int, path_limits: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = path_limits or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope.get("path", ""), self.max_bytes)
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await _reply_413(send, limit)
                return
        seen = 0
        started = False

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited, sending)
        except BodyTooLarge:
            if started:  # too late for a status: end the response (the server closes it)
                raise
            await _reply_413(send, limit)


async def _reply_413(send: Send, limit: int) -> None:
    await reply_unread(send, 413, "payload_too_large", f"request body exceeds {limit} bytes")


async def reply_unread(send: Send, status: int, code: str, message: str) -> None:
    """An error answered before the request's body is (fully) read: the connection closes after
    it, so whatever the client still sends is never taken for the next request."""
    await send_json(send, status, json.dumps(error_body(code, message)).encode(), [(b"connection", b"close")])


class MetricsMiddleware:
    """Counts requests and observes latency by route template (bounded label values)."""

    def __init__(self, app: ASGIApp, metrics: ShardMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self._children: dict[tuple[str, str, str], tuple] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "GET")
            self.metrics.record_request(method, template, status, time.perf_counter() - started)


class ListenerGuard:
    """Keeps the two listeners apart: ``/internal/...`` only on the internal (mTLS) port, and
    the internal port serves nothing else but health — so a client without a cluster
    certificate can never reach a shard-to-shard endpoint."""

    def __init__(self, app: ASGIApp, internal_port: int | None) -> None:
        self.app = app
        self.internal_port = internal_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and self.internal_port is not None:
            server = scope.get("server") or (None, None)
            if scope.get("path", "").startswith("/internal/") and server[1] != self.internal_port:
                await send({"type": "websocket.close", "code": 1008})  # the opening is answered 403
                return
        if scope["type"] == "http" and self.internal_port is not None:
            server = scope.get("server") or (None, None)
            on_internal = server[1] == self.internal_port
            path = scope.get("path", "")
            internal_path = path.startswith("/internal/")
            if internal_path != on_internal and path not in ("/health", "/ready", "/metrics"):
                body = (
                    b'{"error":{"code":"forbidden","message":"shard-to-shard endpoints are served only '
                    b'on the internal mTLS listener"}}'
                )
                await send_json(send, 403, body)
                return
        await self.app(scope, receive, send)


class InternalAuth:
    """Refuses ``/internal/...`` requests not signed with the cluster secret (401), when the
    node's ``InternalAuthPolicy`` requires it (a gossip secret and no mTLS). An unsigned or
    expired request is refused on its headers, before a byte of its body is read; otherwise
    the body (bounded by :class:`BodyLimitMiddleware`, outside this one) is read here to check
    its hash and then handed on unchanged. A request arriving as a peer-channel frame
    (``api/channel.py``) was authenticated with its channel and passes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" and "themis.channel" not in scope else ""
        node = getattr(getattr(scope.get("app"), "state", None), "node", None) if path else None
        policy = node.cluster.internal_auth if node is not None else None
        if not path.startswith("/internal/") or policy is None or not policy.required:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        early = policy.early_refusal(headers)
        if early is not None:
            await _reply_401(send, early)
            return
        body = await read_body(receive)
        raw = scope.get("raw_path") or path.encode()
        target = raw.decode("latin-1") + (
            f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else ""
        )
        reason = policy.refusal(headers, scope.get("method", "GET"), target, body)
        if reason is not None:
            await _reply_401(send, reason)
            return
        await self.app(scope, replaying(body, receive), send)


async def _reply_401(send: Send, reason: str) -> None:
    await reply_unread(send, 401, "unauthenticated", f"/internal: {reason}")
