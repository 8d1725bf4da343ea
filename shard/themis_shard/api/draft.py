"""``/internal/draft``: this shard as a draft shard for cross-shard speculative decoding
(protocol in ``llm/speculative/remote.py``). The draft model is ``THEMIS_LLM_DRAFT_MODEL_PATH``,
or this shard's own model when unset (a small model serving as another shard's draft); the
runtime loads it at start with ``THEMIS_LLM_SERVE_DRAFTS`` (and announces it through gossip),
else on the first call."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ..errors import ThemisError, Unavailable
from ..llm.engine import EngineClosed
from ..llm.sampling import SamplingError, SamplingParams
from ..llm.speculative.drafts import DraftUnavailable

if TYPE_CHECKING:
    from ..llm.speculative.remote import DraftService


class DraftBody(BaseModel):
    rid: str = Field(..., min_length=1, max_length=128)
    pos: int = Field(..., ge=0)
    tokens: list[int]
    k: int = Field(..., ge=1, le=32)
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None


def runtime_draft(request: Request) -> DraftService:
    """This shard's draft service (its runtime loads the draft model on the first call)."""
    rt = getattr(request.app.state, "llm", None)
    if rt is None:
        raise Unavailable("this shard serves no model", code="llm_disabled")
    return rt.draft_service()


def runtime_loaded_draft(request: Request) -> DraftService | None:
    rt = getattr(request.app.state, "llm", None)
    return rt.loaded_draft_service if rt is not None else None


def draft_router(
    draft_service: Callable[[Request], DraftService],
    loaded: Callable[[Request], DraftService | None],
) -> APIRouter:
    """``/internal/draft`` over a draft service: ``draft_service`` gives it (loading it if need
    be), ``loaded`` gives it only when already loaded (a release never loads a model)."""
    router = APIRouter(prefix="/internal", tags=["internal"], include_in_schema=False)

    @router.post("/draft")
    async def draft(body: DraftBody, request: Request) -> dict:
        svc = await run_in_threadpool(draft_service, request)  # the first call loads the draft model
        try:
            params = SamplingParams(
                max_tokens=body.k,
                temperature=body.temperature,
                top_k=body.top_k,
                top_p=body.top_p,
                seed=body.seed,
            ).validate()
        except SamplingError as exc:
            raise ThemisError(str(exc), code="invalid_sampling", status=400) from exc
        n_vocab = svc.source.model.n_vocab
        if any(t < 0 or t >= n_vocab for t in body.tokens):
            raise ThemisError(f"token ids must be in [0, {n_vocab})", code="invalid_token", status=400)
        try:
            work = functools.partial(svc.draft, body.rid, body.pos, body.tokens, body.k, params)
            return await asyncio.wrap_future(svc.run(work))
        except LookupError as exc:
            raise ThemisError(str(exc), code="draft_state_lost", status=409) from exc
        except (DraftUnavailable, EngineClosed) as exc:
            raise Unavailable(str(exc), code="draft_unavailable") from exc

    @router.get("/draft/info")
    async def info(request: Request) -> dict:
        """What verify shards need to judge this draft shard before a first probe."""
        svc = await run_in_threadpool(draft_service, request)
        return svc.info()

    @router.delete("/draft/{rid}")
    async def release(rid: str, request: Request) -> dict:
        svc = loaded(request)
        if svc is not None:
            await run_in_threadpool(svc.release, rid)
        return {"released": rid}

    return router


#: A shard's own ``/internal/draft``: its runtime's draft model.
router = draft_router(runtime_draft, runtime_loaded_draft)


def fixed_draft_router(service: DraftService) -> APIRouter:
    """A bare draft server over one loaded draft model (a benchmark's or a test's draft shard)."""
    return draft_router(lambda _request: service, lambda _request: service)
