"""LoRAAdapter handlers: re-plan the referenced cluster so shards pick up the placement."""

from __future__ import annotations

import kopf

from .. import API_VERSION, GROUP, VERSION
from ..reconcile import reconcile_cluster
from .events import emit, write_adapter_statuses

RESOURCE = (GROUP, VERSION, "loraadapters")


def _replan(body, patch, memo, *, deleting: bool = False) -> None:
    namespace, name = body.metadata.namespace, body.metadata.name
    cluster_name = ((body.get("spec") or {}).get("clusterRef") or {}).get("name")
    cluster = memo.kube.get(API_VERSION, "ThemisCluster", namespace, cluster_name) if cluster_name else None
    if cluster is not None and (cluster.get("metadata") or {}).get("deletionTimestamp"):
        return  # the cluster is going away with its plan; nothing to place
    if cluster is None:
        if not deleting:
            patch.status.update(
                {
                    "phase": "Pending",
                    "placed": "",
                    "placedShards": [],
                    "message": f"ThemisCluster {cluster_name!r} not found in {namespace}",
                }
            )
        return
    with memo.metrics.reconcile("LoRAAdapter", "delete" if deleting else "change"):
        outcome = reconcile_cluster(memo.kube, cluster, exclude_adapters=[name] if deleting else ())
    if not outcome.built:
        if not deleting:
            patch.status.update(
                {
                    "phase": "Pending",
                    "message": f"cluster {cluster_name} is not built: {outcome.status.get('message', '')}",
                }
            )
        return
    memo.kube.patch(
        API_VERSION,
        "ThemisCluster",
        namespace,
        cluster_name,
        {"status": outcome.status},
        subresource="status",
    )
    emit(cluster, outcome)
    write_adapter_statuses(memo.kube, namespace, outcome)
    if not deleting and name in outcome.adapter_statuses:
        placed = outcome.adapter_statuses[name].get("placed") or "no shards"
        kopf.info(body, reason="Placed", message=f"placed on {placed} of {cluster_name}")


@kopf.on.create(*RESOURCE)
def created(body, patch, memo, **_) -> None:
    _replan(body, patch, memo)


@kopf.on.update(*RESOURCE)
def updated(body, patch, memo, **_) -> None:
    _replan(body, patch, memo)


@kopf.on.resume(*RESOURCE)
def resumed(body, patch, memo, **_) -> None:
    _replan(body, patch, memo)


@kopf.on.delete(*RESOURCE)
def deleted(body, patch, memo, **_) -> None:
    _replan(body, patch, memo, deleting=True)
