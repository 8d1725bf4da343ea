"""Report: a reconcile's status, events and adapter statuses, from what it saw and did.

Pure: the clock comes in as ``now`` (conditions keep their ``lastTransitionTime`` while their
status does not change). Events fire on changes only, judged against the prior status, so a
reconcile that changes nothing says nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .. import names
from ..builders import ClusterContext
from ..builders.plan import Placement
from ..probe import adapter_states
from ..status import AdapterReport, Condition, ShardReport, condition_status, merge_conditions
from .act import Done
from .decide import Decision, Invalid
from .observe import ObservedAdapter, PriorStatus, Snapshot, selector


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


def _without_none(status: dict) -> dict:
    return {k: v for k, v in status.items() if v is not None}


def report_invalid(prior: PriorStatus, generation: int | None, invalid: Invalid, *, now: str) -> Outcome:
    """Nothing was built: the status says why (one Warning when that is news)."""
    reason, message = invalid.reason, invalid.message
    events = []
    if condition_status(list(prior.conditions), "Degraded") != "True" or prior.message != message:
        events.append(Event("Warning", reason, message))
    conditions = merge_conditions(
        list(prior.conditions),
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
        now=now,
    )
    status = {
        "phase": "Degraded",
        "message": message,
        "conditions": conditions,
        "observedGeneration": generation,
    }
    return Outcome(status=_without_none(status), events=events)


def _child_events(done: Sequence[Done], replicas: int, current: int) -> list[Event]:
    events = []
    for d in done:
        if d.kind == "StatefulSet" and d.verb == "created":
            events.append(Event("Normal", "Created", f"created StatefulSet with {replicas} shards"))
        elif d.kind == "StatefulSet" and d.verb == "updated" and replicas != current:
            events.append(Event("Normal", "Scaled", f"StatefulSet replicas {current} → {replicas}"))
        elif d.kind == "StatefulSet" and d.verb == "updated":
            events.append(Event("Normal", "RollingUpdate", "shard pod template changed; rolling update"))
        elif d.verb == "removed":
            events.append(Event("Normal", "Removed", f"removed {d.kind} {d.name} (turned off in spec)"))
        elif d.verb == "resized":
            events.append(Event("Normal", "VolumeResized", f"asked {d.kind} {d.name} to grow"))
    return events


def _plan_events(snapshot: Snapshot, decision: Decision, desired: int) -> list[Event]:
    previous, plan = snapshot.previous_plan, decision.plan
    if previous is None:
        return [Event("Normal", "PlanCreated", f"ring version {plan.ring_version} with {desired} shards")]
    if previous.ring_version != plan.ring_version:
        return [
            Event(
                "Normal",
                "RingChanged",
                f"ring version {previous.ring_version} → {plan.ring_version}: "
                f"{len(previous.ring_spec.shards)} → {len(plan.ring_spec.shards)} shards in the ring",
            )
        ]
    return []


def report(
    ctx: ClusterContext, snapshot: Snapshot, decision: Decision, done: Sequence[Done], *, now: str
) -> Outcome:
    spec, prior, sts, reports = ctx.spec, snapshot.prior, snapshot.statefulset, snapshot.reports
    desired, replicas, waiting = spec.shards, decision.replicas, decision.waiting
    events = _child_events(done, replicas, sts.replicas) + _plan_events(snapshot, decision, desired)
    if waiting and prior.phase != "Scaling":
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

    ready = sts.ready
    failing = snapshot.pod_problems
    degraded_reason = ""
    if failing:
        degraded_reason = "ModelUnavailable" if any(p.bad_source for p in failing) else "ShardsFailing"
    elif unreachable:
        degraded_reason = "ShardsUnreachable"
    degraded_message = (
        "; ".join(p.line() for p in failing) if failing else f"unreachable shards: {', '.join(unreachable)}"
    )
    storage_refusals = [*decision.refusals, *(d.message for d in done if d.verb == "refused")]
    if storage_refusals and not degraded_reason:
        degraded_reason, degraded_message = "StorageResizeRefused", "; ".join(storage_refusals)
    if waiting:
        phase, reason, message = (
            "Scaling",
            "ScalingIn",
            f"waiting for {', '.join(waiting)} to hand off their data",
        )
    elif degraded_reason:
        phase, reason, message = "Degraded", degraded_reason, degraded_message
    elif ready >= desired and replicas == desired:
        phase, reason, message = "Running", "ShardsReady", f"{ready}/{desired} shards ready"
    else:
        phase, reason, message = "Creating", "ShardsNotReady", f"{ready}/{desired} shards ready"
    if sts.rolling and phase in ("Running", "Creating"):
        reason, message = (
            "RollingUpdate",
            f"rolling update: {sts.updated}/{replicas} shards on the new revision"
            + (f"; {decision.rollout_waiting}" if decision.rollout_waiting else ""),
        )

    was_degraded = condition_status(list(prior.conditions), "Degraded") == "True"
    if degraded_reason and (not was_degraded or prior.message != degraded_message):
        events.append(Event("Warning", degraded_reason, degraded_message))
    elif was_degraded and not degraded_reason:
        events.append(Event("Normal", "Recovered", "the spec is valid and every shard answers again"))
    progressing = bool(waiting) or sts.rolling or ready < desired or replicas != desired
    conditions = merge_conditions(
        list(prior.conditions),
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
                status="True" if degraded_reason else "False",
                reason=degraded_reason or "AsExpected",
                message=degraded_message if degraded_reason else "",
            ),
        ],
        now=now,
    )
    status = {
        "phase": phase,
        "message": message,
        "ready": f"{ready}/{desired}",
        "readyShards": ready,
        "desiredShards": desired,
        "replicas": replicas,
        # The scale subresource's labelSelectorPath (HPAs count pods with it).
        "selector": selector(ctx.name),
        "ringVersion": decision.plan.ring_version,
        # The ring itself, so versions carry on if the plan ConfigMap is deleted.
        "ring": decision.plan.ring,
        "observedGeneration": snapshot.generation,
        "conditions": conditions,
        "shards": shards,
    }
    return Outcome(
        status=_without_none(status),
        events=events,
        adapter_statuses=adapter_statuses(snapshot, decision.placements, now=now),
        built=True,
    )


def _shard_entry(sid: str, entry: AdapterReport | None) -> dict:
    if entry is None:
        return {"id": sid, "state": "pending"}
    out: dict = {"id": sid, "state": entry.state}
    if entry.message:
        out["message"] = entry.message
    if entry.accuracy_delta is not None:
        out["accuracyDelta"] = entry.accuracy_delta
    return out


def adapter_status(
    placement: Placement, adapter: ObservedAdapter, reported: list[tuple[str, AdapterReport]], *, now: str
) -> dict:
    """One LoRAAdapter's status: where it is placed and what those shards say about it.

    A shard that failed to load it (a wrong sha256, a download that failed) makes the adapter
    Degraded with the shard's reason; ``loaded`` ("1/2") is the printer column.
    """
    by_shard = {sid: entry for sid, entry in reported}
    shards = [_shard_entry(sid, by_shard.get(sid)) for sid in placement.shards]
    n_loaded = sum(s["state"] == "loaded" for s in shards)
    failed = [f"{s['id']}: {s.get('message') or 'load failed'}" for s in shards if s["state"] == "failed"]
    problems = [f"shards not in the cluster: {', '.join(placement.missing)}"] if placement.missing else []
    problems += list(placement.notes)
    if failed:
        phase = "Degraded"
    elif shards and n_loaded == len(shards):
        phase = "Loaded"
    else:
        phase = "Placed" if shards else "Pending"
    status: dict = {
        "phase": phase,
        "placed": ",".join(placement.shards),
        "placedShards": list(placement.shards),
        "loaded": f"{n_loaded}/{len(shards)}",
        "shards": shards,
        "observedGeneration": adapter.generation,
        "message": "; ".join(failed + problems),
    }
    on_placed = [e for sid, e in reported if sid in placement.shards]
    for key, src in (("accuracyDelta", "accuracy_delta"), ("p99DeltaMs", "p99_delta_ms")):
        values = [float(v) for e in on_placed if (v := getattr(e, src)) is not None]
        if values:
            status[key] = sum(values) / len(values)
    status["conditions"] = merge_conditions(
        list(adapter.conditions),
        [
            Condition(
                type="Placed",
                status="True" if shards else "False",
                reason="Placed" if shards else "NoShards",
                message="; ".join(problems),
            ),
            Condition(
                type="Loaded",
                status="True" if phase == "Loaded" else "False",
                reason="LoadFailed" if failed else ("Loaded" if phase == "Loaded" else "Loading"),
                message="; ".join(failed) or f"loaded on {n_loaded}/{len(shards)} placed shards",
            ),
        ],
        now=now,
    )
    return _without_none(status)


def adapter_statuses(snapshot: Snapshot, placements: Sequence[Placement], *, now: str) -> dict[str, dict]:
    reported = adapter_states(list(snapshot.reports.values()))
    by_name = {a.name: a for a in snapshot.adapters}
    statuses = {
        p.adapter: adapter_status(p, by_name[p.adapter], reported.get(p.adapter, []), now=now)
        for p in placements
    }
    for name, problem in snapshot.invalid_adapters.items():
        statuses[name] = {
            "phase": "Degraded",
            "message": problem,
            "placed": "",
            "placedShards": [],
            "loaded": "0/0",
        }
    return statuses
