"""Reconcile behaviour against an in-memory API: create, update, scale, adapters, bad specs."""

import copy

import pytest
from themis_operator.reconcile import FORCE_SCALE_IN, delete_children, reconcile_cluster
from themis_operator.status import AdapterReport, ShardReport
from themis_testing.fakekube import FakeKube
from themis_testing.validation import load_example

from .conftest import NS, cluster, plan_of


def update(kube: FakeKube, body: dict, status: dict | None = None, **spec) -> dict:
    patch = {"spec": spec}
    if status is not None:
        patch["status"] = status
    return kube.patch("themisdb.io/v1alpha1", "ThemisCluster", NS, body["metadata"]["name"], patch)


def replicas(kube: FakeKube, name="demo") -> int:
    return kube.get("apps/v1", "StatefulSet", NS, name)["spec"]["replicas"]


def reasons(outcome) -> list[str]:
    return [e.reason for e in outcome.events]


def test_create_builds_every_child_and_reports_progress(kube):
    outcome = reconcile_cluster(kube, cluster(kube))
    assert kube.kinds() == [
        ("ConfigMap", "demo-plan"),
        ("PodDisruptionBudget", "demo"),
        ("Secret", "demo-api-keys"),
        ("Secret", "demo-ca"),
        ("Secret", "demo-gossip"),
        ("Secret", "demo-tls"),
        ("Service", "demo"),
        ("Service", "demo-headless"),
        ("StatefulSet", "demo"),
        ("ThemisCluster", "demo"),
    ]
    assert outcome.status["phase"] == "Creating"
    assert outcome.status["ready"] == "0/3" and outcome.status["ringVersion"] == 1
    assert outcome.status["observedGeneration"] == 1
    conditions = {c["type"]: c["status"] for c in outcome.status["conditions"]}
    assert conditions == {"Ready": "False", "Progressing": "True", "Degraded": "False"}
    assert {"Created", "PlanCreated"} <= set(reasons(outcome))
    owner = kube.get("apps/v1", "StatefulSet", NS, "demo")["metadata"]["ownerReferences"][0]
    assert owner["uid"] == kube.get("themisdb.io/v1alpha1", "ThemisCluster", NS, "demo")["metadata"]["uid"]


