"""Token-aware routing in the Python client: ``KeyRouter`` rebuilt from a shard's
``/v1/cluster/status`` names exactly the owners the shards' own ring names, so a request sent
to ``primary_url`` takes no forwarding hop."""

from __future__ import annotations

import pytest
from themis_client import ClusterStatus, KeyRouter
from themis_core.plan import ClusterSpec, Member, build_plan
from themis_shard.cluster.placement.owners import Topology


@pytest.mark.parametrize(("shards", "raid", "seed"), [(3, "raid1", 0), (5, "raid6", 12345)])
def test_the_client_names_the_same_owners_as_the_shards(shards: int, raid: str, seed: int) -> None:
    members = tuple(Member(shard_id=f"shard-{i}", url=f"http://10.0.0.{i}:8701") for i in range(shards))
    plan = build_plan(ClusterSpec(name="t", members=members, raid_mode=raid, ring_seed=seed))
    topo = Topology.of(plan, "shard-0")
    status = ClusterStatus.model_validate(
        {
            "ring": plan.ring_spec.to_dict(),
            "copies": plan.copies,
            "members": [{"shard_id": m.shard_id, "url": m.url} for m in members],
        }
    )
    router = KeyRouter.from_status(status)
    for i in range(300):
        key = f"k{i}"
        assert router.owners("books", key, plan.copies) == topo.owners("books", key)
        assert router.primary_url("books", key) == plan.member(topo.owners("books", key)[0]).url


def test_a_status_without_a_ring_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no ring"):
        KeyRouter.from_status(ClusterStatus.model_validate({"members": []}))
