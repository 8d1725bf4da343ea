"""Server-Sent Events as the shards frame them: ``data: <json>`` events, ``data: [DONE]`` last."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

DONE = "[DONE]"


def sse_events(lines: Iterable[str]) -> Iterator[Any]:
    """Decoded ``data:`` payloads (JSON, or the bare ``[DONE]`` string), one per event; a
    multi-line event's data lines are joined as the SSE spec says. Comments are skipped."""
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield _decode("\n".join(data))
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield _decode("\n".join(data))


def _decode(payload: str) -> Any:
    return payload if payload == DONE else json.loads(payload)
