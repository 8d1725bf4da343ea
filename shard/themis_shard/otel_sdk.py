"""OpenTelemetry spans joined to the shards' own W3C trace context (needs the [otel] extra).

A request's SERVER span continues the caller's ``traceparent`` (its parent is the remote span
the header names) and its ids become the request's ``TraceContext``: log lines, ``traceresponse``
and the hops it makes name exactly the span that is exported. A hop's CLIENT span is a child of
it, and its id is the ``traceparent`` the peer receives, so the peer's SERVER span is the hop's
child: one trace id, parent → child across shards. The tracer provider is the shard's own (no
global provider is set); the shard closes it on shutdown, flushing what is batched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from themis_core.tracing import Attribute, ServerSpan, TraceContext


def otlp_processor() -> SpanProcessor:
    """Batches exported over OTLP/HTTP; endpoint, headers and timeout from the standard
    OTEL_EXPORTER_OTLP_* variables."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return BatchSpanProcessor(OTLPSpanExporter())


def _otel_context(parent: TraceContext | None):
    if parent is None:
        return None
    remote = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(parent.flags, 16)),
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _ours(span: trace.Span, parent: TraceContext | None) -> TraceContext:
    ctx = span.get_span_context()
    return TraceContext(
        format(ctx.trace_id, "032x"),
        format(ctx.span_id, "016x"),
        format(int(ctx.trace_flags), "02x"),
        parent_id=None if parent is None else parent.span_id,
    )


class OtelSpans:
    """``tracing.Spans`` that records every span in an OpenTelemetry tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("themis_shard")

    @classmethod
    def exporting(cls, processor: SpanProcessor, *, service_name: str, shard_id: str) -> OtelSpans:
        """A provider of this shard's own; ``processor``: e.g. ``BatchSpanProcessor(otlp_exporter())``."""
        provider = TracerProvider(
            resource=Resource.create({"service.name": service_name, "service.instance.id": shard_id})
        )
        provider.add_span_processor(processor)
        return cls(provider)

    @contextmanager
    def server(self, name: str, incoming: TraceContext | None) -> Iterator[ServerSpan]:
        span = self.tracer.start_span(name, context=_otel_context(incoming), kind=SpanKind.SERVER)
        held = ServerSpan(_ours(span, incoming))
        try:
            yield held
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            if held.name:
                span.update_name(held.name)
            span.set_attributes(held.attributes)
            if int(held.attributes.get("http.response.status_code", 0)) >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()

    @contextmanager
    def client(
        self, name: str, parent: TraceContext | None, attributes: Mapping[str, Attribute]
    ) -> Iterator[TraceContext | None]:
        if parent is None:  # background work outside any request: no trace to join
            yield None
            return
        span = self.tracer.start_span(
            name, context=_otel_context(parent), kind=SpanKind.CLIENT, attributes=dict(attributes)
        )
        try:
            yield _ours(span, parent)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            span.end()

    def close(self) -> None:
        self.provider.shutdown()
