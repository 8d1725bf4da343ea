"""Access log and trace context: one line per request with method, route template, status,
latency and the trace id; the request runs inside its ``TraceContext`` (``tracing``), so
its other log lines and its calls to peers carry the same trace id.

Pure ASGI (streaming-safe). A streamed response is logged when its last byte is sent, so the
latency is the whole stream's. Probes, scrapes and shard-to-shard ``/internal/...`` hops log at
DEBUG: they would drown the rest (a client's request is logged once, where it arrived). The
request's span comes from ``spans`` (``tracing.Spans``: ids only, or OpenTelemetry with [otel]).
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from themis_core.tracing import NoSpans, ServerSpan, Spans, current_trace, parse_traceparent

log = logging.getLogger("themis.access")
QUIET_PATHS = frozenset({"/health", "/ready", "/metrics"})


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp, spans: Spans | None = None) -> None:
        self.app = app
        self.spans = spans or NoSpans()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"traceparent"), None)
        method = scope.get("method", "GET")
        with self.spans.server(method, parse_traceparent(header)) as server:
            await self._serve(scope, receive, send, server)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, server: ServerSpan) -> None:
        span = server.context
        token = current_trace.set(span)
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                # W3C Trace Context level 2: tells the caller which trace and span served it.
                headers = [*message.get("headers", ()), (b"traceresponse", span.header().encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            finish(server, scope.get("method", "GET"), scope.get("path", ""), route, status, started)
            current_trace.reset(token)


def finish(server: ServerSpan, method: str, path: str, route: str, status: int, started: float) -> None:
    """Name the request's span and write its access line (DEBUG for probes and peer hops)."""
    span = server.context
    elapsed_ms = (time.perf_counter() - started) * 1000
    server.name = f"{method} {route}"
    server.attributes.update(
        {
            "http.request.method": method,
            "http.route": route,
            "url.path": path,
            "http.response.status_code": status,
        }
    )
    level = logging.DEBUG if path in QUIET_PATHS or path.startswith("/internal/") else logging.INFO
    if log.isEnabledFor(level):
        log.log(
            level,
            "%s %s %d %.1fms",
            method,
            route,
            status,
            elapsed_ms,
            extra={
                "method": method,
                "route": route,
                "path": path,
                "status": status,
                "latency_ms": round(elapsed_ms, 3),
                "trace_id": span.trace_id,
                "span_id": span.span_id,
                "parent_span_id": span.parent_id,
            },
        )
