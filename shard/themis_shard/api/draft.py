"""``/internal/draft``: this shard as a draft shard for cross-shard speculative decoding
(protocol in ``llm/speculative/remote.py``). The draft model is ``THEMIS_LLM_DRAFT_MODEL_PATH``,
or this shard's own model when unset (a small model serving as another shard's draft); it is
loaded on the first call into ``app.state.draft_service``."""

from __future__ import annotations

import threading

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ..errors import ThemisError, Unavailable
from ..llm.sampling import SamplingError, SamplingParams

router = APIRouter(prefix="/internal", tags=["internal"], include_in_schema=False)
_init_lock = threading.Lock()


class DraftBody(BaseModel):
    rid: str = Field(..., min_length=1, max_length=128)
    pos: int = Field(..., ge=0)
    tokens: list[int]
    k: int = Field(..., ge=1, le=32)
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None


def draft_service(request: Request):
    app = request.app
    svc = getattr(app.state, "draft_service", None)
    if svc is not None:
        return svc
    with _init_lock:
        svc = getattr(app.state, "draft_service", None)
        if svc is None:
            settings = getattr(app.state, "settings", None)
            llm = getattr(settings, "llm", None)
            if llm is None or not llm.enabled:
                raise Unavailable("this shard serves no model", code="llm_disabled")
            from ..llm.speculative.local_draft import LocalDraftModel
            from ..llm.speculative.remote import DraftService

            path = llm.draft_model_path or llm.model_path
            svc = app.state.draft_service = DraftService(LocalDraftModel.open(path, n_ctx=llm.n_ctx))
    return svc


@router.post("/draft")
async def draft(body: DraftBody, request: Request) -> dict:
    svc = draft_service(request)
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
    try:
        return await run_in_threadpool(svc.draft, body.rid, body.pos, body.tokens, body.k, params)
    except LookupError as exc:
        raise ThemisError(str(exc), code="draft_state_lost", status=409) from exc


@router.delete("/draft/{rid}")
async def release(rid: str, request: Request) -> dict:
    svc = getattr(request.app.state, "draft_service", None)
    if svc is not None:
        await run_in_threadpool(svc.release, rid)
    return {"released": rid}
