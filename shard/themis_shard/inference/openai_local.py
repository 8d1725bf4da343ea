"""The OpenAI routes' work on this shard's engine: request → generations → OpenAI's JSON or SSE.

Routing happened before (``service.InferenceService.openai``); this runs where the request
landed, and is also what a peer's ``/internal/openai/...`` twin runs. Nothing here knows HTTP.

What each field does (the rest is refused by name, see ``openai_types``):

* sampling: temperature, top_p, top_k, min_p, seed, stop, max_tokens / max_completion_tokens,
  presence_penalty, frequency_penalty, repetition_penalty, logit_bias (token ids).
* n: n sequences from one prompt; the prompt is prefilled once (``Engine.submit(n=...)``).
* response_format json_object / json_schema and tools: a grammar the output must follow
  (constrained decoding); a tool call comes back as ``tool_calls`` (``finish_reason:
  tool_calls``), in streaming deltas too. A grammar's output is cut only by max_tokens
  (``finish_reason: length``): stop strings are refused with it.
* logprobs / top_logprobs (chat), logprobs (completions): the model's log-probabilities
  (log-softmax of the raw logits, before penalties and temperature).
* echo (completions): the prompt text is returned before the completion.
* usage: prompt/completion tokens, ``prompt_tokens_details.cached_tokens`` (KV-prefix cache).

Why one ~650-line module: completions and chat share sampling, n-way submission, logprobs and
the resumable stream's replay; the request and response types are ``openai_types.py``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BadRequest, ThemisError
from ..llm.generation import Generation, GenerationFailed
from ..llm.grammar import json_object_grammar, schema_grammar
from ..llm.sampling import SamplingParams
from ..llm.sequence import DoneEvent, TokenEvent
from ..llm.tool_calls import parse_call, tool_grammar
from .local import DONE, Disconnected, failure_to_error, sse, token_event
from .openai_types import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    ChatBody,
    CompletionBody,
    EmbeddingsBody,
    NamedToolChoice,
    _Common,
)

if TYPE_CHECKING:
    from ..llm.runtime import LLMRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """What ``model`` (with ``adapter``/``domain``) names on this shard."""

    alias: str | None  # the base model's alias (None: the default model)
    adapter: str | None
    domain: str | None
    name: str  # echoed as the response's ``model``


def resolve_local(rt: LLMRuntime, body: _Common) -> Target:
    """``model`` may be a loaded model, an adapter or a domain (vLLM's way of naming LoRAs)."""
    name = body.model
    default = rt.settings.model_alias
    if not name or name in rt.models:
        return Target(name or None, body.adapter, body.domain, name or default)
    m = rt.model(None)
    infos = {a.name: a for a in m.adapters.list()}
    if name in infos:
        if body.adapter and body.adapter != name:
            raise BadRequest(
                f"model names adapter {name!r} but adapter is {body.adapter!r}", code="invalid_request"
            )
        return Target(None, name, body.domain or infos[name].domain, name)
    if name == body.domain or any(a.domain == name for a in infos.values()):
        return Target(None, body.adapter, name, name)
    raise ThemisError(
        f"unknown model {name!r} (not a model, adapter or domain here)", code="model_not_found", status=404
    )


@dataclass
class Collected:
    """One sequence's events gathered for a non-streamed answer."""

    tokens: list[TokenEvent] = field(default_factory=list)
    done: DoneEvent | None = None


async def collect(
    gens: list[Generation], disconnected: Disconnected, poll_s: float = 0.25
) -> list[Collected]:
    """Every generation to its end; a client that disconnects meanwhile cancels them all."""
    out = [Collected() for _ in gens]

    async def one(g: Generation, c: Collected) -> None:
        async for ev in g.events():
            if isinstance(ev, TokenEvent):
                c.tokens.append(ev)
            else:
                c.done = ev

    task = asyncio.ensure_future(asyncio.gather(*(one(g, c) for g, c in zip(gens, out, strict=True))))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                try:
                    task.result()
                except GenerationFailed as exc:
                    raise failure_to_error(exc) from exc
                return out
            if await disconnected():
                raise ThemisError("client disconnected", code="client_closed_request", status=499)
    finally:
        if not task.done():
            task.cancel()
        for g in gens:
            g.cancel()


def usage(done: list[DoneEvent], n: int = 1) -> dict:
    """OpenAI counts a prompt once however many (``n``) choices it has."""
    p = sum(d.prompt_tokens for d in done) // n
    c = sum(d.completion_tokens for d in done)
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": sum(d.cached_tokens for d in done)},
    }


