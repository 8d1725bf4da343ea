"""The work behind the ThemisBackup and ThemisScheduledBackup handlers, without kopf.

A backup run (gate, snapshot and copy every shard of the referenced ThemisCluster, through
``themis_core.cluster_backup.orchestrate``) and a schedule's tick are plain functions of the Kubernetes
client and the shard prober, so they can be tested without importing the handler package (whose
timers read their intervals from the settings at import).
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
from themis_core.cluster_backup.destinations import Destination as Store
from themis_core.cluster_backup.destinations import open_destination
from themis_core.cluster_backup.manifest import BackupInvalid, new_backup_id
from themis_core.cluster_backup.orchestrate import BackupFailed, BackupProgress, ClusterBackup, ShardTarget
from themis_core.cluster_backup.retention import apply_retention
from themis_core.plan import ClusterPlan

from . import API_VERSION, GROUP, VERSION, backups, names
from .cron import Schedule
from .kube import Conflict, Kube
from .probe import ShardProber
from .reconcile.observe import shard_access

BACKUPS = (GROUP, VERSION, "themisbackups")
SCHEDULES = (GROUP, VERSION, "themisscheduledbackups")
PLAN_KEY = "plan.json"


def open_store(kube: Kube, namespace: str, d: backups.Destination) -> Store:
    """The destination, with an S3 client built from the spec (never the operator's own env)."""
    if not d.s3:
        return open_destination(d.url)
    import boto3

    kw: dict[str, Any] = {}
    if d.endpoint_url:
        kw["endpoint_url"] = d.endpoint_url
    if d.region:
        kw["region_name"] = d.region
    if d.credentials_secret is not None:
        secret = kube.get("v1", "Secret", namespace, d.credentials_secret.name)
        if secret is None:
            raise BackupFailed(f"credentials Secret {d.credentials_secret.name!r} not found in {namespace}")
        data = secret.get("data") or {}
        try:
            kw["aws_access_key_id"] = base64.b64decode(data[backups.ACCESS_KEY]).decode()
            kw["aws_secret_access_key"] = base64.b64decode(data[backups.SECRET_KEY]).decode()
        except KeyError as exc:
            raise BackupFailed(f"Secret {d.credentials_secret.name!r} has no key {exc.args[0]}") from None
    return open_destination(d.url, boto3.client("s3", **kw))


def cluster_shards(
    kube: Kube, prober: ShardProber, namespace: str, cluster: str
) -> tuple[list[ShardTarget], dict]:
    """The plan's members and the URLs the operator reaches them at; httpx kwargs (TLS, key)."""
    body = kube.get(API_VERSION, "ThemisCluster", namespace, cluster)
    if body is None:
        raise BackupFailed(f"ThemisCluster {cluster!r} not found in {namespace}")
    cm = kube.get("v1", "ConfigMap", namespace, names.plan_configmap(cluster)) or {}
    if PLAN_KEY not in (cm.get("data") or {}):
        raise BackupFailed(f"ThemisCluster {cluster!r} has no plan yet (is it built?)")
    plan = ClusterPlan.from_json(cm["data"][PLAN_KEY])
    tls, ca_pem, api_key = shard_access(kube, body)
    prefix = f"{cluster}-"
    shards = [
        ShardTarget(m.shard_id, prober.url_for(cluster, namespace, int(m.shard_id.removeprefix(prefix)), tls))
        for m in plan.members
    ]
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cadata=ca_pem.decode()) if tls and ca_pem else True
    )
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return shards, {"verify": verify, "headers": headers}


def run_backup(
    kube: Kube,
    prober: ShardProber,
    namespace: str,
    name: str,
    spec: backups.ThemisBackupSpec,
    *,
    client_factory: Callable[..., httpx.Client] = httpx.Client,
    report_every_s: float = 2.0,
) -> dict:
    """Take the backup; the final status (Completed or Failed). Progress is patched on the way."""
    started = backups.now_iso()
    backup_id = None
    try:
        shards, http = cluster_shards(kube, prober, namespace, spec.cluster_ref.name)
        store = open_store(kube, namespace, spec.destination)
        last = [0.0]

        def report(p: BackupProgress) -> None:
            if p.phase != "done" and time.monotonic() - last[0] < report_every_s:
                return
            last[0] = time.monotonic()
            kube.patch(
                API_VERSION,
                "ThemisBackup",
                namespace,
                name,
                {"status": backups.running_status(backup_id or "", started, p)},
                subresource="status",
            )

        backup_id = new_backup_id()
        with client_factory(timeout=300.0, **http) as client:
            manifest = ClusterBackup(shards, store, client, progress=report).run(backup_id)
        deleted = apply_retention(store, spec.keep) if spec.keep else []
        return backups.completed_status(manifest, started, store.url, deleted)
    except (BackupFailed, BackupInvalid, ValueError) as exc:
        return backups.failed_status(str(exc), started)
    except Exception as exc:  # the object store, credentials: say what it was, never retry half a backup
        return backups.failed_status(f"{type(exc).__name__}: {exc}", started)


def schedule_tick(kube: Kube, body: dict, now: datetime) -> dict | None:
    """Create the ThemisBackup a due schedule asks for; the status to patch (None: nothing due)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    try:
        spec = backups.ThemisScheduledBackupSpec.model_validate(body.get("spec") or {})
        last = backups.parse_iso(status.get("lastScheduleTime") or meta["creationTimestamp"])
        next_at = Schedule.parse(spec.schedule).next_after(now)
        fire = backups.due(spec.schedule, last, now)
    except ValueError as exc:
        return {"phase": "Failed", "message": f"invalid spec: {exc}"}
    if spec.suspend:
        return {"phase": "Suspended", "nextScheduleTime": None}
    out = {"phase": "Active", "nextScheduleTime": backups.now_iso(next_at)}
    if fire:
        child = backups.child_backup(meta["name"], meta["namespace"], meta.get("uid", ""), spec, now)
        with contextlib.suppress(Conflict):  # created by an earlier tick of this same minute
            kube.create(child)
        out |= {"lastScheduleTime": backups.now_iso(now), "lastBackup": child["metadata"]["name"]}
    return out
