"""PodDisruptionBudget sized to what the RAID mode survives.

Voluntary disruptions (drains, upgrades) may take down at most as many shards as the RAID
mode tolerates losing: raid1/raid5 one, raid6 two (the numbers come from the plan module so
the operator and the shards agree on them). raid0 tolerates none, but a budget of 0 would
block every node drain forever, so raid0 gets 1: a drained raid0 shard's keys are unavailable
(not lost: its volume stays) until its pod runs again. That is the raid0 trade-off.
"""

from __future__ import annotations

from themis_core.plan import FAULT_TOLERANCE_BY_RAID_MODE

from .. import names
from .context import ClusterContext


def max_unavailable(raid_mode: str) -> int:
    """Never 0: a budget that allows no disruption blocks all drains (see the module doc)."""
    return max(1, FAULT_TOLERANCE_BY_RAID_MODE[raid_mode])


def build_pdb(ctx: ClusterContext) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": ctx.metadata(names.pdb(ctx.name), "shard"),
        "spec": {
            "maxUnavailable": max_unavailable(ctx.spec.raid_mode),
            "selector": {"matchLabels": names.selector_labels(ctx.name)},
        },
    }