def fingerprint(shard: str) -> str:
    """``system_fingerprint``: the shard that ran the request (which one the router chose)."""
    return f"themis:{shard}" if shard else "themis"


def finish(reason: str) -> str:
    return "length" if reason == "length" else "stop"


# -- shared: sampling and submission -----------------------------------------------------------------


def sampling(
    rt: LLMRuntime,
    body: _Common,
    target: Target,
    *,
    max_tokens,
    logprobs,
    grammar,
    prompt_logprobs=None,
    default_max_tokens=None,
) -> SamplingParams:
    if grammar is not None and body.stop:
        raise BadRequest(
            "stop cannot be combined with response_format or tools: the grammar decides where it ends",
            code="unsupported_parameter",
        )
    return rt.sampling(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        stop=body.stop,
        min_p=body.min_p,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        repetition_penalty=body.repetition_penalty,
        logit_bias=body.bias(),
        logprobs=logprobs,
        grammar=grammar,
        default_max_tokens=default_max_tokens,
        prompt_logprobs=prompt_logprobs,
        model=target.alias,
    )


def submit_n(
    rt: LLMRuntime,
    body: _Common,
    target: Target,
    params: SamplingParams,
    *,
    prompt=None,
    tokens=None,
    special=False,
) -> list[Generation]:
    if body.user or getattr(body, "safety_identifier", None):
        log.info("openai request for user=%s", body.user or getattr(body, "safety_identifier", None))
    return rt.submit_n(
        body.n,
        prompt=prompt,
        tokens=tokens,
        model=target.alias,
        adapter=target.adapter,
        domain=target.domain,
        params=params,
        priority=body.priority,
        special=special,
        speculative=False if body.resume is not None else body.speculative,  # a replay never speculates
    )


def _piece(rt: LLMRuntime, alias: str | None, token: int) -> bytes:
    return rt.model(alias).native.piece(token)


# -- /v1/completions -----------------------------------------------------------------------------------


def completion_logprobs(
    rt: LLMRuntime,
    alias,
    tokens: list[TokenEvent],
    offset: int,
    prompt: list[int] | None = None,
    prompt_scores: tuple | None = None,
) -> dict:
    """OpenAI's legacy shape: tokens, token_logprobs, top_logprobs (text → logprob), text_offset;
    with ``prompt`` (echo) the prompt's tokens first, the first of them unscored (None)."""
    out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    pos = 0 if prompt is not None else offset

    def add(token: int, lp) -> None:
        nonlocal pos
        text = _piece(rt, alias, token).decode("utf-8", errors="replace")
        out["tokens"].append(text)
        out["token_logprobs"].append(None if lp is None else lp.logprob)
        out["top_logprobs"].append(
            None
            if lp is None
            else {_piece(rt, alias, t).decode("utf-8", errors="replace"): v for t, v in lp.top}
        )
        out["text_offset"].append(pos)
        pos += len(text)

    if prompt is not None:
        scores = prompt_scores or ()
        for i, token in enumerate(prompt):
            if i == 0 and not _piece(rt, alias, token):  # BOS: no text, nothing to report
                continue
            add(token, scores[i] if i < len(scores) else None)
    for ev in tokens:
        if ev.logprobs is not None:
            add(ev.token_id, ev.logprobs)
    return out


def resumable(body: CompletionBody | ChatBody) -> bool:
    """Can a stream of this request be resumed on another shard? One choice, and nothing whose
    stream is more than its tokens' text (logprobs, echo, a tool call held back to the end)."""
    if not body.stream or body.n != 1:
        return False
    if isinstance(body, CompletionBody):  # one prompt: text, or one list of token ids
        one = isinstance(body.prompt, str) or (bool(body.prompt) and isinstance(body.prompt[0], int))
        return one and not body.echo and body.logprobs is None
    return not body.logprobs and not body.tools and body.response_format is None


