"""Day-2 loose ends of the operator, each a field honoured or refused by name:

* the ServiceMonitor names its job ``themis`` (what every dashboard and alert selects);
* the CRD stores no default image: an unpinned cluster runs the operator's own version;
* ``spec.storage`` sizes grow the shards' claims, and a shrink or a refused expansion is a
  Degraded condition naming the field;
* ``spec.env`` and ``spec.logging`` reach the shards, and an env var the operator sets is refused.
"""

from __future__ import annotations

import pytest
from themis_operator.builders import ClusterContext
from themis_operator.builders.monitoring import build_service_monitor
from themis_operator.builders.statefulset import build_statefulset
from themis_operator.images import default_shard_image, operator_version
from themis_operator.kube import KubeError
from themis_operator.reconcile import reconcile_cluster
from themis_operator.reconcile.decide import Invalid, admit
from themis_operator.reconcile.volumes import plan_resizes, quantity_bytes
from themis_operator.settings import OperatorSettings
from themis_operator.spec import StorageSpec
from themis_testing.fakekube import FakeKube
from themis_testing.validation import custom_resource_errors, load_crds, load_example

NS = "default"


def ctx(**spec) -> ClusterContext:
    body = load_example("themiscluster.yaml")
    body["spec"].update(spec)
    return ClusterContext.from_body(body)


def container(sts: dict) -> dict:
    return sts["spec"]["template"]["spec"]["containers"][0]


def env_of(sts: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(sts)["env"]}


# ---- ServiceMonitor ------------------------------------------------------------------------------
def test_service_monitor_names_the_job_after_the_app_label_themis():
    sm = build_service_monitor(ctx(monitoring={"serviceMonitor": True}))
    label = sm["spec"]["jobLabel"]
    assert label == "app.kubernetes.io/name"
    # the value of that label on the client Service it selects is the job name
    assert sm["spec"]["selector"]["matchLabels"][label] == "themis"


# ---- image ---------------------------------------------------------------------------------------
def test_the_crd_stores_no_default_image():
    spec = load_crds()["ThemisCluster"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]
    assert "default" not in spec["properties"]["image"]


def test_an_unpinned_cluster_runs_the_shard_image_of_the_operators_version():
    assert default_shard_image() == f"ghcr.io/themisdb/themis-shard:{operator_version()}"
    assert container(build_statefulset(ctx(), 3))["image"] == default_shard_image()
    assert default_shard_image(version="9.9.9").endswith(":9.9.9")


def test_a_pinned_image_wins_and_the_operators_setting_replaces_the_default(monkeypatch):
    assert container(build_statefulset(ctx(image="mirror/themis:1.2.3"), 3))["image"] == "mirror/themis:1.2.3"
    monkeypatch.setenv("THEMIS_OPERATOR_SHARD_IMAGE", "mirror.local/themis-shard:7")
    default = OperatorSettings().default_shard_image
    body = load_example("themiscluster.yaml")
    assert container(build_statefulset(ClusterContext.from_body(body, default), 3))["image"] == default


def test_upgrading_the_operator_rolls_an_unpinned_cluster_to_the_new_image():
    kube = FakeKube()
    body = kube.add(load_example("themiscluster.yaml"))
    reconcile_cluster(kube, body, default_image="ghcr.io/themisdb/themis-shard:0.1.0")
    outcome = reconcile_cluster(kube, body, default_image="ghcr.io/themisdb/themis-shard:0.2.0")
    sts = kube.get("apps/v1", "StatefulSet", NS, "demo")
    assert container(sts)["image"] == "ghcr.io/themisdb/themis-shard:0.2.0"
    assert "RollingUpdate" in [e.reason for e in outcome.events]


# ---- storage sizes -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "quantity, size", [("20Gi", 20 << 30), ("500M", 500_000_000), ("1000", 1000), ("1.5Ti", 3 << 39)]
)
def test_storage_quantities_are_read_in_bytes(quantity, size):
    assert quantity_bytes(quantity) == size


