"""ThemisCluster handlers: create/update/resume reconcile, status timer, explicit delete, and the
plan authority daemon of clusters with failover on."""

from __future__ import annotations

import asyncio

import kopf

from .. import GROUP, VERSION
from ..plan_authority import ClusterAuthority
from ..reconcile import delete_children, probe_shards, reconcile_cluster
from ..retries import soon_after_conflict
from ..settings import OperatorSettings
from .events import emit, write_adapter_statuses

RESOURCE = (GROUP, VERSION, "themisclusters")
#: The timer interval is a decoration-time constant in kopf, hence read once here.
_INTERVAL = OperatorSettings().status_interval_s


def _reconcile(body, patch, memo, trigger: str, **kwargs) -> None:
    if body.metadata.get("deletionTimestamp"):
        return  # a tick racing the deletion must neither rebuild children nor patch the status
    # the plan authority may move the plan meanwhile: then decide again from it
    with soon_after_conflict(), memo.metrics.reconcile("ThemisCluster", trigger):
        outcome = reconcile_cluster(
            memo.kube, dict(body), default_image=memo.settings.default_shard_image, **kwargs
        )
    memo.metrics.observe_status(body.metadata.namespace, body.metadata.name, outcome.status)
    patch.status.update(outcome.status)
    emit(body, outcome)
    write_adapter_statuses(memo.kube, body.metadata.namespace, outcome)


@kopf.on.create(*RESOURCE)
def created(body, patch, memo, **_) -> None:
    _reconcile(body, patch, memo, "create")


@kopf.on.update(*RESOURCE)
def updated(body, patch, memo, **_) -> None:
    _reconcile(body, patch, memo, "update")


@kopf.on.resume(*RESOURCE)
def resumed(body, patch, memo, **_) -> None:
    _reconcile(body, patch, memo, "resume")


@kopf.timer(*RESOURCE, interval=_INTERVAL, initial_delay=min(_INTERVAL, 5.0))
def refresh_status(body, patch, memo, **_) -> None:
    """Probe every shard, then reconcile with fresh reports (finishes scale-in, heals drift)."""
    if body.metadata.get("deletionTimestamp"):
        return
    _reconcile(body, patch, memo, "timer", reports=probe_shards(memo.kube, memo.prober, dict(body)))


@kopf.on.delete(*RESOURCE)
def deleted(body, memo, **_) -> None:
    with memo.metrics.reconcile("ThemisCluster", "delete"):
        removed = delete_children(memo.kube, body.metadata.namespace, body.metadata.name)
    memo.metrics.forget_cluster(body.metadata.namespace, body.metadata.name)
    if removed:
        kopf.info(body, reason="Deleted", message=f"removed {len(removed)} children")


def _failover_enabled(spec, **_) -> bool:
    return bool(((spec or {}).get("failover") or {}).get("enabled"))


@kopf.daemon(*RESOURCE, when=_failover_enabled, cancellation_timeout=10.0)
async def plan_authority(stopped, name, namespace, memo, **_) -> None:
    """The cluster's plan authority (``plan_authority.py``) while ``spec.failover.enabled``."""
    stop = asyncio.Event()
    watcher = asyncio.create_task(_when_stopped(stopped, stop))
    try:
        await ClusterAuthority(memo.kube, namespace, name).run(stop)
    finally:
        watcher.cancel()


async def _when_stopped(stopped, stop: asyncio.Event) -> None:
    await stopped.wait()
    stop.set()
