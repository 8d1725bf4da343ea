"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions (both with stream), /v1/models.

Shapes follow OpenAI's API closely enough for the official ``openai`` client (tested). Defaults
follow OpenAI too (completions: max_tokens 16, temperature 1). Only ``n = 1`` per prompt is
served; unsupported knobs that change results (logprobs, echo, best_of, tools) are refused with
400 rather than silently ignored. Chat messages go through the model's chat template.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadRequest
from ..llm.generation import Generation, GenerationFailed
from ..llm.http import DONE, failure_to_error, runtime, sse, sse_response, wait_done
from ..llm.runtime import LLMRuntime
from ..llm.sequence import DoneEvent, TokenEvent

router = APIRouter(tags=["openai"])


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = 1.0
    top_p: float | None = 1.0
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    logprobs: Any = None
    # Themis extensions
    adapter: str | None = None
    domain: str | None = None
    priority: int = Field(0, ge=-1000, le=1000)
    #: speculative decoding (same output distribution); None = the shard's default
    speculative: bool | None = None

    def check(self) -> None:
        if self.n != 1:
            raise BadRequest("only n=1 is supported", code="unsupported_parameter")
        if self.logprobs not in (None, False, 0):
            raise BadRequest("logprobs are not supported", code="unsupported_parameter")


class CompletionBody(_Common):
    prompt: str | list[str]
    max_tokens: int | None = 16
    echo: bool = False
    best_of: int | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[dict] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            parts = []
            for p in self.content:
                if p.get("type") != "text":
                    raise BadRequest("only text message parts are supported", code="unsupported_parameter")
                parts.append(str(p.get("text", "")))
            return "".join(parts)
        return self.content or ""


class ChatBody(_Common):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = None
    tools: list | None = None


def _params(rt: LLMRuntime, body: _Common, max_tokens: int | None):
    return rt.sampling(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        stop=body.stop,
    )


def _usage(done: list[DoneEvent]) -> dict:
    p = sum(d.prompt_tokens for d in done)
    c = sum(d.completion_tokens for d in done)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _finish(reason: str) -> str:
    return "length" if reason == "length" else "stop"


# -- /v1/models ----------------------------------------------------------------------------------


@router.get("/v1/models")
async def list_models(request: Request):
    rt = runtime(request)
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
async def completions(body: CompletionBody, request: Request):
    rt = runtime(request)
    body.check()
    if body.echo or (body.best_of or 1) != 1:
        raise BadRequest("echo and best_of are not supported", code="unsupported_parameter")
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if not prompts:
        raise BadRequest("prompt must not be empty", code="empty_prompt")
    params = _params(rt, body, body.max_tokens)
    gens: list[Generation] = []
    try:
        for p in prompts:
            gens.append(
                rt.submit(
                    prompt=p,
                    model=body.model,
                    adapter=body.adapter,
                    domain=body.domain,
                    params=params,
                    priority=body.priority,
                    speculative=body.speculative,
                )
            )
    except Exception:
        for g in gens:
            g.cancel()
        raise
    cid, created, model = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time()), gens[0].model
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(_stream_completions(gens, cid, created, model, include_usage))
    try:
        done = await asyncio.gather(*(wait_done(request, g) for g in gens))
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
async def chat_completions(body: ChatBody, request: Request):
    rt = runtime(request)
    body.check()
    if body.tools:
        raise BadRequest("tools are not supported", code="unsupported_parameter")
    messages = [("system" if m.role == "developer" else m.role, m.text()) for m in body.messages]
    prompt = rt.apply_chat_template(body.model, messages)
    max_tokens = body.max_completion_tokens or body.max_tokens
    gen = rt.submit(
        prompt=prompt,
        model=body.model,
        adapter=body.adapter,
        domain=body.domain,
        params=_params(rt, body, max_tokens),
        priority=body.priority,
        special=True,
        speculative=body.speculative,
    )
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return sse_response(_stream_chat(gen, cid, created, include_usage))
    done = await wait_done(request, gen)
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
