"""ThemisBackup and ThemisScheduledBackup handlers.

A ThemisBackup runs once: the operator gates, snapshots and copies every shard of the referenced
ThemisCluster (``themis_core.cluster_backup.orchestrate``) to the destination, writing the phase and
the bytes copied to ``status`` as it goes; Completed or Failed is final (a backup interrupted by
an operator restart is Failed, never resumed half-way: create another). A ThemisScheduledBackup
creates a ThemisBackup each time its cron schedule fires.
"""

from __future__ import annotations

from datetime import UTC, datetime

import kopf

from .. import backups
from ..backup_jobs import BACKUPS, SCHEDULES, run_backup, schedule_tick


@kopf.on.create(*BACKUPS)
@kopf.on.resume(*BACKUPS)
def backup(body, patch, memo, **_) -> None:
    phase = (body.get("status") or {}).get("phase")
    if phase in backups.TERMINAL:
        return
    if phase == "Running":  # the operator restarted mid-way: the staged snapshots expire with their leases
        patch.status.update(
            backups.failed_status("the operator restarted during the backup; create a new one")
        )
        return
    try:
        spec = backups.ThemisBackupSpec.model_validate(body.get("spec") or {})
    except ValueError as exc:
        patch.status.update(backups.failed_status(f"invalid spec: {exc}"))
        return
    namespace, name = body.metadata.namespace, body.metadata.name
    patch.status.update(result := run_backup(memo.kube, memo.prober, namespace, name, spec))
    if result["phase"] == "Completed":
        kopf.info(body, reason="BackupCompleted", message=result["message"])
    else:
        kopf.warn(body, reason="BackupFailed", message=result["message"])


@kopf.timer(*SCHEDULES, interval=30.0, initial_delay=5.0)
def scheduled(body, patch, memo, **_) -> None:
    if body.metadata.get("deletionTimestamp"):
        return
    status = schedule_tick(memo.kube, dict(body), datetime.now(UTC))
    if status is not None:
        patch.status.update(status)
