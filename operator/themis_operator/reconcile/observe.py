"""Observe: everything one reconcile decides from, read once into a typed snapshot.

All of a reconcile's reads happen here, so that ``decide`` and ``report`` can be pure functions
of the snapshot: every child the cluster may own, its LoRAAdapters, and the shards' reports
(fresh from a probe, or the ones stored in the status by the last probe).
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError
from themis_core.plan import ClusterPlan

from .. import API_VERSION, names
from ..builders import ClusterContext
from ..builders.children import Ref, all_child_refs
from ..builders.plan import previous_plan
from ..kube import Kube
from ..pods import PodProblem, pod_problems
from ..probe import ShardProber, reports_from_status
from ..spec import LoRAAdapterSpec, error_text
from ..status import ShardReport

#: Annotation that lets scale-in proceed without waiting for leaving shards (dead shards).
FORCE_SCALE_IN = "themisdb.io/force-scale-in"


@dataclass(frozen=True)
class PriorStatus:
    """The cluster's status before this reconcile: events fire on changes only."""

    phase: str | None = None
    message: str | None = None
    conditions: tuple[dict, ...] = ()
    #: The last published ring (``status.ring``): ring versions carry on from it when the plan
    #: ConfigMap was deleted.
    ring: dict | None = None

    @classmethod
    def of(cls, body: dict) -> PriorStatus:
        status = body.get("status") or {}
        ring = status.get("ring") if isinstance(status.get("ring"), dict) else None
        return cls(status.get("phase"), status.get("message"), tuple(status.get("conditions") or ()), ring)


@dataclass(frozen=True)
class StatefulSetState:
    """The shards' StatefulSet as it is (all zero before it exists)."""

    replicas: int = 0
    ready: int = 0
    updated: int = 0
    #: A StatefulSet rolls pod by pod; until every pod runs the new revision we are progressing.
    rolling: bool = False

    @classmethod
    def of(cls, sts: dict | None) -> StatefulSetState:
        status = (sts or {}).get("status") or {}
        return cls(
            replicas=int(((sts or {}).get("spec") or {}).get("replicas") or 0),
            ready=int(status.get("readyReplicas") or 0),
            updated=int(status.get("updatedReplicas") or 0),
            rolling=bool(status.get("updateRevision"))
            and status.get("currentRevision") != status.get("updateRevision"),
        )


@dataclass(frozen=True)
class ObservedAdapter:
    """A live, valid LoRAAdapter that refers to the cluster."""

    name: str
    spec: LoRAAdapterSpec
    generation: int | None = None
    conditions: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """What one reconcile saw: the input of ``decide`` and ``report``."""

    #: Every child the cluster may own (``all_child_refs``), None where it does not exist.
    children: Mapping[Ref, dict | None]
    statefulset: StatefulSetState = StatefulSetState()
    #: The plan currently published in the plan ConfigMap (None: first reconcile, or unreadable).
    previous_plan: ClusterPlan | None = None
    adapters: tuple[ObservedAdapter, ...] = ()
    #: Adapters that refer to the cluster but whose spec is invalid: name → why.
    invalid_adapters: Mapping[str, str] = field(default_factory=dict)
    reports: Mapping[str, ShardReport] = field(default_factory=dict)
    generation: int | None = None
    force_scale_in: bool = False
    prior: PriorStatus = PriorStatus()
    #: Shard pods that cannot start, and why (their termination messages).
    pod_problems: tuple[PodProblem, ...] = ()
    #: The shards' PersistentVolumeClaims (data and weights), for storage size changes.
    claims: tuple[dict, ...] = ()
    #: ``reports`` come from a probe just now (not the status of an earlier one).
    fresh_reports: bool = False

    def child(self, ref: Ref) -> dict | None:
        return self.children.get(ref)


