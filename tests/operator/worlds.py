"""Hand-made snapshots for the pure halves of a reconcile (decide, report): no API, no kopf."""

from __future__ import annotations

import dataclasses

from themis_operator.builders import ClusterContext
from themis_operator.builders.children import Ref, all_child_refs
from themis_operator.builders.plan import previous_plan
from themis_operator.reconcile.decide import Create, Decision, Delete, Patch
from themis_operator.reconcile.observe import ObservedAdapter, Snapshot, StatefulSetState
from themis_operator.spec import LoRAAdapterSpec, ThemisClusterSpec
from themis_operator.status import ShardReport

NAME, NS = "demo", "default"
STS = Ref("apps/v1", "StatefulSet", NAME)
PLAN = Ref("v1", "ConfigMap", f"{NAME}-plan")
SERVICE_MONITOR = Ref("monitoring.coreos.com/v1", "ServiceMonitor", NAME)


def context(**spec) -> ClusterContext:
    """A raid5 cluster of three shards; TLS off unless asked for (certificates are slow to mint)."""
    full = {"shards": 3, "raidMode": "raid5", "tls": {"enabled": False}, **spec}
    return ClusterContext(NAME, NS, "uid-1", ThemisClusterSpec.model_validate(full))


def empty(**fields) -> Snapshot:
    """Nothing exists yet: the first reconcile of a new cluster."""
    return Snapshot(children={ref: None for ref in all_child_refs(NAME)}, **fields)


def after(snapshot: Snapshot, decision: Decision, *, ready: int | None = None, **fields) -> Snapshot:
    """The next snapshot once ``decision`` was applied (and ``ready`` pods, when given, run)."""
    children = dict(snapshot.children)
    for action in decision.actions:
        match action:
            case Create(obj=obj) | Patch(obj=obj):
                children[Ref(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])] = obj
            case Delete(ref=ref):
                children[ref] = None
    sts = StatefulSetState.of(children[STS])
    if ready is not None:
        sts = dataclasses.replace(sts, ready=ready)
    return dataclasses.replace(
        snapshot,
        children=children,
        statefulset=sts,
        previous_plan=previous_plan(children[PLAN]),
        **fields,
    )


def kinds(decision: Decision) -> list[tuple[str, str, str]]:
    """``(action, kind, name)`` for every action, in order."""
    out = []
    for action in decision.actions:
        match action:
            case Create(obj=obj) | Patch(obj=obj):
                out.append((type(action).__name__, obj["kind"], obj["metadata"]["name"]))
            case Delete(ref=ref):
                out.append(("Delete", ref.kind, ref.name))
    return out


def reports(*, migration: dict[str, str] | None = None, ring_version: int = 2, down=(), shards=5):
    """Reachable shards ``demo-0..``; ``migration`` overrides a shard's state, ``down`` ones fail."""
    migration = migration or {}
    return {
        f"demo-{i}": ShardReport(
            id=f"demo-{i}",
            url="u",
            reachable=f"demo-{i}" not in down,
            state="up",
            ringVersion=ring_version,
            migration=migration.get(f"demo-{i}", "idle"),
            migrationRingVersion=ring_version,
        )
        for i in range(shards)
    }


def adapter(name: str = "legal", replicas: int = 2, **spec) -> ObservedAdapter:
    full = {"clusterRef": {"name": NAME}, "domain": name, "source": f"pvc://loras/{name}", **spec}
    full.setdefault("placement", {"replicas": replicas})
    return ObservedAdapter(name, LoRAAdapterSpec.model_validate(full), generation=1)
