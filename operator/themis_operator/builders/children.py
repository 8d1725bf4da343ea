"""The full set of children of one ThemisCluster, in the order they must be applied.

Secrets and the plan come before the StatefulSet so a new pod never starts without its
certificate or its plan. Children that the spec turned off (TLS, ServiceMonitor) are listed
for removal so that toggling a feature converges both ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from themis_core.plan import ClusterPlan

from .. import names
from .auth import build_api_keys_secret
from .context import ClusterContext
from .gossip import build_gossip_secret
from .monitoring import build_service_monitor
from .pdb import build_pdb
from .plan import build_plan_configmap
from .services import build_client_service, build_headless_service
from .statefulset import build_statefulset
from .tls import build_ca_secret, build_tls_secret


@dataclass(frozen=True)
class Ref:
    api_version: str
    kind: str
    name: str


@dataclass(frozen=True)
class Children:
    apply: list[dict]
    remove: list[Ref]


def build_children(
    ctx: ClusterContext,
    *,
    replicas: int,
    plan: ClusterPlan,
    ca: tuple[bytes, bytes] | None,
    existing_tls: dict | None,
    existing_gossip: dict | None = None,
    adapter_claims: Sequence[str] = (),
    existing_api_keys: dict | None = None,
    partition: int = 0,
) -> Children:
    apply: list[dict] = [build_gossip_secret(ctx, existing_gossip)]
    remove: list[Ref] = []
    if ctx.spec.tls.enabled:
        if ca is None:
            raise ValueError("TLS is enabled but no CA material was given")
        apply += [build_ca_secret(ctx, ca), build_tls_secret(ctx, ca, replicas, existing_tls)]
    else:
        remove += [
            Ref("v1", "Secret", names.tls_secret(ctx.name)),
            Ref("v1", "Secret", names.ca_secret(ctx.name)),
        ]
    if ctx.spec.auth.enabled:
        apply.append(build_api_keys_secret(ctx, existing_api_keys))
    else:
        remove.append(Ref("v1", "Secret", names.api_keys_secret(ctx.name)))
    apply += [
        build_plan_configmap(ctx, plan),
        build_headless_service(ctx),
        build_client_service(ctx),
        build_statefulset(ctx, replicas, adapter_claims, partition),
        build_pdb(ctx),
    ]
    if ctx.spec.monitoring.service_monitor:
        apply.append(build_service_monitor(ctx))
    else:
        remove.append(Ref("monitoring.coreos.com/v1", "ServiceMonitor", names.service_monitor(ctx.name)))
    return Children(apply, remove)


def all_child_refs(cluster: str) -> list[Ref]:
    """Everything a cluster may own: what the delete handler removes explicitly."""
    return [
        Ref("monitoring.coreos.com/v1", "ServiceMonitor", names.service_monitor(cluster)),
        Ref("policy/v1", "PodDisruptionBudget", names.pdb(cluster)),
        Ref("apps/v1", "StatefulSet", names.statefulset(cluster)),
        Ref("v1", "Service", names.client_service(cluster)),
        Ref("v1", "Service", names.headless_service(cluster)),
        Ref("v1", "ConfigMap", names.plan_configmap(cluster)),
        Ref("v1", "Secret", names.tls_secret(cluster)),
        Ref("v1", "Secret", names.ca_secret(cluster)),
        Ref("v1", "Secret", names.gossip_secret(cluster)),
        Ref("v1", "Secret", names.api_keys_secret(cluster)),
    ]
