"""The asyncio side of one request: engine events → an async iterator, cancel on exit.

The engine thread emits events for ``sink``; ``deliver`` hands a whole pass's events to the
event loop with one ``call_soon_threadsafe``. A handler that stops iterating (client disconnect,
task cancelled) leaves through ``aclose``/``cancel``, which tells the engine to drop the sequence
and its KV.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from .sequence import DoneEvent, ErrorEvent, Event, Sequence, TokenEvent


def deliver(pairs: list[tuple[Callable[[Event], None], Event]]) -> None:
    """Hand one engine pass's events over: a single ``call_soon_threadsafe`` (one self-pipe write,
    one wake-up) per event loop instead of one per token — with 16 streams that is 16× fewer
    cross-thread wake-ups competing with llama.cpp for the same cores. Other sinks are called."""
    groups: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Event]]] = {}
    for sink, event in pairs:
        gen = getattr(sink, "__self__", None)
        if isinstance(gen, Generation):
            groups.setdefault(gen._loop, []).append((gen._queue, event))
        else:
            sink(event)
    for loop, items in groups.items():
        with contextlib.suppress(RuntimeError):  # loop closed: nobody is listening any more
            loop.call_soon_threadsafe(_put_all, items)


def _put_all(items: list[tuple[asyncio.Queue, Event]]) -> None:
    for queue, event in items:
        queue.put_nowait(event)


class GenerationFailed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Generation:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._cancel: Callable[[], None] | None = None
        self.seq: Sequence | None = None
        self.done: DoneEvent | None = None
        self.model: str = ""
        self.adapter: str | None = None
        #: The wait-then-submit task of ``runtime.submit_after`` (held here so it is not collected).
        self._pending: asyncio.Task | None = None

    def sink(self, event: Event) -> None:
        """Called on the engine thread (``deliver`` batches these per event loop)."""
        with contextlib.suppress(RuntimeError):  # loop closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    def bind(self, seq: Sequence | None, cancel: Callable[[], None]) -> None:
        self.seq = seq
        self._cancel = cancel

    def cancel(self) -> None:
        if self.done is None and self._cancel is not None:
            self._cancel()
            self._cancel = None

    async def events(self) -> AsyncIterator[TokenEvent | DoneEvent]:
        """Token events, then one DoneEvent; an engine error raises ``GenerationFailed``.

        Leaving early (break, exception, cancellation) cancels the sequence.
        """
        try:
            while True:
                ev = await self._queue.get()
                if isinstance(ev, ErrorEvent):
                    self._cancel = None
                    raise GenerationFailed(ev.code, ev.message)
                if isinstance(ev, DoneEvent):
                    self.done = ev
                    yield ev
                    return
                yield ev
        finally:
            self.cancel()

    async def result(self) -> DoneEvent:
        async for ev in self.events():
            if isinstance(ev, DoneEvent):
                return ev
        raise GenerationFailed("internal", "generation ended without a result")  # pragma: no cover


def generation_result(done: DoneEvent, gen: Generation) -> dict:
    """A finished generation as ``/v1/infer`` answers it (the route adds ``shard_id``)."""
    return {
        "text": done.text,
        "tokens": done.completion_tokens,
        "model": gen.model,
        "adapter": gen.adapter,
        "finish_reason": done.finish_reason,
        "usage": {
            "prompt_tokens": done.prompt_tokens,
            "completion_tokens": done.completion_tokens,
            # the OpenAI shape: prompt tokens restored from the KV-prefix cache, not prefilled
            "prompt_tokens_details": {"cached_tokens": done.cached_tokens},
        },
        "timings": {
            "ttft_ms": None if done.ttft_s is None else round(done.ttft_s * 1000, 3),
            "total_ms": round(done.total_s * 1000, 3),
        },
    }
