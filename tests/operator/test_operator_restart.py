"""Operator restarts: a cluster half-built (or changed) while no operator ran converges.

A module of its own so that no other operator instance is running in the background.
"""

import copy
import time

import pytest
from kubernetes.config import new_client_from_config
from themis_core.plan import ClusterPlan
from themis_operator.kube import ApiKube
from themis_testing.validation import load_example

from .conftest import eventually, kopf_runner

TC = ("themisdb.io/v1alpha1", "ThemisCluster")


@pytest.fixture(scope="module")
def kube(kubeconfig, crds):
    return ApiKube(new_client_from_config(config_file=str(kubeconfig)))


def create_cluster(kube, namespace):
    body = copy.deepcopy(load_example("themiscluster.yaml"))
    body["metadata"].update(name="demo", namespace=namespace)
    return kube.create(body)


def plan(kube, namespace) -> ClusterPlan:
    return ClusterPlan.from_json(kube.get("v1", "ConfigMap", namespace, "demo-plan")["data"]["plan.json"])


def sts(kube, namespace) -> dict:
    return kube.get("apps/v1", "StatefulSet", namespace, "demo")


def test_operator_restart_mid_reconcile_converges(crds, operator_env, kube):
    """A cluster half-built by a crashed operator (and tampered with) converges on restart."""
    ns = "restart"
    with kopf_runner() as runner:
        time.sleep(1.0)
        create_cluster(kube, ns)
        eventually(lambda: sts(kube, ns))
    assert runner.exception is None
    ca = kube.get("v1", "Secret", ns, "demo-ca")["data"]
    kube.delete("v1", "Service", ns, "demo")  # as if the crash happened before the Service
    kube.patch("apps/v1", "StatefulSet", ns, "demo", {"spec": {"replicas": 1}})
    kube.patch(*TC, ns, "demo", {"spec": {"shards": 4}})  # changed while no operator ran
    with kopf_runner() as runner:
        eventually(lambda: kube.get("v1", "Service", ns, "demo"))
        eventually(lambda: sts(kube, ns)["spec"]["replicas"] == 4)
        assert kube.get("v1", "Secret", ns, "demo-ca")["data"] == ca
        assert plan(kube, ns).ring_version == 2
        kube.delete(*TC, ns, "demo")
        eventually(lambda: kube.get(*TC, ns, "demo") is None)
    assert runner.exception is None
