"""A backup's manifest: what it holds, where, with which checksums, in which format.

Layout at a destination (a directory or an S3 prefix)::

    <backup id>/manifest.json                     written last: no manifest, no backup
    <backup id>/shards/<shard id>/db/...          the shard's RocksDB checkpoint
    <backup id>/shards/<shard id>/adapters/...    its trained LoRA adapters (GGUF)

A restore reads the manifest first, refuses a format newer than its own or a path that leaves
the backup, and checks every file's size and sha256 before it writes anything.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: Bumped when the layout or a field's meaning changes; a restore refuses anything newer.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
BACKUP_ID = r"^[a-z0-9][a-z0-9-]{0,62}$"
_ID_RE = re.compile(BACKUP_ID)
_PATH_RE = re.compile(r"^(db|adapters)/[A-Za-z0-9._-]+$")


class BackupInvalid(Exception):
    """The backup cannot be restored: missing, partial, corrupt or from a newer format."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Strict):
    path: str = Field(pattern=_PATH_RE.pattern)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ShardSnapshot(_Strict):
    """One shard's part of the cut, as its snapshot route answers it."""

    shard_id: str
    ring_version: int
    #: live documents on this shard at the cut (every copy it holds, primary or not)
    documents: int = 0
    #: the shard's hybrid logical clock when it took the snapshot
    hlc: int = 0
    files: tuple[FileEntry, ...] = ()

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class Cut(_Strict):
    #: "decision-gate": every shard snapshotted while no shard could log a COMMIT (cut.py)
    method: str = "decision-gate"
    ring_version: int
    #: wall-clock ms when every gate was closed, and when the last snapshot was taken
    closed_ms: int
    snapshot_ms: int


class Manifest(_Strict):
    format_version: int = FORMAT_VERSION
    backup_id: str = Field(pattern=BACKUP_ID)
    cluster: str
    created_at: str
    themis_version: str
    #: the source cluster's plan (``ClusterPlan`` JSON): its ring says which shard was each key's primary
    plan: dict[str, Any]
    cut: Cut
    shards: tuple[ShardSnapshot, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.shards)

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.shards)

    def file_key(self, shard_id: str, path: str) -> str:
        return f"{self.backup_id}/shards/{shard_id}/{path}"

    def to_bytes(self) -> bytes:
        return self.model_dump_json(indent=2).encode()


def new_backup_id(now: datetime | None = None) -> str:
    """Sortable by time, unique: ``themis-20261203t134501z-3fa2c1``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dt%H%M%Sz")
    return f"themis-{stamp}-{secrets.token_hex(3)}"


def check_backup_id(backup_id: str) -> str:
    if not _ID_RE.fullmatch(backup_id):
        raise ValueError(f"backup id {backup_id!r} must match {BACKUP_ID}")
    return backup_id


def parse_manifest(raw: bytes, backup_id: str) -> Manifest:
    """The manifest, or :class:`BackupInvalid` naming what is wrong with it."""
    try:
        data = Manifest.model_validate_json(raw) if raw.strip().startswith(b"{") else None
    except ValidationError as exc:
        version = _format_version(raw)
        if version is not None and version > FORMAT_VERSION:
            raise BackupInvalid(_too_new(backup_id, version)) from None
        raise BackupInvalid(
            f"backup {backup_id}: the manifest is not valid: {exc.errors()[0]['msg']}"
        ) from None
    if data is None:
        raise BackupInvalid(f"backup {backup_id}: the manifest is not JSON")
    if data.format_version > FORMAT_VERSION:
        raise BackupInvalid(_too_new(backup_id, data.format_version))
    if data.backup_id != backup_id:
        raise BackupInvalid(f"backup {backup_id}: the manifest names backup {data.backup_id}")
    return data


def _format_version(raw: bytes) -> int | None:
    try:
        value = json.loads(raw).get("format_version")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def _too_new(backup_id: str, version: int) -> str:
    return (
        f"backup {backup_id} has format version {version}; this Themis reads up to {FORMAT_VERSION} "
        "(restore it with a newer Themis)"
    )
