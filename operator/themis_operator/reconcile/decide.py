"""Decide: from the spec and a snapshot to what must change, with no I/O.

Level-triggered: the full desired state is recomputed every time (children, the plan and its
ring version, the StatefulSet's replicas), then compared with what the snapshot saw, so the
actions are only the differences. The one thing that is not a function of the inputs is key
material that does not exist yet (a new CA, certificates for new shards, the gossip key): the
builders mint it, and it is reused from the snapshot ever after.

Scale-in is coordinated, not performed: the plan marks the leaving shards ``draining`` (still
members, no longer in the ring, so the ring version bumps and they hand their data to the new
owners) and the StatefulSet keeps their pods until every leaving shard reports
``migration.state == "drained"`` for that ring version; then the plan drops them from the
members and the replicas go down.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from themis_core.plan import ClusterPlan

from .. import names
from ..builders import ClusterContext, build_children
from ..builders.children import Ref
from ..builders.plan import PLAN_KEY, Placement, next_plan, recovered_previous
from ..builders.statefulset import adapter_location, build_statefulset, env_conflicts
from ..builders.tls import ca_material
from ..kube import desired_patch, is_subset
from ..spec import error_text
from ..status import ShardReport
from .observe import Snapshot
from .rollout import next_rollout
from .volumes import Resize, plan_resizes


@dataclass(frozen=True)
class Invalid:
    """A spec nothing can be built for; existing children are left exactly as they are."""

    reason: str
    message: str


@dataclass(frozen=True)
class Create:
    obj: dict


@dataclass(frozen=True)
class Patch:
    """Converge an existing object: ``patch`` is the merge patch that makes it ``obj``."""

    obj: dict
    patch: dict


@dataclass(frozen=True)
class Delete:
    """Remove a child the spec turned off (TLS, ServiceMonitor)."""

    ref: Ref


Action = Create | Patch | Delete | Resize


@dataclass(frozen=True)
class Decision:
    #: StatefulSet replicas: the current count while leaving shards still hand off.
    replicas: int
    plan: ClusterPlan
    placements: tuple[Placement, ...]
    #: Leaving shards that have not reported "drained" for this ring yet: scale-in waits.
    waiting: tuple[str, ...]
    #: In the order they must be applied (Secrets and the plan before the StatefulSet).
    actions: tuple[Action, ...]
    #: Spec changes refused by name (a storage size below the volumes'): reported as Degraded.
    refusals: tuple[str, ...] = ()
    #: Why a rolling upgrade waits before its next shard (None: not rolling, or stepping).
    rollout_waiting: str | None = None


def admit(body: dict, default_image: str | None = None) -> ClusterContext | Invalid:
    """The cluster's typed context, or why its spec cannot be built."""
    try:
        ctx = ClusterContext.from_body(body, default_image)
    except ValidationError as e:
        return Invalid("InvalidSpec", f"invalid spec: {error_text(e)}")
    problems = ctx.spec.problems() + env_conflicts(ctx)
    if len(ctx.name) > names.MAX_CLUSTER_NAME:
        problems.append(f"metadata.name must be at most {names.MAX_CLUSTER_NAME} characters")
    return Invalid("InvalidSpec", "; ".join(problems)) if problems else ctx


def ref_of(obj: dict) -> Ref:
    return Ref(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


def change(desired: dict, existing: dict | None) -> Create | Patch | None:
    """What converges ``existing`` to ``desired``; None when it already is."""
    if existing is None:
        return Create(desired)
    patch = desired_patch(desired)
    return None if is_subset(patch, existing) else Patch(desired, patch)


def guarded(action: Create | Patch, existing: dict | None) -> Create | Patch:
    """The plan ConfigMap is written only over the version this reconcile read: the plan
    authority changes its in-sync set between reconciles, and a plan built from an older copy
    must fail (409, decided again) rather than undo a failover."""
    if not isinstance(action, Patch) or existing is None or action.obj["kind"] != "ConfigMap":
        return action
    if (action.obj.get("data") or {}).get(PLAN_KEY) is None:
        return action
    version = existing["metadata"].get("resourceVersion")
    patch = {**action.patch, "metadata": {**action.patch.get("metadata", {}), "resourceVersion": version}}
    return Patch(action.obj, patch)


def drained(report: ShardReport | None, ring_version: int) -> bool:
    """A leaving shard is done once it reports "drained" for this ring (not an older one)."""
    if report is None or report.migration != "drained":
        return False
    return report.migrationRingVersion is None or report.migrationRingVersion >= ring_version


def membership(
    ctx: ClusterContext, snapshot: Snapshot
) -> tuple[int, ClusterPlan, list[Placement], list[str]]:
    """``(replicas, plan, placements, waiting)``: the scale-in hand-off, step by step."""
    adapters = [(a.name, a.spec) for a in snapshot.adapters]
    previous = snapshot.previous_plan or recovered_previous(ctx, snapshot.prior.ring)
    desired = ctx.spec.shards
    current = snapshot.statefulset.replicas
    leaving = names.shard_ids(ctx.name, current)[desired:]
    handing_off = bool(leaving) and not snapshot.force_scale_in
    waiting: list[str] = []
    if handing_off:
        # Hand-off phase: the leaving shards stay members but leave the ring (``draining``).
        plan, placements = next_plan(ctx, adapters, previous, members=current, draining=leaving)
        waiting = [s for s in leaving if not drained(snapshot.reports.get(s), plan.ring_version)]
    if not waiting:
        # Steady state, or every leaving shard has handed off: drop them from the members
        # (the ring itself, hence its version, is unchanged by that).
        plan, placements = next_plan(ctx, adapters, plan if handing_off else previous)
    return (current if waiting else desired), plan, placements, waiting


def decide(ctx: ClusterContext, snapshot: Snapshot) -> Decision:
    replicas, plan, placements, waiting = membership(ctx, snapshot)
    ca = existing_tls = None
    if ctx.spec.tls.enabled:
        ca = ca_material(snapshot.child(Ref("v1", "Secret", names.ca_secret(ctx.name))), ctx.name)
        existing_tls = snapshot.child(Ref("v1", "Secret", names.tls_secret(ctx.name)))
    claims = [c for a in snapshot.adapters if (c := adapter_location(a.spec.source)[0])]
    rollout = next_rollout(
        snapshot.child(Ref("apps/v1", "StatefulSet", names.statefulset(ctx.name))),
        build_statefulset(ctx, replicas, claims),
        snapshot.reports,
        fresh=snapshot.fresh_reports,
    )
    children = build_children(
        ctx,
        replicas=replicas,
        plan=plan,
        ca=ca,
        existing_tls=existing_tls,
        existing_gossip=snapshot.child(Ref("v1", "Secret", names.gossip_secret(ctx.name))),
        adapter_claims=claims,
        existing_api_keys=snapshot.child(Ref("v1", "Secret", names.api_keys_secret(ctx.name))),
        partition=rollout.partition,
    )
    actions: list[Action] = [
        guarded(a, snapshot.child(ref_of(obj)))
        for obj in children.apply
        if (a := change(obj, snapshot.child(ref_of(obj))))
    ]
    actions += [Delete(ref) for ref in children.remove if snapshot.child(ref) is not None]
    resizes, refusals = plan_resizes(ctx.name, ctx.spec.storage, snapshot.claims)
    return Decision(
        replicas=replicas,
        plan=plan,
        placements=tuple(placements),
        waiting=tuple(waiting),
        actions=(*actions, *resizes),
        refusals=tuple(refusals),
        rollout_waiting=rollout.waiting,
    )
