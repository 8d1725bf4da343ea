"""One generation on this shard's engine: the request, its result, its event stream.

A stream is only started after the request was accepted (validation, 429 and 404 happen
before), so errors after the first byte are sent in-band as ``data: {"error": ...}`` followed by
``data: [DONE]``. Streams are SSE-framed bytes here, not events, because a forwarded request's
stream is the peer's SSE bytes relayed unchanged: both kinds then look alike to the API layer,
which only wraps them in an HTTP response. Leaving a stream early (the client went away)
cancels the generation through ``Generation.events``' ``finally``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from ..errors import BadRequest, ThemisError
from ..llm.generation import Generation, GenerationFailed, generation_result
from ..llm.sequence import DoneEvent, TokenEvent
from ..wire import JsonInt

if TYPE_CHECKING:  # the engine (llama.cpp) is imported only by shards that run one
    from ..llm.runtime import LLMRuntime

#: Has the client gone away? (Starlette's ``Request.is_disconnected``.)
Disconnected = Callable[[], Awaitable[bool]]


class Resume(BaseModel):
    """A stream resumed on this shard after the shard generating it died: the tokens it had
    already sent follow the prompt (re-prefilled), and generation continues after them. Set by
    the router on ``/internal/infer`` only (a public request naming it is refused)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    tokens: list[JsonInt] = Field(..., min_length=1)


def _stop_schema(schema: dict[str, Any]) -> None:
    """``stop``: a non-empty string, or up to 8 (the default ``max_stop_strings``) of them."""
    text = {"type": "string", "minLength": 1}
    schema["anyOf"] = [text, {"type": "array", "items": text, "maxItems": 8}, {"type": "null"}]


class InferRequest(BaseModel):
    """One generation as the routes and the peers exchange it: ``/v1/infer``'s body, validated once
    here (the API's ``InferBody`` is this model). An unknown field is refused by name (400)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    prompt: str = Field(..., json_schema_extra={"minLength": 1})  # "" is 400 empty_prompt
    model: str | None = None
    domain: str | None = None
    adapter: str | None = None
    # The sampling limits are the engine's (``SamplingParams.validate``: 400 invalid_sampling, in
    # place for a batch item); the schema states them so a client knows what is valid.
    max_tokens: JsonInt | None = Field(None, json_schema_extra={"minimum": 1})
    temperature: float | None = Field(None, json_schema_extra={"minimum": 0, "maximum": 5})
    top_p: float | None = Field(None, json_schema_extra={"exclusiveMinimum": 0, "maximum": 1})
    top_k: JsonInt | None = Field(None, json_schema_extra={"minimum": 0})
    seed: JsonInt | None = Field(None, json_schema_extra={"minimum": 0, "maximum": 2**53 - 1})
    stop: str | list[str] | None = Field(None, json_schema_extra=lambda s: _stop_schema(s))
    stream: bool = False
    speculative: bool | None = Field(
        None,
        description="speculative decoding (draft + exact verification; same output distribution); "
        "unset: the shard's default (THEMIS_LLM_SPECULATIVE_DEFAULT)",
    )
    priority: JsonInt = Field(0, ge=-1000, le=1000, description="higher is served (and kept) first")
    shared_prefix_chars: JsonInt | None = Field(
        None,
        ge=1,
        description="the prompt's first characters that other requests share (a system prompt, "
        "retrieved passages): the engine keeps their KV state, so a later prompt starting with "
        "them skips their prefill",
    )
    resume: SkipJsonSchema[Resume | None] = None

    def to_json(self) -> dict[str, Any]:
        """The body a peer's ``/internal/infer`` takes (unset fields left out)."""
        return self.model_dump(exclude_none=True)


def submit(rt: LLMRuntime, req: InferRequest, *, special: bool = False) -> Generation:
    """Queue ``req`` on the engine; raises ThemisError (4xx/429/503) for what it cannot serve.
    ``special``: the prompt may hold special tokens (a chat template's output).

    A ``resume`` continues a generation whose shard died: the prompt is prefilled, then the
    tokens already sent are decoded one step at a time and drawn for, as that shard did
    (``SamplingParams.replay``; never speculative), so greedy and seeded continuations are the
    ones a single run gives. ``max_tokens`` counts the replayed tokens."""
    params = rt.sampling(
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        seed=req.seed,
        stop=req.stop,
    )
    speculative = req.speculative
    shared = req.shared_prefix_chars
    if shared is not None and shared > len(req.prompt):
        raise BadRequest(
            f"shared_prefix_chars ({shared}) is longer than the prompt ({len(req.prompt)} characters)",
            code="invalid_request",
        )
    if req.resume is not None:
        m = rt.model(req.model)
        sent = list(req.resume.tokens)
        rt.check_tokens(m, rt.tokenize_prompt(m, req.prompt, special=special) + sent)  # ids, context
        params, speculative = replace(params, replay=tuple(sent)), False
    return rt.submit(
        prompt=req.prompt,
        model=req.model,
        adapter=req.adapter,
        domain=req.domain,
        params=params,
        priority=req.priority,
        special=special,
        speculative=speculative,
        shared_prefix_chars=shared,
    )


def sse(data: dict | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


DONE = sse("[DONE]")


def failure_to_error(exc: GenerationFailed) -> ThemisError:
    status = 503 if exc.code in ("unavailable", "engine_error") else 500
    if exc.code == "adapter_unloaded":
        status = 409
    return ThemisError(exc.message, code=exc.code, status=status)


async def wait_done(gen: Generation, disconnected: Disconnected, poll_s: float = 0.25) -> DoneEvent:
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
            if await disconnected():
                gen.cancel()
                raise ThemisError("client disconnected", code="client_closed_request", status=499)
    finally:
        if not task.done():
            task.cancel()
            gen.cancel()


def infer_result(done: DoneEvent, gen: Generation, shard: str) -> dict:
    out = generation_result(done, gen)
    out["shard_id"] = shard
    out["timings"] |= {
        "queue_ms": None if done.queue_s is None else round(done.queue_s * 1000, 3),
        "preemptions": done.preemptions,
    }
    return out


def token_event(token: int) -> bytes:
    """A peer stream's record of one sampled token id (``event: token``), sent before the
    token's own frame on ``/internal`` streams: the relaying router keeps the ids (to resume
    the stream elsewhere) and never passes these events on."""
    return b"event: token\ndata: %d\n\n" % token


async def infer_stream(gen: Generation, shard: str, *, every_token: bool = False) -> AsyncIterator[bytes]:
    """SSE frames ``{"token", "id"}`` then ``{"done": true, ...}``. ``every_token`` (a peer's
    ``/internal`` stream): a ``token_event`` for each sampled token, also those that release
    no text yet. A resumed generation's replayed tokens were sent already: not again."""
    try:
        async for ev in gen.events():
            if isinstance(ev, TokenEvent):
                if ev.replayed:
                    continue
                if every_token and ev.token_id >= 0:
                    yield token_event(ev.token_id)
                if ev.text:
                    yield sse({"token": ev.text, "id": ev.token_id})
            else:
                yield sse({"done": True, **infer_result(ev, gen, shard), "text": None})
    except GenerationFailed as exc:
        err = failure_to_error(exc)
        yield sse({"error": {"code": err.code, "message": err.message}})
    yield DONE
