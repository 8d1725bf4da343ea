"""Server-Sent Events as the shards frame them: ``data: <json>`` events, ``data: [DONE]`` last."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

DONE = "[DONE]"


class SseDecoder:
    """Fed one line at a time (sync or async streams alike); returns an event's decoded data
    (JSON, or the bare ``[DONE]``) when a blank line ends it, else ``None``. Multi-line data is
    joined as the SSE spec says; comments are skipped."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, raw: str) -> Any:
        line = raw.rstrip("\r\n")
        if not line:
            return self.end()
        if not line.startswith(":"):
            field, _, value = line.partition(":")
            if field == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> Any:
        if not self._data:
            return None
        payload, self._data = "\n".join(self._data), []
        return payload if payload == DONE else json.loads(payload)


def sse_events(lines: Iterable[str]) -> Iterator[Any]:
    decoder = SseDecoder()
    for raw in lines:
        event = decoder.line(raw)
        if event is not None:
            yield event
    event = decoder.end()
    if event is not None:
        yield event
