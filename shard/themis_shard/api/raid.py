"""RAID weight-storage endpoints: binary units and manifests between shards (``/internal/raid``),
status / verify / rebuild / ingest for operators (``/v1/raid``)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadRequest, Conflict, NotFound, Unavailable
from ..node import ShardNode
from ..raid.layout import UnitRef
from ..raid.manifest import Manifest, ManifestError
from ..raid.service import RaidService
from ..raid.store import UnitCorrupt, UnitMissing
from .deps import current_node

router = APIRouter(tags=["raid"])
Node = Annotated[ShardNode, Depends(current_node)]
OCTETS = "application/octet-stream"


def raid(shard: Node) -> RaidService:
    service = shard.raid
    if service is None:
        raise Unavailable(
            "RAID weight storage is off on this shard (THEMIS_RAID_ENABLED)", code="raid_disabled"
        )
    return service


Raid = Annotated[RaidService, Depends(raid)]


def _manifest(service: RaidService, key: str) -> Manifest:
    try:
        manifest = service.store.manifest(key)
    except ManifestError as exc:
        raise Conflict(str(exc), code="bad_manifest") from exc
    if manifest is None:
        raise NotFound(f"no manifest {key} on this shard", code="unknown_model")
    return manifest


def _ref(manifest: Manifest, stripe: int, index: int) -> UnitRef:
    if not (0 <= stripe < manifest.stripes and 0 <= index < manifest.layout.width):
        raise NotFound(f"unit {stripe}/{index} is not part of {manifest.key}", code="unknown_unit")
    return UnitRef(stripe, index)


# -- shard to shard ------------------------------------------------------------------------------------
@router.get("/internal/raid/manifest", include_in_schema=False)
async def active_manifest(service: Raid) -> Response:
    manifest = service.store.active()
    if manifest is None:
        raise NotFound("no active RAID model on this shard", code="no_model")
    return Response(manifest.canonical(), media_type="application/json")


@router.get("/internal/raid/state", include_in_schema=False)
async def state(service: Raid) -> dict:
    return service.local_state()


@router.get("/internal/raid/manifests/{key}", include_in_schema=False)
async def get_manifest(key: str, service: Raid) -> Response:
    return Response(_manifest(service, key).canonical(), media_type="application/json")


@router.put("/internal/raid/manifests/{key}", status_code=204, include_in_schema=False)
async def put_manifest(key: str, request: Request, service: Raid) -> Response:
    try:
        manifest = Manifest.parse(await request.body(), expect_key=key)
    except ManifestError as exc:
        raise BadRequest(str(exc), code="bad_manifest") from exc
    if service.self_id not in manifest.shards:
        raise Conflict(f"manifest {key} does not place units on {service.self_id}", code="bad_manifest")
    service.store.save_manifest(manifest)
    return Response(status_code=204)


@router.put("/internal/raid/active/{key}", status_code=204, include_in_schema=False)
async def put_active(key: str, service: Raid) -> Response:
    _manifest(service, key)
    service.store.set_active(key)
    return Response(status_code=204)


@router.get("/internal/raid/units/{key}/{stripe}/{index}", include_in_schema=False)
async def get_unit(key: str, stripe: int, index: int, service: Raid) -> Response:
    manifest = _manifest(service, key)
    ref = _ref(manifest, stripe, index)
    try:
        data = await asyncio.to_thread(service.store.read_unit_bytes, manifest, ref)
    except UnitMissing as exc:
        service.request_repair()
        raise NotFound(str(exc), code="unit_missing") from exc
    except UnitCorrupt as exc:
        service.metrics.corrupt.inc()
        service.request_repair()
        raise Conflict(str(exc), code="unit_corrupt") from exc
    return Response(data, media_type=OCTETS, headers={"x-themis-crc32": f"{manifest.crc(stripe, index):08x}"})


@router.put("/internal/raid/units/{key}/{stripe}/{index}", status_code=204, include_in_schema=False)
async def put_unit(key: str, stripe: int, index: int, request: Request, service: Raid) -> Response:
    manifest = _manifest(service, key)
    ref = _ref(manifest, stripe, index)
    if manifest.layout.shard_of(stripe, index) != service.self_id:
        raise Conflict(f"unit {ref} belongs to {manifest.layout.shard_of(stripe, index)}", code="wrong_shard")
    body = await request.body()
    try:
        await asyncio.to_thread(service.store.write_unit, manifest, ref, body)
    except UnitCorrupt as exc:
        raise BadRequest(str(exc), code="unit_corrupt") from exc
    return Response(status_code=204)


# -- operators -----------------------------------------------------------------------------------------
@router.get("/v1/raid/status")
async def status(shard: Node) -> dict:
    service = shard.raid
    if service is None:
        return {"enabled": False, "shard_id": shard.settings.shard_id}
    return service.status()


@router.post("/v1/raid/verify")
async def verify(service: Raid) -> dict:
    """crc-check every local unit (repairs are scheduled when any is missing or corrupt)."""
    report = await service.verify()
    if report["missing"] or report["corrupt"]:
        service.request_repair()
    return report


class RebuildRequest(BaseModel):
    model_config = ConfigDict(strict=True)
    #: Also reassemble (and re-verify) the local model file.
    assemble: bool = False


@router.post("/v1/raid/rebuild")
async def rebuild(service: Raid, body: RebuildRequest | None = None) -> dict:
    """Repair this shard's missing/corrupt units from its peers now; 503 beyond the tolerance."""
    manifest = service.store.active()
    if manifest is None:
        raise Unavailable("no RAID model on this shard", code="no_model")
    result = await service.sync(manifest, assemble=bool(body and body.assemble))
    return {"operation": result, "units": await service.verify(manifest)}


class IngestRequest(BaseModel):
    model_config = ConfigDict(strict=True)
    source: str = Field("bundled", description='"bundled", a GGUF path on this shard, or an http(s) URL')
    #: Make it the model every shard assembles at its next start.
    activate: bool = False


@router.post("/v1/raid/models", status_code=201)
async def ingest(body: IngestRequest, service: Raid) -> dict:
    manifest = await service.ingest(body.source, activate=body.activate)
    return manifest.summary()