def replaying(rt: LLMRuntime, body: CompletionBody | ChatBody, alias, prompt: list[int], params):
    """``params`` that replay ``body.resume``'s tokens (after checking them as prompt tokens)."""
    if body.resume is None:
        return params
    if not resumable(body):
        raise BadRequest("resume: only a one-choice text stream is resumed", code="invalid_request")
    sent = list(body.resume.tokens)
    rt.check_tokens(rt.model(alias), prompt + sent)
    return replace(params, replay=tuple(sent))


def chunk_identity(body: CompletionBody | ChatBody, prefix: str) -> tuple[str, int]:
    """A new stream's chunk ``id`` and ``created``; a resumed one keeps its own."""
    if body.resume is not None:
        return body.resume.id, body.resume.created
    return f"{prefix}-{uuid.uuid4().hex[:24]}", int(time.time())


async def completions(
    rt: LLMRuntime, body: CompletionBody, disconnected: Disconnected, shard: str = "", *, every_token=False
):
    """``every_token``: a peer's ``/internal`` stream (``local.token_event`` per sampled token)."""
    body.refusals()
    target = resolve_local(rt, body)
    scored = body.echo and body.logprobs is not None  # the prompt's tokens are scored too
    if scored and body.stream:
        raise BadRequest("echo with logprobs is not supported with stream", code="unsupported_parameter")
    params = sampling(
        rt,
        body,
        target,
        max_tokens=body.max_tokens,
        default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS,
        logprobs=body.logprobs,
        grammar=None,
        prompt_logprobs=body.logprobs if scored else None,
    )
    prompts = body.prompts()
    m = rt.model(target.alias)
    gens: list[Generation] = []
    echoes: list[str] = []
    ids: list[list[int]] = []
    try:
        for p in prompts:
            toks = rt.tokenize_prompt(m, p) if isinstance(p, str) else list(p)
            each = replaying(rt, body, target.alias, toks, params)
            gens += submit_n(rt, body, target, each, tokens=toks)
            echoes += [p if isinstance(p, str) else m.native.detokenize(toks)] * body.n
            ids += [toks] * body.n
    except Exception:
        for g in gens:
            g.cancel()
        raise
    cid, created = chunk_identity(body, "cmpl")
    if not body.echo:
        echoes = [""] * len(gens)
    if body.stream:
        return _stream_completions(
            rt, target, gens, echoes, cid, created, body, fingerprint(shard), every_token
        )
    results = await collect(gens, disconnected)
    choices = []
    for i, (c, echo, toks) in enumerate(zip(results, echoes, ids, strict=True)):
        assert c.done is not None
        choices.append(
            {
                "text": echo + c.done.text,
                "index": i,
                "logprobs": None
                if body.logprobs is None
                else completion_logprobs(
                    rt, target.alias, c.tokens, len(echo), toks if scored else None, c.done.prompt_logprobs
                ),
                "finish_reason": finish(c.done.finish_reason),
            }
        )
    return {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": target.name,
        "system_fingerprint": fingerprint(shard),
        "choices": choices,
        "usage": usage([c.done for c in results if c.done], body.n),
    }


async def merged(gens: list[Generation]) -> AsyncIterator[tuple[int, TokenEvent | DoneEvent]]:
    """The events of several generations as they come, tagged with the generation's index."""
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, g: Generation) -> None:
        try:
            async for ev in g.events():
                await queue.put((i, ev))
        except GenerationFailed as exc:
            await queue.put((i, exc))

    tasks = [asyncio.ensure_future(pump(i, g)) for i, g in enumerate(gens)]
    try:
        left = len(gens)
        while left:
            i, ev = await queue.get()
            if isinstance(ev, GenerationFailed):
                raise ev
            if isinstance(ev, DoneEvent):
                left -= 1
            yield i, ev
    finally:
        for t in tasks:
            t.cancel()
        for g in gens:
            g.cancel()


