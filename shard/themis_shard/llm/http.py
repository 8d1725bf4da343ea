"""HTTP glue shared by the inference and OpenAI-compatible routes: the runtime lookup,
Server-Sent Events framing, and waiting for a result while watching for a disconnect.

A stream is only started after the request was accepted (validation, 429 and 404 happen
before), so errors after the first byte are sent in-band as ``data: {"error": ...}`` followed by
``data: [DONE]``. Leaving the generator early (the client went away) cancels the generation
through ``Generation.events``' ``finally``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse

from ..errors import ThemisError, Unavailable
from .generation import Generation, GenerationFailed
from .runtime import LLMRuntime
from .sequence import DoneEvent


def runtime(request: Request) -> LLMRuntime:
    rt = getattr(request.app.state, "llm", None)
    if rt is None:
        raise Unavailable("inference is not enabled on this shard", code="llm_disabled")
    if not rt.ready:
        raise Unavailable("the model is still loading", code="llm_not_ready")
    return rt


def shard_id(request: Request) -> str:
    settings = getattr(request.app.state, "settings", None)
    return getattr(settings, "shard_id", "") or ""


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


DONE = sse("[DONE]")


def sse_response(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


def failure_to_error(exc: GenerationFailed) -> ThemisError:
    status = 503 if exc.code in ("unavailable", "engine_error") else 500
    if exc.code == "adapter_unloaded":
        status = 409
    return ThemisError(exc.message, code=exc.code, status=status)


async def wait_done(request: Request, gen: Generation, poll_s: float = 0.25) -> DoneEvent:
    """Wait for a non-streamed result; a client that disconnects meanwhile cancels the sequence."""
    task = asyncio.ensure_future(gen.result())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                try:
                    return task.result()
                except GenerationFailed as exc:
                    raise failure_to_error(exc) from exc
            if await request.is_disconnected():
                gen.cancel()
                raise ThemisError("client disconnected", code="client_closed_request", status=499)
    finally:
        if not task.done():
            task.cancel()
            gen.cancel()
