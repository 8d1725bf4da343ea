"""PodDisruptionBudget sized to what the RAID mode survives.

Voluntary disruptions (drains, upgrades) may take down at most as many shards as the RAID
mode tolerates losing: raid0 none, raid1/raid5 one, raid6 two. The numbers come from the
plan module so the operator and the shards agree on them.
"""

from __future__ import annotations

from themis_shard.plan import FAULT_TOLERANCE_BY_RAID_MODE

from .. import names
from .context import ClusterContext


def max_unavailable(raid_mode: str) -> int:
    return FAULT_TOLERANCE_BY_RAID_MODE[raid_mode]


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
