"""LoRAAdapter handlers: re-plan the referenced cluster so shards pick up the placement."""

from __future__ import annotations

import kopf

from .. import API_VERSION, GROUP, VERSION, federation
from ..reconcile import reconcile_cluster
from ..reconcile.observe import shard_access
from ..retries import HANDLER_BACKOFF_S, soon_after_conflict
from ..spec import LoRAAdapterSpec
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
    with soon_after_conflict(), memo.metrics.reconcile("LoRAAdapter", "delete" if deleting else "change"):
        outcome = reconcile_cluster(
            memo.kube,
            cluster,
            exclude_adapters=[name] if deleting else (),
            default_image=memo.settings.default_shard_image,
        )
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


def _federate(body, patch, memo) -> None:
    """``spec.federated``: once per spec generation, ask shard 0 to run the rounds (it blocks
    this adapter's handler, not the operator, while the shards train) and report the outcome."""
    try:
        spec = LoRAAdapterSpec.model_validate(body.get("spec") or {})
    except ValueError:
        return  # _replan reported it
    generation = body.metadata.get("generation")
    if not federation.due(spec, body.get("status"), generation):
        return
    namespace, name = body.metadata.namespace, body.metadata.name
    cluster = memo.kube.get(API_VERSION, "ThemisCluster", namespace, spec.cluster_ref.name)
    if cluster is None:
        return  # Pending, said by _replan; a later event retries
    tls, ca_pem, api_key = shard_access(memo.kube, cluster)
    url = memo.prober.url_for(spec.cluster_ref.name, namespace, 0, tls)
    with memo.metrics.reconcile("LoRAAdapter", "federate"):
        code, answer = memo.federator.start(url, name, federation.request_body(spec), ca_pem, api_key)
    result = federation.status_of(code, answer, generation)
    patch.status["federation"] = result
    if result["phase"] == "Succeeded":
        kopf.info(body, reason="Federated", message=result["message"])
    else:
        kopf.warn(body, reason="FederationFailed", message=result["message"])


@kopf.on.create(*RESOURCE)
def created(body, patch, memo, **_) -> None:
    _replan(body, patch, memo)
    _federate(body, patch, memo)


@kopf.on.update(*RESOURCE)
def updated(body, patch, memo, **_) -> None:
    _replan(body, patch, memo)
    _federate(body, patch, memo)


@kopf.on.resume(*RESOURCE)
def resumed(body, patch, memo, **_) -> None:
    _replan(body, patch, memo)
    _federate(body, patch, memo)


@kopf.on.delete(*RESOURCE, backoff=HANDLER_BACKOFF_S)
def deleted(body, patch, memo, **_) -> None:
    _replan(body, patch, memo, deleting=True)
