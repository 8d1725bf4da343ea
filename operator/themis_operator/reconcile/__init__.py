"""Reconcile one ThemisCluster (and its LoRAAdapters): observe → decide → act → report.

* ``observe`` reads everything once into a typed :class:`Snapshot` (children, adapters, the
  shards' reports);
* ``decide`` is pure: spec + snapshot → a :class:`Decision` (the plan, the replicas, whether
  scale-in still waits for a hand-off, and the create/patch/delete actions);
* ``act`` applies those actions with the kube client, in order;
* ``report`` is pure: what was seen, decided and done → the status patch and events.

Level-triggered and idempotent: running it twice, or after an operator restart half-way
through, changes nothing more. Nothing is built for a spec that cannot work (the Degraded
condition says why).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ..kube import Kube
from ..status import ShardReport, now_iso
from .act import Done, act, delete_children
from .decide import Decision, Invalid, admit, decide
from .observe import FORCE_SCALE_IN, PriorStatus, Snapshot, observe, probe_shards
from .report import Event, Outcome, report, report_invalid

__all__ = [
    "FORCE_SCALE_IN",
    "Decision",
    "Done",
    "Event",
    "Outcome",
    "Snapshot",
    "act",
    "admit",
    "decide",
    "delete_children",
    "observe",
    "probe_shards",
    "reconcile_cluster",
    "report",
]


def reconcile_cluster(
    kube: Kube,
    body: dict,
    *,
    reports: Mapping[str, ShardReport] | None = None,
    exclude_adapters: Collection[str] = (),
    default_image: str | None = None,
) -> Outcome:
    """Converge one ThemisCluster's children; ``reports`` are fresh probe results if any;
    ``default_image`` is the shard image of a spec that pins none."""
    ctx = admit(body, default_image)
    if isinstance(ctx, Invalid):
        generation = (body.get("metadata") or {}).get("generation")
        return report_invalid(PriorStatus.of(body), generation, ctx, now=now_iso())
    snapshot = observe(kube, ctx, body, reports=reports, exclude_adapters=exclude_adapters)
    decision = decide(ctx, snapshot)
    done = act(kube, ctx.namespace, decision.actions)
    return report(ctx, snapshot, decision, done, now=now_iso())
