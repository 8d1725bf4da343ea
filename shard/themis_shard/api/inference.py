"""Inference routes (API.md "Inference", "Adapters"): /v1/infer, /v1/infer:batch, /v1/embed,
/v1/adapters — plus the OpenAI-compatible routes from ``openai_compat``.

Handlers stay thin: validate the body (pydantic), hand the request to ``request.app.state.llm``
(``LLMRuntime``) and shape its result. Everything that can be refused (unknown model/adapter,
bad sampling, oversize prompt, full queue) is refused before a stream starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadRequest, ThemisError
from ..llm.generation import Generation, GenerationFailed
from ..llm.http import DONE, failure_to_error, runtime, shard_id, sse, sse_response, wait_done
from ..llm.runtime import LLMRuntime
from ..llm.sequence import DoneEvent, TokenEvent
from . import openai_compat

router = APIRouter(tags=["inference"])


class InferBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt: str
    model: str | None = None
    domain: str | None = None
    adapter: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    speculative: bool | None = Field(
        None,
        description="speculative decoding (draft + exact verification; same output distribution); "
        "unset: the shard's default (THEMIS_LLM_SPECULATIVE_DEFAULT)",
    )
    priority: int = Field(0, ge=-1000, le=1000, description="higher is served (and kept) first")


def submit_infer(rt: LLMRuntime, body: InferBody) -> Generation:
    params = rt.sampling(
        max_tokens=body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        stop=body.stop,
    )
    return rt.submit(
        prompt=body.prompt,
        model=body.model,
        adapter=body.adapter,
        domain=body.domain,
        params=params,
        priority=body.priority,
        speculative=body.speculative,
    )


def infer_result(done: DoneEvent, gen: Generation, shard: str) -> dict:
    return {
        "text": done.text,
        "tokens": done.completion_tokens,
        "shard_id": shard,
        "model": gen.model,
        "adapter": gen.adapter,
        "finish_reason": done.finish_reason,
        "usage": {"prompt_tokens": done.prompt_tokens, "completion_tokens": done.completion_tokens},
        "timings": {
            "ttft_ms": None if done.ttft_s is None else round(done.ttft_s * 1000, 3),
            "total_ms": round(done.total_s * 1000, 3),
            "queue_ms": None if done.queue_s is None else round(done.queue_s * 1000, 3),
            "preemptions": done.preemptions,
        },
    }


async def infer_stream(gen: Generation, shard: str) -> AsyncIterator[bytes]:
    try:
        async for ev in gen.events():
            if isinstance(ev, TokenEvent):
                if ev.text:
                    yield sse({"token": ev.text, "id": ev.token_id})
            else:
                yield sse({"done": True, **infer_result(ev, gen, shard), "text": None})
    except GenerationFailed as exc:
        err = failure_to_error(exc)
        yield sse({"error": {"code": err.code, "message": err.message}})
    yield DONE


@router.post("/v1/infer")
async def infer(body: InferBody, request: Request):
    rt = runtime(request)
    gen = submit_infer(rt, body)
    if body.stream:
        return sse_response(infer_stream(gen, shard_id(request)))
    done = await wait_done(request, gen)
    return infer_result(done, gen, shard_id(request))


class InferBatchBody(BaseModel):
    requests: list[InferBody] = Field(..., min_length=1, max_length=256)


@router.post("/v1/infer:batch")
async def infer_batch(body: InferBatchBody, request: Request):
    """This shard's part of a scatter-gather batch: every item runs concurrently in the engine;
    results come back in request order, a failed item as ``{"error": ...}`` in its place."""
    rt = runtime(request)
    shard = shard_id(request)

    async def one(item: InferBody) -> dict:
        try:
            if item.stream:
                raise BadRequest("stream is not supported inside a batch", code="invalid_request")
            gen = submit_infer(rt, item)
            return infer_result(await wait_done(request, gen), gen, shard)
        except ThemisError as exc:
            return {"error": {"code": exc.code, "message": exc.message}}

    return {"results": list(await asyncio.gather(*(one(r) for r in body.requests)))}


class EmbedBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    texts: list[str] | None = None
    urns: list[str] | None = None


@router.post("/v1/embed")
async def embed(body: EmbedBody, request: Request):
    rt = runtime(request)
    if body.urns is not None:
        raise BadRequest("embedding by URN is served by the document layer; send texts", code="unsupported")
    if body.texts is None:
        raise BadRequest("texts is required", code="invalid_request")
    vectors = await rt.embed(body.texts)
    return {"embeddings": vectors, "dimension": rt.embedding_dimension, "model": rt.embedder.name}


class AdapterBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    domain: str | None = None
    path: str | None = None
    source: str | None = None
    scale: float = 1.0
    model: str | None = None
    evaluate: bool | None = None


@router.get("/v1/adapters")
async def list_adapters(request: Request, model: str | None = None):
    rt = runtime(request)
    m = rt.model(model)
    return {"model": m.alias, "adapters": [a.as_dict() for a in m.adapters.list()]}


@router.post("/v1/adapters", status_code=201)
async def load_adapter(body: AdapterBody, request: Request):
    rt = runtime(request)
    path = body.path or body.source
    if not path:
        raise BadRequest("path (a GGUF LoRA file on this shard) is required", code="invalid_request")
    m = rt.model(body.model)
    info = await m.adapters.load(
        body.name, path, domain=body.domain, scale=body.scale, evaluate=body.evaluate
    )
    return info.as_dict()


@router.get("/v1/adapters/{name}")
async def get_adapter(name: str, request: Request, model: str | None = None):
    return runtime(request).model(model).adapters.get(name).as_dict()


@router.delete("/v1/adapters/{name}")
async def unload_adapter(name: str, request: Request, model: str | None = None):
    await runtime(request).model(model).adapters.unload(name)
    return {"unloaded": name}


router.include_router(openai_compat.router)