def test_reconciling_again_writes_nothing(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    before = len(kube.writes)
    outcome = reconcile_cluster(kube, body)
    assert kube.writes[before:] == []
    assert outcome.events == []


def test_any_spec_change_rolls_through_the_statefulset_without_a_ring_change(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    body = update(kube, body, image="themis:2", engine={"nDraft": 4})
    outcome = reconcile_cluster(kube, body)
    container = kube.get("apps/v1", "StatefulSet", NS, "demo")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "themis:2"
    assert {"name": "THEMIS_LLM_N_DRAFT", "value": "4"} in container["env"]
    assert "RollingUpdate" in reasons(outcome)
    assert plan_of(kube).ring_version == 1


def test_router_settings_reach_the_plan_without_a_ring_change(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    reconcile_cluster(kube, update(kube, body, router={"gamma": 0.25, "thresholds": [0.9, 0.5, 0.1]}))
    plan = plan_of(kube)
    assert plan.router.gamma == 0.25 and plan.router.thresholds == (0.9, 0.5, 0.1)
    assert plan.ring_version == 1


def test_scale_out_bumps_the_ring_version_and_issues_certificates(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    outcome = reconcile_cluster(kube, update(kube, body, shards=5))
    assert replicas(kube) == 5
    assert plan_of(kube).ring_version == 2
    assert [m.shard_id for m in plan_of(kube).members][-1] == "demo-4"
    assert "demo-4.crt" in kube.get("v1", "Secret", NS, "demo-tls")["data"]
    assert {"Scaled", "RingChanged"} <= set(reasons(outcome))


def test_ring_versions_carry_on_from_the_status_when_the_plan_configmap_is_deleted(kube):
    body = cluster(kube)
    first = reconcile_cluster(kube, body)
    grown = reconcile_cluster(kube, body := update(kube, body, status=first.status, shards=4))
    assert plan_of(kube).ring_version == 2 and plan_of(kube).cluster_uid == body["metadata"]["uid"]
    body = update(kube, body, status=grown.status)
    kube.delete("v1", "ConfigMap", NS, "demo-plan")
    again = reconcile_cluster(kube, body)
    assert plan_of(kube).ring_version == 2 and again.status["ringVersion"] == 2  # same ring, same version
    kube.delete("v1", "ConfigMap", NS, "demo-plan")
    reconcile_cluster(kube, update(kube, body, status=again.status, shards=5))
    recovered = plan_of(kube)
    assert recovered.ring_version == 3  # another ring: the next version, never 1
    assert recovered.previous_ring["shards"] == ["demo-0", "demo-1", "demo-2", "demo-3"]


def test_the_status_carries_the_scale_subresource_fields(kube):
    status = reconcile_cluster(kube, cluster(kube)).status
    assert status["replicas"] == 3
    assert status["selector"] == "app.kubernetes.io/name=themis,app.kubernetes.io/instance=demo"


def test_scale_in_waits_for_leaving_shards_to_hand_off_their_data(kube):
    body = cluster(kube, shards=5)
    reconcile_cluster(kube, body)
    body = update(kube, body, shards=3)
    outcome = reconcile_cluster(kube, body)
    # The ring drops the leaving shards at once (they hand off); they stay members, pods stay.
    draining = plan_of(kube)
    assert draining.ring_spec.shards == ("demo-0", "demo-1", "demo-2") and draining.ring_version == 2
    assert draining.draining == ("demo-3", "demo-4") and len(draining.members) == 5
    assert replicas(kube) == 5
    assert outcome.status["phase"] == "Scaling"
    assert "ScaleInWaiting" in reasons(outcome)
    roles = {s["id"]: s["role"] for s in outcome.status["shards"]}
    assert roles["demo-3"] == roles["demo-4"] == "leaving"

    def reports(migration_3, migration_4, version=2):
        return {
            sid: ShardReport(
                id=sid,
                url="u",
                reachable=True,
                state="up",
                ringVersion=2,
                migration=m,
                migrationRingVersion=version,
            )
            for sid, m in [
                ("demo-0", "idle"),
                ("demo-1", "idle"),
                ("demo-2", "idle"),
                ("demo-3", migration_3),
                ("demo-4", migration_4),
            ]
        }

    reconcile_cluster(kube, body, reports=reports("drained", "migrating"))
    assert replicas(kube) == 5
    reconcile_cluster(kube, body, reports=reports("drained", "drained", version=1))  # an older hand-off
    assert replicas(kube) == 5
    outcome = reconcile_cluster(kube, body, reports=reports("drained", "drained"))
    assert replicas(kube) == 3
    final = plan_of(kube)
    assert [m.shard_id for m in final.members] == ["demo-0", "demo-1", "demo-2"] and final.draining == ()
    assert final.ring_version == 2  # same ring: no second resharding
    assert "Scaled" in reasons(outcome) and "RingChanged" not in reasons(outcome)


def test_force_annotation_scales_in_without_waiting(kube):
    body = cluster(kube, shards=5)
    reconcile_cluster(kube, body)
    body = update(kube, body, shards=3)
    body["metadata"]["annotations"] = {FORCE_SCALE_IN: "true"}
    reconcile_cluster(kube, body)
    assert replicas(kube) == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"raidMode": "raid5", "shards": 2}, "raid5 needs at least 3 shards"),
        ({"raidMode": "raid6", "shards": 3}, "raid6 needs at least 4 shards"),
        ({"model": {"source": "s3://bucket/model.gguf"}}, "is not a known model source"),
        ({"router": {"thresholds": [0.2, 0.6, 0.4]}}, "thresholds must be descending"),
        ({"shards": "many"}, "invalid spec: shards"),
    ],
)
def test_semantically_invalid_specs_are_degraded_and_build_nothing(kube, spec, message):
    outcome = reconcile_cluster(kube, cluster(kube, **spec))
    assert kube.kinds() == [("ThemisCluster", "demo")]
    assert outcome.status["phase"] == "Degraded"
    degraded = next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and message in degraded["message"]
    assert [e.type for e in outcome.events] == ["Warning"]


