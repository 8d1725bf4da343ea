"""W3C Trace Context (``traceparent``) for request ids that follow a request across shard hops.

A request's context lives in a contextvar: the access-log middleware sets it from the
incoming ``traceparent`` (or starts a trace), every log line reads it (``logs``), and the
cluster's peer client sends it on each hop with a fresh span id, so one trace id names the
request on every shard it touches. Parsing and formatting are pure.

Where the ids come from is a ``Spans`` strategy: ``NoSpans`` makes them up (the default, no
dependency); ``otel_sdk.OtelSpans`` (the [otel] extra) takes them from OpenTelemetry spans it
records and exports, so log lines, headers and exported spans name the same trace and spans.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    flags: str = "01"
    #: The caller's span (the incoming header's), None when this shard started the trace.
    parent_id: str | None = None

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def child(self) -> TraceContext:
        """The context of a call this span makes: same trace, a new span whose parent is ours."""
        return TraceContext(self.trace_id, new_span_id(), self.flags, parent_id=self.span_id)


def new_span_id() -> str:
    """Random, not secret (as OpenTelemetry's own generator): ``getrandbits``, no syscall per request."""
    while not (span := random.getrandbits(64)):
        pass
    return f"{span:016x}"


def new_trace() -> TraceContext:
    while not (trace := random.getrandbits(128)):
        pass
    return TraceContext(f"{trace:032x}", new_span_id())


def parse_traceparent(value: str | None) -> TraceContext | None:
    """The caller's context from a ``traceparent`` header; None when absent or invalid (the spec
    says to start a new trace then). Version ``ff`` and all-zero ids are invalid; a higher
    version's extra fields are ignored, as the spec asks."""
    if not value:
        return None
    m = _TRACEPARENT.match(value.strip().lower())
    if m is None:
        return None
    version, trace_id, span_id, flags, rest = m.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16 or (version == "00" and rest):
        return None
    return TraceContext(trace_id, span_id, flags)


def server_span(incoming: str | None) -> TraceContext:
    """This shard's span for a request: a child of the caller's, or the root of a new trace."""
    caller = parse_traceparent(incoming)
    return caller.child() if caller is not None else new_trace()


current_trace: ContextVar[TraceContext | None] = ContextVar("themis_trace", default=None)


def outgoing_traceparent() -> str | None:
    """The header for a call made now, from inside a request; None outside any request."""
    ctx = current_trace.get()
    return None if ctx is None else ctx.child().header()


Attribute = str | int | float | bool


@dataclass
class ServerSpan:
    """A request's span as the access log holds it: its context, and what it learns by the end
    (route template, status), which an exporting ``Spans`` records when the span ends."""

    context: TraceContext
    attributes: dict[str, Attribute] = field(default_factory=dict)
    name: str | None = None


class Spans(Protocol):
    """One SERVER span per request, one CLIENT span per shard hop."""

    def server(self, name: str, incoming: TraceContext | None) -> AbstractContextManager[ServerSpan]:
        """The span serving a request: a child of the caller's, or the root of a new trace."""
        ...

    def client(
        self, name: str, parent: TraceContext | None, attributes: Mapping[str, Attribute]
    ) -> AbstractContextManager[TraceContext | None]:
        """A call to a peer made inside ``parent``: the context its ``traceparent`` carries
        (None outside any request: nothing is sent)."""
        ...

    def close(self) -> None:
        """Flush what is buffered (the shard is stopping)."""
        ...


class NoSpans:
    """Ids only, nothing recorded: what the shard does without the [otel] extra."""

    # plain ``nullcontext`` objects, not generator-based context managers: two per request
    def server(self, name: str, incoming: TraceContext | None) -> AbstractContextManager[ServerSpan]:
        return nullcontext(ServerSpan(incoming.child() if incoming is not None else new_trace()))

    def client(
        self, name: str, parent: TraceContext | None, attributes: Mapping[str, Attribute]
    ) -> AbstractContextManager[TraceContext | None]:
        return nullcontext(None if parent is None else parent.child())

    def close(self) -> None:
        pass
