"""Rolling upgrades one shard at a time, gated on readiness and replication catch-up.

The StatefulSet rolls with ``RollingUpdate`` and a ``partition`` the operator moves: pods with an
ordinal at or above the partition run the new template. When the pod template changes (a new
image, say) the partition goes to ``replicas`` (nothing rolls yet); each later reconcile lowers it
by one only when

* the StatefulSet controller has seen the current spec (``observedGeneration``),
* every pod at or above the partition runs the new revision and every pod is Ready (a shard is
  Ready only after its start-up catch-up has pulled what it missed from its peers), and
* fresh probes of every shard answer and report no hinted writes still waiting for a peer
  (``hints_pending``): the shard that came back holds everything acknowledged while it was away.

So at most one shard is down at a time and the next one goes only once the cluster holds every
write twice again (RAID1: reads of the restarted shard's keys go to the other copy meanwhile).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..kube import desired_patch, is_subset
from ..status import ShardReport


@dataclass(frozen=True)
class Rollout:
    partition: int
    #: Why the rollout waits (None: it is not rolling, or it just stepped).
    waiting: str | None = None


def _partition_of(sts: Mapping) -> int:
    strategy = (sts.get("spec") or {}).get("updateStrategy") or {}
    return int((strategy.get("rollingUpdate") or {}).get("partition") or 0)


def next_rollout(
    existing: Mapping | None,
    desired: Mapping,
    reports: Mapping[str, ShardReport],
    *,
    fresh: bool,
) -> Rollout:
    """The partition the desired StatefulSet gets, from the existing one and the shards' reports."""
    replicas = int(desired["spec"]["replicas"])
    if existing is None:
        return Rollout(0)  # a new cluster: every pod starts on the template
    template = desired_patch(dict(desired))["spec"]["template"]
    if not is_subset(template, (existing.get("spec") or {}).get("template")):
        return Rollout(replicas, "a new pod template: shards roll one at a time, highest ordinal first")
    partition = min(_partition_of(existing), replicas)
    status = existing.get("status") or {}
    updated = int(status.get("updatedReplicas") or 0)
    if partition == 0 or (
        updated >= replicas and status.get("currentRevision") == status.get("updateRevision")
    ):
        return Rollout(0)
    if int(status.get("observedGeneration") or 0) < int(
        (existing.get("metadata") or {}).get("generation") or 0
    ):
        return Rollout(partition, "waiting for the StatefulSet controller")
    if updated < replicas - partition or int(status.get("readyReplicas") or 0) < replicas:
        return Rollout(partition, f"waiting for shards from ordinal {partition} up to be updated and Ready")
    if not fresh:
        return Rollout(partition, "waiting for the next probe of every shard")
    unreachable = sorted(sid for sid, r in reports.items() if not r.reachable)
    if unreachable or len(reports) < replicas:
        return Rollout(
            partition, f"waiting for every shard to answer (unreachable: {', '.join(unreachable)})"
        )
    behind = sorted(f"{sid}: {r.hintsPending}" for sid, r in reports.items() if r.hintsPending)
    if behind:
        return Rollout(
            partition, f"waiting for replication catch-up (hinted writes pending on {', '.join(behind)})"
        )
    return Rollout(partition - 1)
