"""ThemisBackup, ThemisScheduledBackup and ``ThemisCluster.spec.bootstrap.fromBackup``: the
typed specs and the pure parts (status documents, when a schedule is due, the shard environment
that restores a new cluster). The I/O is in ``handlers/backup.py``; the backup itself is
``themis_core.cluster_backup.orchestrate`` (HTTP to the shards' admin routes, no storage engine).

A destination is ``s3://bucket/prefix`` (endpoint, region and a Secret with
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` given in the spec) or a directory on a volume
mounted into the operator's pod.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from themis_core.cluster_backup.manifest import BACKUP_ID, Manifest
from themis_core.cluster_backup.orchestrate import BackupProgress

from . import API_VERSION
from .cron import Schedule

#: Keys of the credentials Secret (boto3's environment names).
ACCESS_KEY, SECRET_KEY = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
TERMINAL = frozenset({"Completed", "Failed"})


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class SecretRef(_Model):
    name: str


class ClusterRef(_Model):
    name: str


class Destination(_Model):
    url: str = Field(min_length=1)
    endpoint_url: str | None = Field(None, alias="endpointURL")
    region: str | None = None
    credentials_secret: SecretRef | None = None

    @property
    def s3(self) -> bool:
        return self.url.startswith("s3://")


class ThemisBackupSpec(_Model):
    cluster_ref: ClusterRef
    destination: Destination
    #: after this backup completes, keep only the newest N complete backups at the destination
    keep: int | None = Field(None, ge=1)


class ThemisScheduledBackupSpec(_Model):
    cluster_ref: ClusterRef
    destination: Destination
    schedule: str
    keep: int | None = Field(None, ge=1)
    suspend: bool = False


class FromBackup(_Model):
    destination: Destination
    backup_id: str = Field(pattern=BACKUP_ID)

    @field_validator("destination")
    @classmethod
    def _object_store(cls, d: Destination) -> Destination:
        if not d.s3:
            raise ValueError(
                "bootstrap.fromBackup needs an s3:// destination: the shards restore themselves and "
                "cannot see a directory mounted into the operator"
            )
        return d

    @property
    def ref(self) -> str:
        return f"{self.destination.url.rstrip('/')}/{self.backup_id}"


class BootstrapSpec(_Model):
    from_backup: FromBackup | None = None


def now_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- status documents -------------------------------------------------------------------------------
def running_status(backup_id: str, started: str, p: BackupProgress) -> dict:
    total = p.bytes_total or 0
    percent = int(100 * p.bytes_done / total) if total else 0
    return {
        "phase": "Running",
        "backupId": backup_id,
        "startedAt": started,
        "stage": p.phase,
        "progress": f"{percent}%",
        "bytesDone": p.bytes_done,
        "bytesTotal": total,
        "filesDone": p.files_done,
        "filesTotal": p.files_total,
    }


def completed_status(m: Manifest, started: str, destination: str, deleted: list[str]) -> dict:
    return {
        "phase": "Completed",
        "backupId": m.backup_id,
        "startedAt": started,
        "completedAt": now_iso(),
        "stage": "done",
        "progress": "100%",
        "bytesDone": m.size,
        "bytesTotal": m.size,
        "size": _human(m.size),
        "documents": m.documents,
        "shards": len(m.shards),
        "ringVersion": m.cut.ring_version,
        "formatVersion": m.format_version,
        "location": f"{destination.rstrip('/')}/{m.backup_id}",
        "retentionDeleted": deleted,
        "message": f"{len(m.shards)} shard(s), {_human(m.size)} at ring version {m.cut.ring_version}",
    }


def failed_status(message: str, started: str | None = None) -> dict:
    return {"phase": "Failed", "completedAt": now_iso(), "message": message} | (
        {"startedAt": started} if started else {}
    )


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size}"


# -- schedules -------------------------------------------------------------------------------------
def due(schedule: str, last: datetime, now: datetime) -> bool:
    """Has the schedule fired since ``last`` (the last backup, or the object's creation)?"""
    return Schedule.parse(schedule).next_after(last) <= now


def child_backup(name: str, namespace: str, uid: str, spec: ThemisScheduledBackupSpec, now: datetime) -> dict:
    """The ThemisBackup a schedule creates (owned by it, so deleting the schedule removes them)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ThemisBackup",
        "metadata": {
            "name": f"{name}-{now:%Y%m%d%H%M}",
            "namespace": namespace,
            "labels": {"themisdb.io/scheduled-backup": name, "themisdb.io/cluster": spec.cluster_ref.name},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ThemisScheduledBackup",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec.model_dump(
            by_alias=True, exclude_none=True, include={"cluster_ref", "destination", "keep"}
        ),
    }


# -- restore ----------------------------------------------------------------------------------------
def restore_env(bootstrap: BootstrapSpec | None) -> list[dict]:
    """The shard environment that restores a new cluster from a backup on first start
    (``THEMIS_RESTORE_FROM``; boto3's endpoint, region and the credentials Secret)."""
    if bootstrap is None or bootstrap.from_backup is None:
        return []
    fb = bootstrap.from_backup
    return [{"name": "THEMIS_RESTORE_FROM", "value": fb.ref}, *destination_env(fb.destination)]


def destination_env(d: Destination) -> list[dict]:
    env = []
    if d.endpoint_url:
        env.append({"name": "AWS_ENDPOINT_URL", "value": d.endpoint_url})
    if d.region:
        env.append({"name": "AWS_DEFAULT_REGION", "value": d.region})
    if d.credentials_secret is not None:
        env += [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": d.credentials_secret.name, "key": key}}}
            for key in (ACCESS_KEY, SECRET_KEY)
        ]
    return env
