"""Access log and trace context: one line per request with method, route template, status,
latency and the trace id; the request runs inside its ``TraceContext`` (``tracing``), so
its other log lines and its calls to peers carry the same trace id.

Pure ASGI (streaming-safe). A streamed response is logged when its last byte is sent, so the
latency is the whole stream's. The request's span comes from ``spans`` (``tracing.Spans``: ids
only, or OpenTelemetry with [otel]).

Which lines reach INFO (``level_of``): a client's request that failed (4xx/5xx) or ran longer than
``slow_ms``, as etcd logs its slow requests and vLLM logs requests only when asked. The rest log
at DEBUG, as do probes, scrapes and shard-to-shard ``/internal/...`` hops (a client's request is
logged once, where it arrived). A line per request cost a document write about 5 % of the
shards' CPU (16 writers, 3 shards, interleaved A/B), so logging every one is a choice
(``THEMIS_ACCESS_LOG_EVERY_REQUEST=true``), not the default.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from themis_core.logs import AccessLogSettings
from themis_core.tracing import NoSpans, ServerSpan, Spans, current_trace, parse_traceparent

log = logging.getLogger("themis.access")
QUIET_PATHS = frozenset({"/health", "/ready", "/metrics"})


def level_of(path: str, status: int, elapsed_ms: float, settings: AccessLogSettings) -> int:
    """The access line's level: DEBUG for probes and peer hops; for a client's request, INFO
    when it failed, was slow, or every request is asked for, else DEBUG."""
    if path in QUIET_PATHS or path.startswith("/internal/"):
        return logging.DEBUG
    if settings.every_request or status >= 400 or elapsed_ms >= settings.slow_ms:
        return logging.INFO
    return logging.DEBUG


class AccessLogMiddleware:
    def __init__(
        self, app: ASGIApp, spans: Spans | None = None, settings: AccessLogSettings | None = None
    ) -> None:
        self.app = app
        self.spans = spans or NoSpans()
        self.settings = settings or AccessLogSettings()

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
            method, path = scope.get("method", "GET"), scope.get("path", "")
            finish(server, method, path, route, status, started, self.settings)
            current_trace.reset(token)


def finish(
    server: ServerSpan,
    method: str,
    path: str,
    route: str,
    status: int,
    started: float,
    settings: AccessLogSettings,
) -> None:
    """Name the request's span and write its access line at ``level_of``'s level."""
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
    level = level_of(path, status, elapsed_ms, settings)
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
