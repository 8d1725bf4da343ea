"""ThemisCluster handlers: create/update/resume reconcile, status timer, explicit delete."""

from __future__ import annotations

import base64

import kopf

from .. import GROUP, VERSION, names
from ..reconcile import delete_children, reconcile_cluster
from ..settings import OperatorSettings
from .events import emit, write_adapter_statuses

RESOURCE = (GROUP, VERSION, "themisclusters")
#: The timer interval is a decoration-time constant in kopf, hence read once here.
_INTERVAL = OperatorSettings().status_interval_s


def _reconcile(body, patch, memo, **kwargs) -> None:
    if body.metadata.get("deletionTimestamp"):
        return  # a tick racing the deletion must neither rebuild children nor patch the status
    outcome = reconcile_cluster(memo.kube, dict(body), **kwargs)
    patch.status.update(outcome.status)
    emit(body, outcome)
    write_adapter_statuses(memo.kube, body.metadata.namespace, outcome)


@kopf.on.create(*RESOURCE)
def created(body, patch, memo, **_) -> None:
    _reconcile(body, patch, memo)


@kopf.on.update(*RESOURCE)
def updated(body, patch, memo, **_) -> None:
    _reconcile(body, patch, memo)


@kopf.on.resume(*RESOURCE)
def resumed(body, patch, memo, **_) -> None:
    _reconcile(body, patch, memo)


@kopf.timer(*RESOURCE, interval=_INTERVAL, initial_delay=min(_INTERVAL, 5.0))
def refresh_status(body, patch, memo, **_) -> None:
    """Probe every shard, then reconcile with fresh reports (finishes scale-in, heals drift)."""
    if body.metadata.get("deletionTimestamp"):
        return
    spec = body.get("spec") or {}
    namespace, name = body.metadata.namespace, body.metadata.name
    sts = memo.kube.get("apps/v1", "StatefulSet", namespace, names.statefulset(name)) or {}
    count = int((sts.get("spec") or {}).get("replicas") or 0)
    tls = bool((spec.get("tls") or {}).get("enabled", True))
    ca_pem = None
    if tls:
        secret = memo.kube.get("v1", "Secret", namespace, names.tls_secret(name)) or {}
        if raw := (secret.get("data") or {}).get("ca.crt"):
            ca_pem = base64.b64decode(raw)
    members = int(spec.get("shards") or 0)
    reports = memo.prober.probe(name, namespace, max(count, members), members, tls, ca_pem)
    _reconcile(body, patch, memo, reports={r.id: r for r in reports})


@kopf.on.delete(*RESOURCE)
def deleted(body, memo, **_) -> None:
    removed = delete_children(memo.kube, body.metadata.namespace, body.metadata.name)
    if removed:
        kopf.info(body, reason="Deleted", message=f"removed {len(removed)} children")
