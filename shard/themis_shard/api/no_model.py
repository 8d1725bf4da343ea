"""What a shard started without a model (``themis up --no-llm``, ``THEMIS_LLM_ENABLED=false``)
answers on the engine's routes: a named 503, never a 404 that reads as "no such API".

Every shard serves the whole public API (docs/API.md), so the engine's paths stay routed; each
answers 503 ``llm_disabled`` naming this shard and the setting, before its body is read. The
paths are taken from the engine's own routers, so a new inference route is refused here too
without being listed twice. Routing the request to a shard with a model is not attempted: the
setting is cluster-wide (``themis up --no-llm``, one ``spec.env`` for every pod), so no peer has one.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import APIRouter
from fastapi.routing import APIRoute

from ..errors import Unavailable, llm_disabled

CODE = "llm_disabled"


def refusal(shard_id: str) -> Unavailable:
    return llm_disabled(shard_id)


def refusing_router(engine_routers: Iterable[APIRouter], shard_id: str) -> APIRouter:
    """One route per method and path of ``engine_routers``, each answering :func:`refusal`."""
    router = APIRouter(tags=["inference"])

    async def refuse() -> None:
        raise refusal(shard_id)

    for engine in engine_routers:
        for route in engine.routes:
            if not isinstance(route, APIRoute):
                continue
            router.add_api_route(
                route.path,
                refuse,
                methods=sorted(route.methods),
                include_in_schema=route.include_in_schema,
                name=f"{route.name}_refused",
                summary=f"{route.name}: 503 {CODE}, this shard runs without a model",
            )
    return router
