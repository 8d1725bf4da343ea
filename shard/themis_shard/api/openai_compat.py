"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions (both with stream), /v1/models.

Shapes follow OpenAI's API closely enough for the official ``openai`` client (tested). Defaults
follow OpenAI too (completions: max_tokens 16, temperature 1). Only ``n = 1`` per prompt is
served; unsupported knobs that change results (logprobs, echo, best_of, tools) are refused with
400 rather than silently ignored. Chat messages go through the model's chat template.
Generations run on this shard, through the ``InferenceService``'s local entry (``generate``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from ..errors import BadRequest
from ..inference.local import DONE, failure_to_error, sse, wait_done
from ..inference.service import InferenceService
from ..llm.generation import Generation, GenerationFailed
from ..llm.sequence import DoneEvent, TokenEvent
from .deps import inference, sse_response
from .types import ChatBody, CompletionBody

router = APIRouter(tags=["openai"])
Inference = Annotated[InferenceService, Depends(inference)]


def _usage(done: list[DoneEvent]) -> dict:
    p = sum(d.prompt_tokens for d in done)
    c = sum(d.completion_tokens for d in done)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _finish(reason: str) -> str:
    return "length" if reason == "length" else "stop"


# -- /v1/models ----------------------------------------------------------------------------------


@router.get("/v1/models")
async def list_models(svc: Inference):
    rt = svc.runtime()
    return {
        "object": "list",
        "data": [
            {
                "id": m["id"],
                "object": "model",
                "created": m["created"],
                "owned_by": "themis",
                "fingerprint": m["fingerprint"],
                "adapters": m["adapters"],
            }
            for m in rt.describe()
        ],
    }


# -- /v1/completions -----------------------------------------------------------------------------


@router.post("/v1/completions")
async def completions(body: CompletionBody, request: Request, svc: Inference):
    svc.runtime()  # a shard without a ready engine refuses before the body is judged
    body.check()
    if body.echo or (body.best_of or 1) != 1:
        raise BadRequest("echo and best_of are not supported", code="unsupported_parameter")
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if not prompts:
        raise BadRequest("prompt must not be empty", code="empty_prompt")
    gens: list[Generation] = []
    try:
        for p in prompts:
            gens.append(svc.generate(body.request(p, body.max_tokens)))
    except Exception:
        for g in gens:
            g.cancel()
        raise
    cid, created, model = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time()), gens[0].model
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(_stream_completions(gens, cid, created, model, include_usage))
    try:
        done = await asyncio.gather(*(wait_done(g, request.is_disconnected) for g in gens))
    finally:
        for g in gens:
            g.cancel()
    return {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"text": d.text, "index": i, "logprobs": None, "finish_reason": _finish(d.finish_reason)}
            for i, d in enumerate(done)
        ],
        "usage": _usage(list(done)),
    }


async def _stream_completions(
    gens: list[Generation], cid: str, created: int, model: str, include_usage: bool
) -> AsyncIterator[bytes]:
    def chunk(index: int, text: str, finish: str | None) -> bytes:
        return sse(
            {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [{"text": text, "index": index, "logprobs": None, "finish_reason": finish}],
            }
        )

    done: list[DoneEvent] = []
    try:
        for i, gen in enumerate(gens):  # prompts are generated concurrently, streamed one after another
            async for ev in gen.events():
                if isinstance(ev, TokenEvent):
                    if ev.text:
                        yield chunk(i, ev.text, None)
                else:
                    done.append(ev)
                    yield chunk(i, "", _finish(ev.finish_reason))
        if include_usage:
            yield sse(
                {
                    "id": cid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(done),
                }
            )
    except GenerationFailed as exc:
        err = failure_to_error(exc)
        yield sse({"error": {"code": err.code, "message": err.message}})
    finally:
        for g in gens:
            g.cancel()
    yield DONE


# -- /v1/chat/completions ------------------------------------------------------------------------


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatBody, request: Request, svc: Inference):
    rt = svc.runtime()
    body.check()
    if body.tools:
        raise BadRequest("tools are not supported", code="unsupported_parameter")
    messages = [("system" if m.role == "developer" else m.role, m.text()) for m in body.messages]
    prompt = rt.apply_chat_template(body.model, messages)
    max_tokens = body.max_completion_tokens or body.max_tokens
    gen = svc.generate(body.request(prompt, max_tokens), special=True)
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(_stream_chat(gen, cid, created, include_usage))
    done = await wait_done(gen, request.is_disconnected)
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": gen.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": done.text},
                "logprobs": None,
                "finish_reason": _finish(done.finish_reason),
            }
        ],
        "usage": _usage([done]),
    }


async def _stream_chat(gen: Generation, cid: str, created: int, include_usage: bool) -> AsyncIterator[bytes]:
    def chunk(delta: dict, finish: str | None) -> bytes:
        return sse(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": gen.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
        )

    yield chunk({"role": "assistant", "content": ""}, None)
    try:
        async for ev in gen.events():
            if isinstance(ev, TokenEvent):
                if ev.text:
                    yield chunk({"content": ev.text}, None)
            else:
                yield chunk({}, _finish(ev.finish_reason))
                if include_usage:
                    yield sse(
                        {
                            "id": cid,
                            "object": "chat.completion.chunk",
                            "created": created,
                            "model": gen.model,
                            "choices": [],
                            "usage": _usage([ev]),
                        }
                    )
    except GenerationFailed as exc:
        err = failure_to_error(exc)
        yield sse({"error": {"code": err.code, "message": err.message}})
    yield DONE
