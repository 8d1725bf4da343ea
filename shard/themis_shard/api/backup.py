"""A shard's part in a cluster backup (admin): close and open its decision gate, take its
snapshot, serve the snapshot's files, drop them. ``themis_core/cluster_backup/orchestrate.py``
drives these routes on every shard; ``backup/cut.py`` says why the result is one consistent cut."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field
from themis_core.cluster_backup.manifest import BACKUP_ID, ShardSnapshot

from ..backup.snapshot import SnapshotStore
from ..errors import Conflict, Unavailable
from ..node import ShardNode
from ..storage.decision_gate import DecisionsInFlight, GateHeld
from .deps import node

router = APIRouter(prefix="/v1/cluster/backups", tags=["backup"])
Node = Annotated[ShardNode, Depends(node)]
BackupId = Annotated[str, Path(pattern=BACKUP_ID, description="the backup's id")]


class GateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: the gate opens by itself after this long (a backup that died never blocks commits for long)
    lease_s: float = Field(30.0, gt=0, le=300)
    #: how long to wait for commit decisions being logged right now
    drain_s: float = Field(10.0, gt=0, le=60)


class GateAnswer(BaseModel):
    shard_id: str
    ring_version: int
    closed: bool
    #: which closing of the gate this is: the same on a renewal only if the gate never lapsed
    closing: int = 0
    #: the shard's cluster plan (when closing): the backup records the source ring from it
    plan: dict | None = None


def snapshots(shard: ShardNode) -> SnapshotStore:
    return SnapshotStore(
        shard.settings.data_dir / "backups", shard.store, shard.settings.weights_path / "trained"
    )


def _gate(shard: ShardNode):
    return shard.cluster.transactions.log.gate


def _refuse_while_resharding(shard: ShardNode) -> None:
    topo = shard.cluster.topology
    state = shard.cluster.migration.state.value
    if topo.plan.draining or state == "migrating":
        raise Conflict(
            f"{shard.settings.shard_id} is resharding (ring version {topo.version}, migration {state}); "
            "back up once the handoff is complete",
            code="resharding_in_progress",
        )


@router.post("/{backup_id}/gate", response_model=GateAnswer)
async def close_gate(backup_id: BackupId, shard: Node, body: GateRequest | None = None) -> GateAnswer:
    """Hold new cross-shard COMMIT decisions on this shard until the snapshot is taken; again:
    renew the lease (``closing`` stays the same unless the gate lapsed in between) (409
    ``backup_in_progress`` while another backup holds it; 503 when decisions being logged do not
    finish in ``drain_s``)."""
    body = body or GateRequest()
    _refuse_while_resharding(shard)
    try:
        closing = await asyncio.to_thread(_gate(shard).close, backup_id, body.lease_s, body.drain_s)
    except GateHeld as exc:
        raise Conflict(str(exc), code="backup_in_progress") from None
    except DecisionsInFlight as exc:
        raise Unavailable(str(exc), code="decisions_in_flight") from None
    topo = shard.cluster.topology
    return GateAnswer(
        shard_id=shard.settings.shard_id,
        ring_version=topo.version,
        closed=True,
        closing=closing,
        plan=topo.plan.model_dump(mode="json"),
    )


@router.delete("/{backup_id}/gate", response_model=GateAnswer)
async def open_gate(backup_id: BackupId, shard: Node) -> GateAnswer:
    """Let COMMIT decisions through again (idempotent)."""
    _gate(shard).open(backup_id)
    return GateAnswer(
        shard_id=shard.settings.shard_id, ring_version=shard.cluster.topology.version, closed=False
    )


@router.post("/{backup_id}/snapshot", response_model=ShardSnapshot)
async def take_snapshot(backup_id: BackupId, shard: Node) -> ShardSnapshot:
    """Checkpoint this shard (while its gate is closed by this backup: 409 ``gate_not_held``
    otherwise) and list the staged files with their sizes and sha256."""
    if _gate(shard).holder != backup_id:
        raise Conflict(
            f"backup {backup_id} does not hold this shard's decision gate (closed it, or its lease ran out)",
            code="gate_not_held",
        )
    version = shard.cluster.topology.version
    hlc = shard.store.clock.now()
    # its own thread (not the request pool, where decisions may be waiting at the gate)
    files = await asyncio.to_thread(snapshots(shard).take, backup_id)
    documents = sum(shard.store.count(c.name) for c in shard.store.collections())
    return ShardSnapshot(
        shard_id=shard.settings.shard_id,
        ring_version=version,
        documents=documents,
        hlc=hlc,
        files=tuple(files),
    )


@router.get("/{backup_id}/files/{path:path}", response_class=FileResponse)
async def snapshot_file(backup_id: BackupId, path: str, shard: Node) -> FileResponse:
    """One staged file of this shard's snapshot (404 ``backup_file_not_found``)."""
    return FileResponse(snapshots(shard).file(backup_id, path), media_type="application/octet-stream")


@router.delete("/{backup_id}")
async def drop_snapshot(backup_id: BackupId, shard: Node) -> dict:
    """Drop this shard's staged snapshot (and open the gate, if this backup still holds it)."""
    _gate(shard).open(backup_id)
    dropped = await asyncio.to_thread(snapshots(shard).drop, backup_id)
    return {"shard_id": shard.settings.shard_id, "dropped": dropped}