def cluster_adapters(
    kube: Kube, namespace: str, cluster: str, exclude: Collection[str] = ()
) -> tuple[tuple[ObservedAdapter, ...], dict[str, str]]:
    """Live adapters referring to ``cluster`` with a source to place: ``(valid ones, invalid name →
    message)``."""
    valid: list[ObservedAdapter] = []
    invalid: dict[str, str] = {}
    for body in kube.list(API_VERSION, "LoRAAdapter", namespace):
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not name or name in exclude or meta.get("deletionTimestamp"):
            continue
        if ((body.get("spec") or {}).get("clusterRef") or {}).get("name") != cluster:
            continue
        try:
            spec = LoRAAdapterSpec.model_validate(body.get("spec") or {})
        except ValidationError as e:
            invalid[name] = f"invalid spec: {error_text(e)}"
            continue
        if spec.source is None:
            continue  # federated: the shards train and load it (handlers/adapter.py), nothing to place
        conditions = tuple((body.get("status") or {}).get("conditions") or ())
        valid.append(ObservedAdapter(name, spec, meta.get("generation"), conditions))
    return tuple(valid), invalid


def observe(
    kube: Kube,
    ctx: ClusterContext,
    body: dict,
    *,
    reports: Mapping[str, ShardReport] | None = None,
    exclude_adapters: Collection[str] = (),
) -> Snapshot:
    """Read the cluster's world; ``reports`` are fresh probe results, else the stored ones."""
    meta = body.get("metadata") or {}
    adapters, invalid = cluster_adapters(kube, ctx.namespace, ctx.name, exclude_adapters)
    children = {
        ref: kube.get(ref.api_version, ref.kind, ctx.namespace, ref.name) for ref in all_child_refs(ctx.name)
    }
    return Snapshot(
        children=children,
        statefulset=StatefulSetState.of(children[Ref("apps/v1", "StatefulSet", names.statefulset(ctx.name))]),
        previous_plan=previous_plan(children[Ref("v1", "ConfigMap", names.plan_configmap(ctx.name))]),
        adapters=adapters,
        invalid_adapters=invalid,
        reports=dict(reports) if reports is not None else reports_from_status(body.get("status")),
        generation=meta.get("generation"),
        force_scale_in=(meta.get("annotations") or {}).get(FORCE_SCALE_IN) == "true",
        prior=PriorStatus.of(body),
        pod_problems=pod_problems(kube.list("v1", "Pod", ctx.namespace, label_selector=selector(ctx.name))),
        fresh_reports=reports is not None,
        claims=tuple(
            kube.list("v1", "PersistentVolumeClaim", ctx.namespace, label_selector=selector(ctx.name))
        ),
    )


def selector(cluster: str) -> str:
    """The shard pods' label selector (also the scale subresource's ``status.selector``)."""
    return ",".join(f"{k}={v}" for k, v in names.selector_labels(cluster).items())


def shard_access(kube: Kube, body: dict) -> tuple[bool, bytes | None, str | None]:
    """How the operator talks to a cluster's shards: TLS on, the cluster CA, its own API key."""
    spec = body.get("spec") or {}
    meta = body.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    tls = bool((spec.get("tls") or {}).get("enabled", True))
    ca_pem = None
    if tls:
        secret = kube.get("v1", "Secret", namespace, names.tls_secret(name)) or {}
        if raw := (secret.get("data") or {}).get("ca.crt"):
            ca_pem = base64.b64decode(raw)
    api_key = None
    if (spec.get("auth") or {}).get("enabled", True):  # the operator's own key (builders/auth.py)
        secret = kube.get("v1", "Secret", namespace, names.api_keys_secret(name)) or {}
        if raw := (secret.get("data") or {}).get("operator.key"):
            api_key = base64.b64decode(raw).decode().strip()
    return tls, ca_pem, api_key


def probe_shards(kube: Kube, prober: ShardProber, body: dict) -> dict[str, ShardReport]:
    """Ask every shard pod (members and leaving ones) how it is, trusting the cluster's CA."""
    spec = body.get("spec") or {}
    meta = body.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    sts = kube.get("apps/v1", "StatefulSet", namespace, names.statefulset(name)) or {}
    count = int((sts.get("spec") or {}).get("replicas") or 0)
    tls, ca_pem, api_key = shard_access(kube, body)
    members = int(spec.get("shards") or 0)
    reports = prober.probe(name, namespace, max(count, members), members, tls, ca_pem, api_key)
    return {r.id: r for r in reports}
