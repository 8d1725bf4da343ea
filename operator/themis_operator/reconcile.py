"""Reconcile logic: ThemisCluster (+ its LoRAAdapters) + what exists → children and status.

Level-triggered and idempotent: every call recomputes the full desired state from the spec,
the published plan and the shards' last reports, then converges the children with merge
patches. Running it twice, or after an operator restart half-way through, changes nothing
more. Nothing is built for a spec that cannot work (the Degraded condition says why).

Scale-in is coordinated, not performed: the plan marks the leaving shards ``draining`` (still
members, no longer in the ring, so the ring version bumps and they hand their data to the new
owners) and the StatefulSet keeps their pods until every leaving shard reports
``migration.state == "drained"`` for that ring version; then the plan drops them from the
members and the replicas go down.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ValidationError

from . import API_VERSION, names
from .builders import ClusterContext, build_children
from .builders.children import all_child_refs
from .builders.plan import Placement, next_plan, previous_plan
from .builders.tls import ca_material
from .kube import Kube, apply
from .probe import adapter_states, reports_from_status
from .spec import LoRAAdapterSpec
from .status import Condition, ShardReport, condition_status, merge_conditions

#: Annotation that lets scale-in proceed without waiting for leaving shards (dead shards).
FORCE_SCALE_IN = "themisdb.io/force-scale-in"


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass
class Outcome:
    """What a reconcile decided: the status to write and the events to emit."""

    status: dict
    events: list[Event] = field(default_factory=list)
    #: LoRAAdapter name → status patch.
    adapter_statuses: dict[str, dict] = field(default_factory=dict)
    built: bool = False


def _short(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


def cluster_adapters(
    kube: Kube, namespace: str, cluster: str, exclude: Collection[str] = ()
) -> tuple[list[tuple[str, LoRAAdapterSpec]], dict[str, dict], dict[str, str]]:
    """Live adapters referring to ``cluster``: ``(valid specs, bodies, invalid → message)``."""
    valid: list[tuple[str, LoRAAdapterSpec]] = []
    bodies: dict[str, dict] = {}
    invalid: dict[str, str] = {}
    for body in kube.list(API_VERSION, "LoRAAdapter", namespace):
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not name or name in exclude or meta.get("deletionTimestamp"):
            continue
        if ((body.get("spec") or {}).get("clusterRef") or {}).get("name") != cluster:
            continue
        bodies[name] = body
        try:
            valid.append((name, LoRAAdapterSpec.model_validate(body.get("spec") or {})))
        except ValidationError as e:
            invalid[name] = f"invalid spec: {_short(e)}"
    return valid, bodies, invalid


def _drained(report: ShardReport | None, ring_version: int) -> bool:
    """A leaving shard is done once it reports "drained" for this ring (not an older one)."""
    if report is None or report.migration != "drained":
        return False
    return report.migrationRingVersion is None or report.migrationRingVersion >= ring_version


def _degraded(body: dict, reason: str, message: str) -> Outcome:
    """Refuse to build: status says why, existing children are left exactly as they are."""
    meta = body.get("metadata") or {}
    prev = body.get("status") or {}
    events = []
    if condition_status(prev.get("conditions"), "Degraded") != "True" or prev.get("message") != message:
        events.append(Event("Warning", reason, message))
    conditions = merge_conditions(
        prev.get("conditions"),
        [
            Condition(type="Ready", status="False", reason=reason, message=message),
            Condition(
                type="Progressing",
                status="False",
                reason=reason,
                message="nothing is built for an invalid spec",
            ),
            Condition(type="Degraded", status="True", reason=reason, message=message),
        ],
    )
    status = {
        "phase": "Degraded",
        "message": message,
        "conditions": conditions,
        "observedGeneration": meta.get("generation"),
    }
    return Outcome(status={k: v for k, v in status.items() if v is not None}, events=events)


#: What a shard may report for an adapter; anything else is shown as "unknown".
ADAPTER_STATES = ("pending", "loading", "loaded", "failed")


def _adapter_state(entry: dict | None) -> str:
    if entry is None:
        return "pending"
    state = str(entry.get("state") or "unknown").lower()
    return state if state in ADAPTER_STATES else "unknown"


def _adapter_status(placement: Placement, body: dict, reported: list[tuple[str, dict]]) -> dict:
    by_shard = {sid: entry for sid, entry in reported}
    shards = [{"id": sid, "state": _adapter_state(by_shard.get(sid))} for sid in placement.shards]
    loaded = bool(shards) and all(s["state"] == "loaded" for s in shards)
    problems = [f"shards not in the cluster: {', '.join(placement.missing)}"] if placement.missing else []
    problems += list(placement.notes)
    status: dict = {
        "phase": "Loaded" if loaded else ("Placed" if shards else "Pending"),
        "placed": ",".join(placement.shards),
        "placedShards": list(placement.shards),
        "shards": shards,
        "observedGeneration": (body.get("metadata") or {}).get("generation"),
        "message": "; ".join(problems),
    }
    for key, src in (("accuracyDelta", "accuracy_delta"), ("p99DeltaMs", "p99_delta_ms")):
        values = [float(e[src]) for _, e in reported if isinstance(e.get(src), int | float)]
        if values:
            status[key] = sum(values) / len(values)
    status["conditions"] = merge_conditions(
        (body.get("status") or {}).get("conditions"),
        [
            Condition(
                type="Placed",
                status="True" if shards else "False",
                reason="Placed" if shards else "NoShards",
                message=status["message"],
            ),
        ],
    )
    return {k: v for k, v in status.items() if v is not None}


def reconcile_cluster(
    kube: Kube,
    body: dict,
    *,
    reports: dict[str, ShardReport] | None = None,
    exclude_adapters: Collection[str] = (),
) -> Outcome:
    """Converge one ThemisCluster's children; ``reports`` are fresh probe results if any."""
    meta = body.get("metadata") or {}
    prev = body.get("status") or {}
    try:
        ctx = ClusterContext.from_body(body)
    except ValidationError as e:
        return _degraded(body, "InvalidSpec", f"invalid spec: {_short(e)}")
    problems = ctx.spec.problems()
    if len(ctx.name) > names.MAX_CLUSTER_NAME:
        problems.append(f"metadata.name must be at most {names.MAX_CLUSTER_NAME} characters")
    if problems:
        return _degraded(body, "InvalidSpec", "; ".join(problems))

    spec = ctx.spec
    adapters, adapter_bodies, invalid_adapters = cluster_adapters(
        kube, ctx.namespace, ctx.name, exclude_adapters
    )
    configmap = kube.get("v1", "ConfigMap", ctx.namespace, names.plan_configmap(ctx.name))
    previous = previous_plan(configmap)
    sts = kube.get("apps/v1", "StatefulSet", ctx.namespace, names.statefulset(ctx.name))
    current = int(((sts or {}).get("spec") or {}).get("replicas") or 0)
    sts_status = (sts or {}).get("status") or {}
    ready = int(sts_status.get("readyReplicas") or 0)
    # A StatefulSet rolls pod by pod; until every pod runs the new revision we are progressing.
    rolling = bool(sts_status.get("updateRevision")) and (
        sts_status.get("currentRevision") != sts_status.get("updateRevision")
    )
    reports = reports if reports is not None else reports_from_status(prev)

    desired = spec.shards
    leaving = names.shard_ids(ctx.name, current)[desired:]
    forced = (meta.get("annotations") or {}).get(FORCE_SCALE_IN) == "true"
    waiting: list[str] = []
    if leaving and not forced:
        # Hand-off phase: the leaving shards stay members but leave the ring (``draining``).
        plan, placements = next_plan(ctx, adapters, previous, members=current, draining=leaving)
        waiting = [s for s in leaving if not _drained(reports.get(s), plan.ring_version)]
    if not waiting:
        # Steady state, or every leaving shard has handed off: drop them from the members
        # (the ring itself, hence its version, is unchanged by that).
        drained_plan = plan if leaving and not forced else previous
        plan, placements = next_plan(ctx, adapters, drained_plan)
    replicas = current if waiting else desired

    ca = existing_tls = None
    if spec.tls.enabled:
        ca = ca_material(kube.get("v1", "Secret", ctx.namespace, names.ca_secret(ctx.name)), ctx.name)
        existing_tls = kube.get("v1", "Secret", ctx.namespace, names.tls_secret(ctx.name))
    gossip = kube.get("v1", "Secret", ctx.namespace, names.gossip_secret(ctx.name))
    children = build_children(
        ctx, replicas=replicas, plan=plan, ca=ca, existing_tls=existing_tls, existing_gossip=gossip
    )

    events: list[Event] = []
    for obj in children.apply:
        action, _ = apply(kube, obj)
        if obj["kind"] == "StatefulSet":
            if action == "created":
                events.append(Event("Normal", "Created", f"created StatefulSet with {replicas} shards"))
            elif action == "updated" and replicas != current:
                events.append(Event("Normal", "Scaled", f"StatefulSet replicas {current} → {replicas}"))
            elif action == "updated":
                events.append(Event("Normal", "RollingUpdate", "shard pod template changed; rolling update"))
    for ref in children.remove:
        if kube.get(ref.api_version, ref.kind, ctx.namespace, ref.name) is not None:
            kube.delete(ref.api_version, ref.kind, ctx.namespace, ref.name)
            events.append(Event("Normal", "Removed", f"removed {ref.kind} {ref.name} (turned off in spec)"))

    if previous is None:
        events.append(
            Event("Normal", "PlanCreated", f"ring version {plan.ring_version} with {desired} shards")
        )
    elif previous.ring_version != plan.ring_version:
        events.append(
            Event(
                "Normal",
                "RingChanged",
                f"ring version {previous.ring_version} → {plan.ring_version}: "
                f"{len(previous.ring_spec.shards)} → {len(plan.ring_spec.shards)} shards in the ring",
            )
        )
    if waiting and prev.get("phase") != "Scaling":
        events.append(
            Event(
                "Normal",
                "ScaleInWaiting",
                f"waiting for {', '.join(waiting)} to hand off their data before removal",
            )
        )

    member_ids = names.shard_ids(ctx.name, desired)
    unreachable = [s for s in member_ids if s in reports and not reports[s].reachable]
    all_ids = names.shard_ids(ctx.name, max(replicas, desired))
    shards = [
        (
            reports.get(sid)
            or ShardReport(id=sid, url=names.shard_url(ctx.name, ctx.namespace, i, spec.tls.enabled))
        )
        .model_copy(update={"role": "member" if i < desired else "leaving"})
        .summary()
        for i, sid in enumerate(all_ids)
    ]

    if waiting:
        phase, reason, message = (
            "Scaling",
            "ScalingIn",
            f"waiting for {', '.join(waiting)} to hand off their data",
        )
    elif unreachable:
        phase, reason, message = (
            "Degraded",
            "ShardsUnreachable",
            f"unreachable shards: {', '.join(unreachable)}",
        )
    elif ready >= desired and replicas == desired:
        phase, reason, message = "Running", "ShardsReady", f"{ready}/{desired} shards ready"
    else:
        phase, reason, message = "Creating", "ShardsNotReady", f"{ready}/{desired} shards ready"
    if rolling and phase in ("Running", "Creating"):
        updated = int(sts_status.get("updatedReplicas") or 0)
        reason, message = "RollingUpdate", f"rolling update: {updated}/{replicas} shards on the new revision"

    was_degraded = condition_status(prev.get("conditions"), "Degraded") == "True"
    if unreachable and (not was_degraded or prev.get("message") != message):
        events.append(Event("Warning", "ShardsUnreachable", message))
    elif was_degraded and not unreachable:
        events.append(Event("Normal", "Recovered", "the spec is valid and every shard answers again"))
    progressing = bool(waiting) or rolling or ready < desired or replicas != desired
    conditions = merge_conditions(
        prev.get("conditions"),
        [
            Condition(
                type="Ready", status="True" if phase == "Running" else "False", reason=reason, message=message
            ),
            Condition(
                type="Progressing",
                status="True" if progressing else "False",
                reason=reason if progressing else "Stable",
                message=message if progressing else "",
            ),
            Condition(
                type="Degraded",
                status="True" if unreachable else "False",
                reason="ShardsUnreachable" if unreachable else "AsExpected",
                message=message if unreachable else "",
            ),
        ],
    )
    status = {
        "phase": phase,
        "message": message,
        "ready": f"{ready}/{desired}",
        "readyShards": ready,
        "desiredShards": desired,
        "replicas": replicas,
        "ringVersion": plan.ring_version,
        "observedGeneration": meta.get("generation"),
        "conditions": conditions,
        "shards": shards,
    }

    reported = adapter_states(list(reports.values()))
    adapter_statuses = {
        p.adapter: _adapter_status(p, adapter_bodies[p.adapter], reported.get(p.adapter, []))
        for p in placements
    }
    for name, problem in invalid_adapters.items():
        adapter_statuses[name] = {"phase": "Degraded", "message": problem, "placed": "", "placedShards": []}
    return Outcome(
        status={k: v for k, v in status.items() if v is not None},
        events=events,
        adapter_statuses=adapter_statuses,
        built=True,
    )


def delete_children(kube: Kube, namespace: str, cluster: str) -> list[str]:
    """Remove every child explicitly (garbage collection may be absent or slow)."""
    removed = []
    for ref in all_child_refs(cluster):
        if kube.get(ref.api_version, ref.kind, namespace, ref.name) is not None:
            kube.delete(ref.api_version, ref.kind, namespace, ref.name)
            removed.append(f"{ref.kind}/{ref.name}")
    return removed
