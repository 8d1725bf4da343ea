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

from ..errors import ThemisError
from ..llm.generation import Generation, GenerationFailed, generation_result
from ..llm.sequence import DoneEvent, TokenEvent
from ..llm.text import TextAssembler
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
    resume: SkipJsonSchema[Resume | None] = None

    def to_json(self) -> dict[str, Any]:
        """The body a peer's ``/internal/infer`` takes (unset fields left out)."""
        return self.model_dump(exclude_none=True)


def submit(rt: LLMRuntime, req: InferRequest, *, special: bool = False) -> Generation:
    """Queue ``req`` on the engine; raises ThemisError (4xx/429/503) for what it cannot serve.
    ``special``: the prompt may hold special tokens (a chat template's output).

    A ``resume`` continues a generation: the prompt's tokens then the tokens already sent are
    prefilled, ``max_tokens`` counts them, and a seeded sampler starts at their position (one
    draw per sampled token), so greedy and seeded continuations are the ones the dead shard
    would have produced."""
    params = _params(rt, req)
    tokens = None
    if req.resume is not None:
        m = rt.model(req.model)
        prompt = rt.tokenize_prompt(m, req.prompt, special=special)
        tokens = rt.check_tokens(m, prompt + list(req.resume.tokens))
    return rt.submit(
        prompt=req.prompt,
        tokens=tokens,
        model=req.model,
        adapter=req.adapter,
        domain=req.domain,
        params=params,
        priority=req.priority,
        special=special,
        speculative=req.speculative,
    )


def _params(rt: LLMRuntime, req: InferRequest):
    params = rt.sampling(
        max_tokens=req.max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        seed=req.seed,
        stop=req.stop,
    )
    if req.resume is None:
        return params
    sent = len(req.resume.tokens)
    return replace(params, max_tokens=max(1, params.max_tokens - sent), position=sent)


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


class Continuation:
    """The text of a resumed stream: an assembler primed with the tokens already sent, so a
    character split across the seam or a stop string spanning it comes out as it would have in
    one run (the engine's own assembler only sees the new tokens)."""

    def __init__(self, sent: list[int], stop: tuple[str, ...], piece: Callable[[int], bytes]) -> None:
        self._piece = piece
        self.sent = len(sent)
        self.text = TextAssembler(stop)
        for token in sent:
            self.text.feed(piece(token))
        self._before = self.text.text  # already released to the client by the dead shard

    def feed(self, token: int) -> str:
        return self.text.feed(self._piece(token))

    def done(self, ev: DoneEvent) -> tuple[str, DoneEvent]:
        """The held-back tail and the result as the whole generation's."""
        stopped = self.text.stopped
        tail = "" if ev.finish_reason == "cancelled" and not stopped else self.text.flush()
        return tail, replace(
            ev,
            finish_reason="stop" if stopped else ev.finish_reason,
            text=self.text.text[len(self._before) :],
            prompt_tokens=ev.prompt_tokens - self.sent,
            completion_tokens=ev.completion_tokens + self.sent,
        )


def continuation(rt: LLMRuntime, req: InferRequest) -> Continuation | None:
    if req.resume is None:
        return None
    native = rt.model(req.model).native
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    return Continuation(list(req.resume.tokens), stop, native.piece)


async def infer_stream(
    gen: Generation, shard: str, *, every_token: bool = False, cont: Continuation | None = None
) -> AsyncIterator[bytes]:
    """SSE frames ``{"token", "id"}`` then ``{"done": true, ...}``. ``every_token`` (a peer's
    ``/internal`` stream): a frame for each sampled token even when it released no text yet, so
    the router knows every token id it would re-prefill; ``cont``: a resumed stream."""
    try:
        async for ev in gen.events():
            if isinstance(ev, TokenEvent):
                if cont is None:
                    text = ev.text
                elif ev.token_id < 0 or cont.text.stopped:  # the engine's flush / past our stop
                    continue
                else:
                    text = cont.feed(ev.token_id)
                    if cont.text.stopped:
                        gen.cancel()
                if text or (every_token and ev.token_id >= 0):
                    yield sse({"token": text, "id": ev.token_id})
            else:
                if cont is not None:
                    tail, ev = cont.done(ev)
                    if tail:
                        yield sse({"token": tail, "id": -1})
                yield sse({"done": True, **infer_result(ev, gen, shard), "text": None})
    except GenerationFailed as exc:
        err = failure_to_error(exc)
        yield sse({"error": {"code": err.code, "message": err.message}})
    yield DONE
