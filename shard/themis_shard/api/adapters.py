"""LoRA adapter routes (API.md "Adapters"): list, load, inspect and unload on this shard."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.convertors import Convertor, register_url_convertor

from ..errors import BadRequest
from ..llm.fetch import is_url
from ..training.federation import FederateBody
from ..training.service import TrainBody
from .deps import node, runtime
from .types import AdapterBody

router = APIRouter(tags=["inference"])


class AdapterNameConvertor(Convertor):
    """An adapter's name in a path: no ``/`` and no ``:``, so ``/v1/adapters/x:federate`` is the
    federate call only (Starlette's plain ``{name}`` would match it too, and a 405 there would
    advertise GET and DELETE). Names the engine refuses still reach it for a clear 400."""

    regex = "[^/:]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


# Starlette's table of path convertors is by name; registering the same one again is harmless.
register_url_convertor("adapter", AdapterNameConvertor())


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
        raise BadRequest(
            "path (a GGUF LoRA file on this shard) or source (a path or an http(s) URL) is required",
            code="invalid_request",
        )
    m = rt.model(body.model)
    if is_url(path):
        fetcher = node(request).fetcher
        if fetcher is None:
            raise BadRequest("this shard fetches no http(s) sources", code="bad_source")
        fetched = await fetcher.fetch(
            path, sha256=body.sha256, max_bytes=fetcher.settings.max_adapter_bytes, what="adapter"
        )
        path = str(fetched)
    info = await m.adapters.load(
        body.name, path, domain=body.domain, scale=body.scale, evaluate=body.evaluate
    )
    if body.sha256 and info.sha256 != body.sha256:
        await m.adapters.unload(body.name)
        raise BadRequest(
            f"sha256 mismatch for adapter {body.name}: expected {body.sha256}, got {info.sha256}",
            code="sha256_mismatch",
        )
    return info.as_dict()


@router.get("/v1/adapters/{name:adapter}")
async def get_adapter(name: str, request: Request, model: str | None = None):
    return runtime(request).model(model).adapters.get(name).as_dict()


@router.delete("/v1/adapters/{name:adapter}")
async def unload_adapter(name: str, request: Request, model: str | None = None):
    await runtime(request).model(model).adapters.unload(name)
    node(request).training.loaded.forget(name)  # a trained adapter stays unloaded after a restart
    return {"unloaded": name}


@router.post("/v1/adapters:train", status_code=201)
async def train_adapter(body: TrainBody, request: Request):
    """Fine-tune a LoRA for ``domain`` on the ``text_field`` of this shard's documents of
    ``collection`` (numpy, CPU; minutes for the default steps), write it and load it here."""
    trained = await node(request).training.train(body)
    out = {
        "name": body.name,
        "domain": body.domain,
        "path": str(trained.path),
        "training_samples": trained.samples,
        "steps": len(trained.losses),
        "losses": trained.losses,
        "federation_round": body.federation_round,
    }
    if body.load:
        m = runtime(request).model(None)
        if body.name in {a.name for a in m.adapters.list()}:
            await m.adapters.unload(body.name)  # a new round replaces the previous one
        info = await m.adapters.load(body.name, str(trained.path), domain=body.domain, evaluate=body.evaluate)
        node(request).training.loaded.record(body.name, body.domain)  # reloaded after a restart
        out["adapter"] = info.as_dict()
    return out


@router.post("/v1/adapters/{name:adapter}:federate")
async def federate_adapter(name: str, body: FederateBody, request: Request):
    """Federated rounds (FedAvg) of adapter ``name`` for ``domain``: each participant trains
    ``local_steps`` on its own documents of ``collection``, this shard averages the LoRA factors by
    sample count and publishes round r+1, which every participant loads, evaluates and announces."""
    rounds = await node(request).federation.run(name, body)
    return {"name": name, "domain": body.domain, "rounds": [r.model_dump(mode="json") for r in rounds]}
