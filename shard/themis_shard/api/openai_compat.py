"""OpenAI-compatible routes: /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models,
and the ``/internal/openai/...`` twins that peers forward to (which run here, never route again).

Handlers stay thin: the body is validated (``inference.openai_types``: every field honoured or
refused by name), the ``InferenceService`` routes it through the cluster like ``/v1/infer``
(domain and adapter from ``model``, KV-prefix holders, load, failover, 429 spill) and runs it
(``inference.openai_local``); a dict becomes JSON, a byte stream SSE.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from ..errors import BadRequest
from ..inference.openai_types import ChatBody, CompletionBody, EmbeddingsBody
from ..inference.service import Answer, InferenceService
from .deps import inference, json_answer, routed_response, sse_response

router = APIRouter(tags=["openai"])
Inference = Annotated[InferenceService, Depends(inference)]


def _answer(answer: Answer):
    return answer if isinstance(answer, dict) else sse_response(answer)


@router.get("/v1/models")
async def list_models(svc: Inference):
    return {"object": "list", "data": svc.models()}


def _public(body):
    if body.resume is not None:
        raise BadRequest("resume is set by the cluster's router only", code="invalid_request")
    return body


@router.post("/v1/completions")
async def completions(body: CompletionBody, request: Request, svc: Inference):
    svc.runtime()  # a shard without a ready engine refuses before the body is judged
    _public(body).refusals()
    routed = await svc.completions(body, request.is_disconnected)
    return routed_response(routed.shard, routed.answer)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatBody, request: Request, svc: Inference):
    svc.runtime()
    _public(body).refusals()
    routed = await svc.chat(body, request.is_disconnected)
    return routed_response(routed.shard, routed.answer)


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingsBody, svc: Inference):
    return json_answer(await svc.embeddings(body))


@router.post("/internal/openai/completions", include_in_schema=False)
async def completions_here(body: CompletionBody, request: Request, svc: Inference):
    return _answer(await svc.completions_here(body, request.is_disconnected, every_token=True))


@router.post("/internal/openai/chat/completions", include_in_schema=False)
async def chat_here(body: ChatBody, request: Request, svc: Inference):
    return _answer(await svc.chat_here(body, request.is_disconnected, every_token=True))


@router.post("/internal/openai/embeddings", include_in_schema=False)
async def embeddings_here(body: EmbeddingsBody, svc: Inference):
    return json_answer(await svc.embeddings_here(body))