def claim(name: str, size: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app.kubernetes.io/name": "themis", "app.kubernetes.io/instance": "demo"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


def test_a_larger_size_grows_each_claim_and_a_smaller_one_is_refused_by_name():
    claims = [
        claim("data-demo-0", "20Gi"),
        claim("data-demo-1", "20Gi"),
        claim("weights-demo-0", "10Gi"),
        claim("data-other-0", "1Gi"),
    ]
    grow, refused = plan_resizes("demo", StorageSpec(data_size="40Gi"), claims)
    assert [(r.claim, r.size, r.field) for r in grow] == [
        ("data-demo-0", "40Gi", "spec.storage.dataSize"),
        ("data-demo-1", "40Gi", "spec.storage.dataSize"),
    ]
    assert refused == []
    grow, refused = plan_resizes("demo", StorageSpec(weights_size="5Gi"), claims)
    assert grow == [] and len(refused) == 1
    assert refused[0].startswith(
        "spec.storage.weightsSize 5Gi is smaller than PersistentVolumeClaim weights-demo-0"
    )


def with_claims(kube: FakeKube, size: str = "20Gi") -> dict:
    body = kube.add(load_example("themiscluster.yaml"))
    for i in range(3):
        kube.add(claim(f"data-demo-{i}", size))
    return body


def test_growing_data_size_patches_the_claims_and_says_so():
    kube = FakeKube()
    body = with_claims(kube)
    reconcile_cluster(kube, body)
    body = kube.patch(
        "themisdb.io/v1alpha1", "ThemisCluster", NS, "demo", {"spec": {"storage": {"dataSize": "50Gi"}}}
    )
    outcome = reconcile_cluster(kube, body)
    for i in range(3):
        pvc = kube.get("v1", "PersistentVolumeClaim", NS, f"data-demo-{i}")
        assert pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert [e.reason for e in outcome.events].count("VolumeResized") == 3
    assert outcome.status["phase"] != "Degraded"
    again = reconcile_cluster(kube, body)  # converged: nothing more to grow
    assert "VolumeResized" not in [e.reason for e in again.events]


def degraded(outcome) -> dict:
    return next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")


def test_shrinking_data_size_is_a_degraded_condition_naming_the_field_and_changes_nothing():
    kube = FakeKube()
    body = with_claims(kube, "20Gi")
    body = kube.patch(
        "themisdb.io/v1alpha1", "ThemisCluster", NS, "demo", {"spec": {"storage": {"dataSize": "10Gi"}}}
    )
    outcome = reconcile_cluster(kube, body)
    cond = degraded(outcome)
    assert cond["status"] == "True" and cond["reason"] == "StorageResizeRefused"
    assert "spec.storage.dataSize 10Gi" in cond["message"] and "cannot shrink" in cond["message"]
    assert "StorageResizeRefused" in [e.reason for e in outcome.events]
    assert (
        kube.get("v1", "PersistentVolumeClaim", NS, "data-demo-0")["spec"]["resources"]["requests"]["storage"]
        == "20Gi"
    )


class NoExpansion(FakeKube):
    """An API server whose StorageClass has no allowVolumeExpansion."""

    def patch(self, api_version, kind, namespace, name, patch, subresource=None):
        if kind == "PersistentVolumeClaim":
            raise KubeError(
                403,
                "persistentvolumeclaims is forbidden: only dynamically provisioned pvc "
                "can be resized and the storageclass that provisions the pvc must support resize",
            )
        return super().patch(api_version, kind, namespace, name, patch, subresource)


def test_an_expansion_the_storage_class_refuses_is_reported_with_the_field_and_the_reason():
    kube = NoExpansion()
    body = with_claims(kube)
    body = kube.patch(
        "themisdb.io/v1alpha1", "ThemisCluster", NS, "demo", {"spec": {"storage": {"dataSize": "50Gi"}}}
    )
    outcome = reconcile_cluster(kube, body)
    cond = degraded(outcome)
    assert cond["reason"] == "StorageResizeRefused"
    assert "spec.storage.dataSize 50Gi" in cond["message"] and "must support resize" in cond["message"]


# ---- env and logging -----------------------------------------------------------------------------
def test_spec_env_and_logging_reach_every_shard():
    c = ctx(
        env=[
            {"name": "THEMIS_LLM_PREFIX_CACHE_DIR", "value": "/weights/prefix"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
        logging={"level": "debug", "format": "json"},
    )
    env = env_of(build_statefulset(c, 3))
    assert env["THEMIS_LLM_PREFIX_CACHE_DIR"] == "/weights/prefix"
    assert env["TOKEN"] == {"secretKeyRef": {"name": "s", "key": "k"}}
    assert (env["THEMIS_LOG_LEVEL"], env["THEMIS_LOG_FORMAT"]) == ("debug", "json")
    names = [e["name"] for e in container(build_statefulset(c, 3))["env"]]
    assert names[-2:] == ["THEMIS_LLM_PREFIX_CACHE_DIR", "TOKEN"]  # after the operator's: $(VAR) works


def test_default_logging_is_info_text():
    env = env_of(build_statefulset(ctx(), 3))
    assert (env["THEMIS_LOG_LEVEL"], env["THEMIS_LOG_FORMAT"]) == ("info", "text")


def body_with(**spec) -> dict:
    body = load_example("themiscluster.yaml")
    body["spec"].update(spec)
    return body


@pytest.mark.parametrize(
    "env, message",
    [
        (
            [{"name": "THEMIS_DATA_DIR", "value": "/x"}],
            "spec.env[0].name THEMIS_DATA_DIR is set by the operator",
        ),
        ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "spec.env[1].name A is given twice"),
        (
            [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
            "set value or valueFrom",
        ),
        ([{"name": "1BAD", "value": "1"}], "env.0.name"),
    ],
)
def test_bad_env_is_refused_by_name_and_nothing_is_built(env, message):
    invalid = admit(body_with(env=env))
    assert isinstance(invalid, Invalid) and message in invalid.message


def test_the_crd_schema_checks_env_names_and_log_levels():
    ok = body_with(env=[{"name": "X", "value": "1"}], logging={"level": "warning", "format": "json"})
    assert custom_resource_errors(ok) == []
    assert custom_resource_errors(body_with(env=[{"name": "bad name"}]))
    assert custom_resource_errors(body_with(logging={"level": "verbose"}))