async def _stream_completions(
    rt: LLMRuntime, target: Target, gens, echoes, cid, created, body: CompletionBody, fp: str, every_token
) -> AsyncIterator[bytes]:
    def chunk(index: int, text: str, finish_reason: str | None, logprobs=None) -> bytes:
        return sse(
            {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": target.name,
                "system_fingerprint": fp,
                "choices": [
                    {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason}
                ],
            }
        )

    done: list[DoneEvent] = []
    offsets = [len(e) for e in echoes]
    try:
        for i, echo in enumerate(echoes):
            if echo:
                yield chunk(i, echo, None)
        async for i, ev in merged(gens):
            if isinstance(ev, TokenEvent):
                if ev.replayed:  # sent by the shard that died
                    continue
                if every_token and ev.token_id >= 0:
                    yield token_event(ev.token_id)
                lp = None
                if body.logprobs is not None and ev.logprobs is not None:
                    lp = completion_logprobs(rt, target.alias, [ev], offsets[i])
                    offsets[i] += len(lp["tokens"][0]) if lp["tokens"] else 0
                if ev.text or lp:
                    yield chunk(i, ev.text, None, lp)
            else:
                done.append(ev)
                yield chunk(i, "", finish(ev.finish_reason))
        if body.include_usage():
            yield sse(
                {
                    "id": cid,
                    "object": "text_completion",
                    "created": created,
                    "model": target.name,
                    "choices": [],
                    "usage": usage(done, body.n),
                }
            )
    except GenerationFailed as exc:
        err = failure_to_error(exc)
        yield sse({"error": {"code": err.code, "message": err.message}})
    yield DONE


# -- /v1/chat/completions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatPlan:
    """How a chat request is decoded: its grammar, and whether the output may be a tool call."""

    grammar: str | None
    tools: list[dict] | None  # the tools the model is told about (None: no tools in play)
    forced: bool  # a call is required (tool_choice required / named)


def chat_plan(body: ChatBody) -> ChatPlan:
    tools = [t.model_dump() for t in body.tools or ()]
    choice = body.tool_choice or ("auto" if tools else "none")
    if tools and choice != "none":
        if isinstance(choice, NamedToolChoice):
            chosen = [t for t in tools if t["function"]["name"] == choice.function.name]
            return ChatPlan(tool_grammar(chosen, required=True), chosen, True)
        required = choice == "required"
        return ChatPlan(tool_grammar(tools, required=required), tools, required)
    rf = body.response_format
    if rf is None or rf.type == "text":
        return ChatPlan(None, None, False)
    if rf.type == "json_object":
        return ChatPlan(json_object_grammar(), None, False)
    assert rf.json_schema is not None
    return ChatPlan(schema_grammar(rf.json_schema.schema_ or {"type": "object"}), None, False)


def chat_logprobs(rt: LLMRuntime, alias, tokens: list[TokenEvent]) -> dict:
    def entry(token: int, lp: float) -> dict:
        b = _piece(rt, alias, token)
        return {"token": b.decode("utf-8", errors="replace"), "logprob": lp, "bytes": list(b)}

    content = []
    for ev in tokens:
        if ev.logprobs is None:
            continue
        e = entry(ev.token_id, ev.logprobs.logprob)
        e["top_logprobs"] = [entry(t, lp) for t, lp in ev.logprobs.top]
        content.append(e)
    return {"content": content, "refusal": None}


def tool_message(text: str, plan: ChatPlan, index: int = 0) -> tuple[dict, bool]:
    """The assistant message for ``text``; True when it is a tool call."""
    call = parse_call(text) if plan.tools else None
    if call is None:
        return {"role": "assistant", "content": text, "refusal": None}, False
    name, args = call
    tc = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }
    return {"role": "assistant", "content": None, "refusal": None, "tool_calls": [tc]}, True


async def chat(
    rt: LLMRuntime, body: ChatBody, disconnected: Disconnected, shard: str = "", *, every_token=False
):
    body.refusals()
    target = resolve_local(rt, body)
    plan = chat_plan(body)
    messages = [m.as_template() for m in body.messages]
    prompt = rt.apply_chat_template(target.alias, messages, plan.tools)
    n_lp = (body.top_logprobs or 0) if body.logprobs else None
    if body.max_tokens is not None and body.max_completion_tokens is not None:
        # max_completion_tokens decides, but a max_tokens over the limit is refused all the same
        rt.sampling(max_tokens=body.max_tokens)
    params = sampling(rt, body, target, max_tokens=body.limit, logprobs=n_lp, grammar=plan.grammar)
    if body.resume is not None:
        m = rt.model(target.alias)
        params = replaying(rt, body, target.alias, rt.tokenize_prompt(m, prompt, special=True), params)
    gens = submit_n(rt, body, target, params, prompt=prompt, special=True)
    cid, created = chunk_identity(body, "chatcmpl")
    if body.stream:
        return _stream_chat(rt, target, plan, gens, cid, created, body, fingerprint(shard), every_token)
    results = await collect(gens, disconnected)
    choices = []
    for i, c in enumerate(results):
        assert c.done is not None
        message, called = tool_message(c.done.text, plan)
        reason = "tool_calls" if called and c.done.finish_reason != "length" else finish(c.done.finish_reason)
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": chat_logprobs(rt, target.alias, c.tokens) if body.logprobs else None,
                "finish_reason": reason,
            }
        )
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": target.name,
        "system_fingerprint": fingerprint(shard),
        "choices": choices,
        "usage": usage([c.done for c in results if c.done], body.n),
    }


