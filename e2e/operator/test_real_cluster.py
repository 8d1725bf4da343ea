"""The same flow on a real cluster (kind, k3d, or any kubeconfig), skipped when none is reachable.

Runs automatically against kind/k3d contexts; any other context needs ``THEMIS_E2E_CLUSTER=1``
so that a developer's production kubeconfig is never touched by accident. Everything happens
in a throw-away namespace, which is deleted afterwards. The shard image need not exist: the
test checks what the operator creates and how the API server (which, unlike the emulator,
validates against the CRD schema) treats good and bad custom resources.
"""

import json
import uuid

import pytest
from themis_testing.real_cluster import reachable_cluster

from .conftest import ROOT, Kubectl, eventually, operator_process, stop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    found = reachable_cluster()
    if found is None:
        pytest.skip("no reachable kind/k3d cluster (or THEMIS_E2E_CLUSTER=1 with a kubeconfig)")
    binary, kubeconfig = found
    namespace = f"themis-e2e-{uuid.uuid4().hex[:6]}"
    kubectl = Kubectl(binary, kubeconfig, namespace)
    kubectl.run("create", "namespace", namespace)
    kubectl.run("apply", "-f", str(ROOT / "crds"))
    kubectl.run(
        "wait",
        "--for=condition=Established",
        "crd/themisclusters.themisdb.io",
        "crd/loraadapters.themisdb.io",
        "--timeout=60s",
    )
    log = tmp_path_factory.mktemp("real") / "operator.log"
    process = operator_process(
        kubeconfig, log, {"THEMIS_OPERATOR_STATUS_INTERVAL_S": "5"}, "--namespace", namespace
    )
    try:
        yield kubectl
    finally:
        stop(process)
        kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)
        print(log.read_text()[-4000:])


def test_api_server_rejects_a_cr_that_violates_the_schema(real):
    bad = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "bad"},
        "spec": {"shards": 0, "raidMode": "raid10"},
    }
    done = real.run("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert done.returncode != 0 and "raidMode" in done.stderr


def test_operator_builds_scales_and_deletes_a_cluster(real):
    body = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "demo"},
        "spec": {
            "shards": 3,
            "raidMode": "raid5",
            "resources": {"gpus": 0, "cpu": "100m", "memory": "128Mi"},
            "storage": {"dataSize": "1Gi", "weightsSize": "1Gi"},
        },
    }
    real.run("apply", "-f", "-", input=json.dumps(body))
    for kind, name in (
        ("statefulset", "demo"),
        ("service", "demo-headless"),
        ("configmap", "demo-plan"),
        ("secret", "demo-tls"),
        ("pdb", "demo"),
    ):
        eventually(lambda kind=kind, name=name: real.exists(kind, name), timeout=60)
    real.run("patch", "tc", "demo", "--type", "merge", "-p", '{"spec": {"shards": 4}}')
    eventually(lambda: real.json("statefulset", "demo")["spec"]["replicas"] == 4, timeout=60)
    real.run("delete", "tc", "demo", "--timeout=60s")
    eventually(lambda: not real.exists("statefulset", "demo"), timeout=60)
