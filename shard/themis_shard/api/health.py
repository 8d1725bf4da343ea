"""Health, readiness and metrics (API.md "Health and metrics")."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

router = APIRouter(tags=["health"])


class Readiness(BaseModel):
    ready: bool


@router.get("/health")
async def health(request: Request) -> dict:
    shard = getattr(request.app.state, "node", None)
    settings = request.app.state.settings
    if shard is None:
        return {"status": "degraded", "shard_id": settings.shard_id, "ring_version": 0}
    out = {
        "status": "ok" if shard.ready else "degraded",
        "shard_id": settings.shard_id,
        "ring_version": shard.cluster.topology.version,
    }
    if not shard.store.health.writable:
        out["storage"] = shard.store.health.status()
    if shard.cluster.topology.failover:  # seconds left of its lease from the plan authority
        out["lease_s"] = round(shard.cluster.lease.remaining_s(), 3)
    if shard.llm is not None:  # how each model runs on this CPU (repacking on, or the probe's fallback)
        out["llm_buffers"] = {name: d.as_dict() for name, d in shard.llm.buffers.items()}
    return out


@router.get(
    "/ready",
    response_model=Readiness,
    responses={
        503: {
            "model": Readiness,
            "description": "Not ready: the node or its model is starting, or its disk does not take writes",
        }
    },
)
async def ready(request: Request) -> JSONResponse:
    shard = getattr(request.app.state, "node", None)
    is_ready = shard is not None and shard.ready
    return JSONResponse({"ready": is_ready}, status_code=200 if is_ready else 503)


@router.get("/metrics", response_class=PlainTextResponse)  # Prometheus text format
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
