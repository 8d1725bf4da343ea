"""W3C Trace Context (``traceparent``) for request ids that follow a request across shard hops.

A request's context lives in a contextvar: the access-log middleware sets it from the
incoming ``traceparent`` (or starts a trace), every log line reads it (``logs``), and the
cluster's peer client sends it on each hop with a fresh span id, so one trace id names the
request on every shard it touches. Parsing and formatting are pure.
"""

from __future__ import annotations

import re
import secrets
from contextvars import ContextVar
from dataclasses import dataclass

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
    while (span := secrets.token_hex(8)) == "0" * 16:
        pass
    return span


def new_trace() -> TraceContext:
    while (trace := secrets.token_hex(16)) == "0" * 32:
        pass
    return TraceContext(trace, new_span_id())


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