async def _stream_chat(
    rt: LLMRuntime, target: Target, plan: ChatPlan, gens, cid, created, body: ChatBody, fp: str, every_token
) -> AsyncIterator[bytes]:
    """Content deltas as tokens come; a tool call (which must parse whole) is sent as one
    ``tool_calls`` delta when its sequence ends. Under ``tool_choice: auto`` text streams as soon
    as it is clear the answer is not a call (it does not start with ``{``)."""

    def chunk(index: int, delta: dict, finish_reason: str | None, logprobs=None) -> bytes:
        return sse(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": target.name,
                "system_fingerprint": fp,
                "choices": [
                    {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
                ],
            }
        )

    n = len(gens)
    held = [""] * n  # text held back while it may still be a tool call
    held_lp: list[list[TokenEvent]] = [[] for _ in range(n)]
    streaming = [plan.tools is None] * n
    done: list[DoneEvent] = []
    try:
        for i in range(n if body.resume is None else 0):  # a resumed stream has had its role
            yield chunk(i, {"role": "assistant", "content": ""}, None)
        async for i, ev in merged(gens):
            if isinstance(ev, TokenEvent):
                if ev.replayed:  # sent by the shard that died
                    continue
                if every_token and ev.token_id >= 0:
                    yield token_event(ev.token_id)
                if not streaming[i]:
                    held[i] += ev.text
                    held_lp[i].append(ev)
                    s = held[i].lstrip()
                    if not s or s.startswith("{") or plan.forced:
                        continue
                    streaming[i] = True
                    text, events = held[i], held_lp[i]
                else:
                    text, events = ev.text, [ev]
                lp = chat_logprobs(rt, target.alias, events) if body.logprobs else None
                if text or lp:
                    yield chunk(i, {"content": text}, None, lp)
                continue
            done.append(ev)
            reason = finish(ev.finish_reason)
            if not streaming[i]:
                message, called = tool_message(held[i], plan)
                lp = chat_logprobs(rt, target.alias, held_lp[i]) if body.logprobs else None
                if called:
                    tc = message["tool_calls"][0]
                    yield chunk(i, {"tool_calls": [{"index": 0, **tc}]}, None, lp)
                    reason = reason if ev.finish_reason == "length" else "tool_calls"
                elif held[i]:
                    yield chunk(i, {"content": held[i]}, None, lp)
            yield chunk(i, {}, reason)
        if body.include_usage():
            yield sse(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": target.name,
                    "choices": [],
                    "usage": usage(done, body.n),
                }
            )
    except GenerationFailed as exc:
        err = failure_to_error(exc)
        yield sse({"error": {"code": err.code, "message": err.message}})
    yield DONE


# -- /v1/embeddings ----------------------------------------------------------------------------------


async def embeddings(rt: LLMRuntime, body: EmbeddingsBody) -> dict:
    texts = body.texts()
    dim = rt.embedding_dimension
    name = rt.embedder.name if rt.embedder is not None else ""
    if body.model not in (None, "", name, rt.settings.model_alias):
        raise ThemisError(
            f"unknown embedding model {body.model!r} (this shard embeds with {name!r})",
            code="model_not_found",
            status=404,
        )
    if body.dimensions is not None and body.dimensions != dim:
        raise BadRequest(
            f"dimensions is not supported: the embedding model gives {dim} dimensions only",
            code="unsupported_parameter",
        )
    if body.user:
        log.info("openai embeddings for user=%s", body.user)
    vectors = await rt.embed(texts)
    tokens = rt.count_embedding_tokens(texts)
    data = []
    for i, v in enumerate(vectors):
        emb: Any = v
        if body.encoding_format == "base64":
            emb = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return {
        "object": "list",
        "data": data,
        "model": name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