def test_an_invalid_update_leaves_the_running_children_untouched(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    snapshot = copy.deepcopy(kube.objects)
    outcome = reconcile_cluster(kube, update(kube, body, shards=2))  # raid5 with 2 shards
    assert outcome.status["phase"] == "Degraded"
    children = {k: v for k, v in kube.objects.items() if k[1] != "ThemisCluster"}
    assert children == {k: v for k, v in snapshot.items() if k[1] != "ThemisCluster"}


def test_a_reconcile_interrupted_half_way_converges_on_restart(kube):
    body = cluster(kube)

    class Crash(Exception):
        pass

    real_create = kube.create

    def crashing_create(obj):
        if obj["kind"] == "StatefulSet":
            raise Crash
        return real_create(obj)

    kube.create = crashing_create
    with pytest.raises(Crash):
        reconcile_cluster(kube, body)
    ca_before = kube.get("v1", "Secret", NS, "demo-ca")["data"]
    kube.create = real_create
    reconcile_cluster(kube, body)
    assert ("StatefulSet", "demo") in kube.kinds()
    assert kube.get("v1", "Secret", NS, "demo-ca")["data"] == ca_before  # same CA: certs stay valid
    before = len(kube.writes)
    reconcile_cluster(kube, body)
    assert kube.writes[before:] == []


def test_turning_monitoring_on_and_off_converges_both_ways(kube):
    body = cluster(kube, monitoring={"serviceMonitor": True})
    reconcile_cluster(kube, body)
    assert ("ServiceMonitor", "demo") in kube.kinds()
    reconcile_cluster(kube, update(kube, body, monitoring={"serviceMonitor": False}))
    assert ("ServiceMonitor", "demo") not in kube.kinds()


def test_lora_adapters_are_placed_in_the_plan_and_their_status(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    kube.add(load_example("loraadapter.yaml"))
    other = load_example("loraadapter.yaml")
    other["metadata"]["name"] = "elsewhere"
    other["spec"]["clusterRef"]["name"] = "another-cluster"
    kube.add(other)
    outcome = reconcile_cluster(kube, body)
    (placement,) = plan_of(kube).adapters
    assert placement.name == "legal" and placement.domain == "legal" and len(placement.shards) == 2
    assert plan_of(kube).ring_version == 1
    status = outcome.adapter_statuses["legal"]
    assert status["placedShards"] == list(placement.shards) and status["phase"] == "Placed"
    assert [s["state"] for s in status["shards"]] == ["pending", "pending"]
    assert "elsewhere" not in outcome.adapter_statuses
    reconcile_cluster(kube, body, exclude_adapters=["legal"])
    assert plan_of(kube).adapters == ()


def test_adapter_status_reflects_what_shards_report(kube):
    body = cluster(kube)
    kube.add(load_example("loraadapter.yaml"))
    outcome = reconcile_cluster(kube, body)
    placed = outcome.adapter_statuses["legal"]["placedShards"]
    reports = {
        sid: ShardReport(
            id=sid,
            url="u",
            reachable=True,
            adapters=(AdapterReport(name="legal", state="loaded", accuracy_delta=0.04, p99_delta_ms=12.0),)
            if sid in placed
            else (),
        )
        for sid in ("demo-0", "demo-1", "demo-2")
    }
    status = reconcile_cluster(kube, body, reports=reports).adapter_statuses["legal"]
    assert status["phase"] == "Loaded"
    assert status["accuracyDelta"] == pytest.approx(0.04) and status["p99DeltaMs"] == pytest.approx(12.0)


def test_unreachable_shards_make_the_cluster_degraded_and_recovery_clears_it(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    down = {f"demo-{i}": ShardReport(id=f"demo-{i}", url="u", reachable=i != 1) for i in range(3)}
    outcome = reconcile_cluster(kube, body, reports=down)
    assert outcome.status["phase"] == "Degraded"
    assert "demo-1" in outcome.status["message"]
    assert ("Warning", "ShardsUnreachable") in [(e.type, e.reason) for e in outcome.events]
    body = update(kube, body, status=outcome.status)
    kube.patch("apps/v1", "StatefulSet", NS, "demo", {"status": {"readyReplicas": 3}})
    up = {f"demo-{i}": ShardReport(id=f"demo-{i}", url="u", reachable=True, state="up") for i in range(3)}
    outcome = reconcile_cluster(kube, body, reports=up)
    assert outcome.status["phase"] == "Running" and outcome.status["ready"] == "3/3"
    assert "Recovered" in reasons(outcome)
    conditions = {c["type"]: c["status"] for c in outcome.status["conditions"]}
    assert conditions == {"Ready": "True", "Progressing": "False", "Degraded": "False"}


def test_delete_removes_every_child_explicitly(kube):
    body = cluster(kube, monitoring={"serviceMonitor": True})
    reconcile_cluster(kube, body)
    removed = delete_children(kube, NS, "demo")
    assert len(removed) == 10
    assert kube.kinds() == [("ThemisCluster", "demo")]


def test_a_rolling_statefulset_keeps_the_cluster_progressing(kube):
    body = cluster(kube)
    reconcile_cluster(kube, body)
    rolling = {"readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "b"}
    kube.patch("apps/v1", "StatefulSet", NS, "demo", {"status": rolling})
    outcome = reconcile_cluster(kube, body)
    progressing = next(c for c in outcome.status["conditions"] if c["type"] == "Progressing")
    assert progressing["status"] == "True" and progressing["reason"] == "RollingUpdate"
    assert "1/3" in progressing["message"]
    assert outcome.status["phase"] == "Running"  # still serving: every shard is ready
