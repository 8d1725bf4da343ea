"""Rolling upgrades: the operator moves the StatefulSet's partition one shard at a time, and only
when every pod is updated up to it and Ready and fresh probes show no hinted write still waiting
for a peer (replication caught up). A new template holds every pod until then."""

from __future__ import annotations

from themis_operator.builders import ClusterContext
from themis_operator.builders.statefulset import build_statefulset
from themis_operator.reconcile.rollout import Rollout, next_rollout
from themis_operator.status import ShardReport
from themis_testing.validation import load_example


def ctx(**spec) -> ClusterContext:
    body = load_example("themiscluster.yaml")
    body["spec"].update(spec)
    return ClusterContext.from_body(body, "ghcr.io/themisdb/themis-shard:0.2.0")


def existing(
    partition: int, *, updated: int, ready: int = 3, done: bool = False, generation: int = 2
) -> dict:
    sts = build_statefulset(ctx(), 3, partition=partition)
    sts["metadata"]["generation"] = generation
    sts["status"] = {
        "observedGeneration": 2,
        "replicas": 3,
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "currentRevision": "demo-new" if done else "demo-old",
        "updateRevision": "demo-new",
    }
    return sts


def reports(hints: dict[str, int] | None = None, down: tuple[str, ...] = ()) -> dict[str, ShardReport]:
    hints = hints or {}
    return {
        f"demo-{i}": ShardReport(
            id=f"demo-{i}", url="u", reachable=f"demo-{i}" not in down, hintsPending=hints.get(f"demo-{i}", 0)
        )
        for i in range(3)
    }


DESIRED = build_statefulset(ctx(), 3)


def test_a_new_cluster_starts_every_pod_on_the_template():
    assert next_rollout(None, DESIRED, {}, fresh=False) == Rollout(0)


def test_a_changed_template_holds_every_pod_until_the_rollout_steps():
    old = build_statefulset(ClusterContext.from_body(load_example("themiscluster.yaml"), "themis:0.1.0"), 3)
    rollout = next_rollout(old, DESIRED, reports(), fresh=True)
    assert rollout.partition == 3 and "one at a time" in rollout.waiting


def test_the_partition_steps_down_once_the_updated_shards_are_ready_and_caught_up():
    assert next_rollout(existing(3, updated=0), DESIRED, reports(), fresh=True) == Rollout(2)
    assert next_rollout(existing(2, updated=1), DESIRED, reports(), fresh=True) == Rollout(1)
    assert next_rollout(existing(1, updated=2), DESIRED, reports(), fresh=True) == Rollout(0)


def test_the_rollout_waits_for_the_updated_shard_to_be_ready():
    rollout = next_rollout(existing(2, updated=1, ready=2), DESIRED, reports(), fresh=True)
    assert rollout.partition == 2 and "Ready" in rollout.waiting
    rollout = next_rollout(existing(2, updated=0), DESIRED, reports(), fresh=True)  # not rolled yet
    assert rollout.partition == 2


def test_the_rollout_waits_for_hinted_writes_to_reach_the_restarted_shard():
    rollout = next_rollout(existing(2, updated=1), DESIRED, reports({"demo-0": 7}), fresh=True)
    assert rollout == Rollout(2, "waiting for replication catch-up (hinted writes pending on demo-0: 7)")


def test_the_rollout_waits_for_fresh_probes_of_every_shard():
    assert next_rollout(existing(2, updated=1), DESIRED, reports(), fresh=False).partition == 2
    down = next_rollout(existing(2, updated=1), DESIRED, reports(down=("demo-1",)), fresh=True)
    assert down.partition == 2 and "demo-1" in down.waiting


def test_the_rollout_waits_until_the_controller_has_seen_the_spec():
    rollout = next_rollout(existing(2, updated=1, generation=3), DESIRED, reports(), fresh=True)
    assert rollout.partition == 2 and "controller" in rollout.waiting


def test_a_finished_rollout_leaves_the_partition_at_zero():
    assert next_rollout(existing(0, updated=3, done=True), DESIRED, reports(), fresh=True) == Rollout(0)
