"""The cluster-plan ConfigMap: ``themis_core.plan.build_plan`` output for a ThemisCluster.

The operator adds only Kubernetes knowledge (member URLs through the headless Service, shard
ids from pod names) and adapter placement; ring versioning stays in ``build_plan``, fed with
the previous plan read back from the ConfigMap so the version bumps only on membership change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from themis_core.plan import (
    AdapterPlacement,
    ClusterPlan,
    ClusterSpec,
    FailoverSettings,
    Member,
    RouterSettings,
    build_plan,
)
from themis_core.ring import HashRing, RingSpec

from .. import names
from ..spec import LoRAAdapterSpec
from .context import ClusterContext
from .statefulset import adapter_location

PLAN_KEY = "plan.json"
RING_VERSION_ANNOTATION = "themisdb.io/ring-version"


@dataclass(frozen=True)
class Placement:
    """Where one adapter goes, and why some requested shards were left out."""

    adapter: str
    shards: tuple[str, ...]
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def place_adapter(
    name: str, spec: LoRAAdapterSpec, shard_ids: Sequence[str], vnodes: int, seed: int
) -> Placement:
    """Explicit shards win; otherwise ``replicas`` shards chosen on the hash ring by name.

    Ring choice keeps placement stable: scaling out moves an adapter only when the new shard
    takes over its ring position, like any other key.
    """
    if spec.placement.shards:
        present = tuple(s for s in spec.placement.shards if s in shard_ids)
        missing = tuple(s for s in spec.placement.shards if s not in shard_ids)
        return Placement(name, present, missing)
    ring = HashRing.of(shard_ids, vnodes=vnodes, seed=seed)
    chosen = tuple(ring.owners(f"lora:{name}", spec.placement.replicas))
    notes = ()
    if spec.placement.replicas > len(chosen):
        notes = (f"placement.replicas {spec.placement.replicas} exceeds the {len(chosen)} shards",)
    return Placement(name, chosen, notes=notes)


def cluster_spec(
    ctx: ClusterContext,
    adapters: Sequence[tuple[str, LoRAAdapterSpec]],
    members: int | None = None,
    draining: Sequence[str] = (),
) -> tuple[ClusterSpec, list[Placement]]:
    """The plan input: ``members`` shards (default ``spec.shards``), of which ``draining``
    are leaving the ring (scale-in hand-off), plus the placement of every adapter.

    Adapters are placed on ring shards only: a draining shard is on its way out.
    """
    spec = ctx.spec
    count = spec.shards if members is None else members
    ids = names.shard_ids(ctx.name, count)
    ring_ids = [s for s in ids if s not in draining]
    placements = [
        place_adapter(n, a, ring_ids, spec.vnodes, spec.ring_seed)
        for n, a in sorted(adapters, key=lambda x: x[0])
    ]
    by_name = dict(adapters)
    tls = spec.tls.enabled
    return ClusterSpec(
        name=ctx.name,
        members=tuple(
            Member(
                shard_id=sid,
                url=names.shard_url(ctx.name, ctx.namespace, i, tls),
                internal_url=names.shard_internal_url(ctx.name, ctx.namespace, i) if tls else None,
            )
            for i, sid in enumerate(ids)
        ),
        draining=tuple(draining),
        raid_mode=spec.raid_mode,
        vnodes=spec.vnodes,
        ring_seed=spec.ring_seed,
        router=RouterSettings(
            thresholds=spec.router.thresholds,
            gamma=spec.router.gamma,
            latency_unit_ms=spec.router.latency_unit_ms,
            announcement_ttl_s=spec.router.ttl_seconds,
        ),
        adapters=tuple(
            AdapterPlacement(
                name=p.adapter,
                domain=by_name[p.adapter].domain,
                # pvc:// → the path where the StatefulSet mounts the claim
                source=adapter_location(by_name[p.adapter].source)[1],
                shards=p.shards,
                rank=by_name[p.adapter].rank,
                scale=by_name[p.adapter].scale,
                sha256=by_name[p.adapter].sha256,
            )
            for p in placements
        ),
        tls=tls,
        cluster_uid=ctx.uid,
        failover=failover_settings(ctx),
        min_insync=min(spec.failover.min_insync, len(ring_ids)),
    ), placements


def failover_settings(ctx: ClusterContext) -> FailoverSettings | None:
    """The plan's failover settings: the operator is the plan authority when they are set."""
    f = ctx.spec.failover
    if not f.enabled:
        return None
    return FailoverSettings(lease_s=f.lease_seconds, failover_after_s=f.failover_after_seconds)


def previous_plan(configmap: dict | None) -> ClusterPlan | None:
    """The plan currently published, or None (first reconcile, or an unreadable ConfigMap)."""
    text = ((configmap or {}).get("data") or {}).get(PLAN_KEY)
    if not text:
        return None
    try:
        return ClusterPlan.from_json(text)
    except ValueError:
        return None


def recovered_previous(ctx: ClusterContext, status_ring: dict | None) -> ClusterPlan | None:
    """The last published ring, rebuilt from the cluster's status when the plan ConfigMap is gone.

    Only the ring matters to ``build_plan`` (the version and the migration source), so ring
    versions carry on from the status instead of restarting at 1: same ring → same version,
    another ring → the next version with the recorded ring as the migration source.
    """
    if not status_ring:
        return None
    try:
        ring = RingSpec.from_dict(status_ring)
    except (KeyError, TypeError, ValueError):
        return None
    spec, _ = cluster_spec(ctx, [])
    return build_plan(spec).model_copy(update={"ring": ring.to_dict(), "previous_ring": None})


def next_plan(
    ctx: ClusterContext,
    adapters: Sequence[tuple[str, LoRAAdapterSpec]],
    previous: ClusterPlan | None,
    members: int | None = None,
    draining: Sequence[str] = (),
) -> tuple[ClusterPlan, list[Placement]]:
    spec, placements = cluster_spec(ctx, adapters, members, draining)
    return build_plan(spec, previous), placements


def build_plan_configmap(ctx: ClusterContext, plan: ClusterPlan) -> dict:
    meta = ctx.metadata(names.plan_configmap(ctx.name), "plan")
    meta["annotations"] = {RING_VERSION_ANNOTATION: str(plan.ring_version)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {PLAN_KEY: plan.to_json()}}
