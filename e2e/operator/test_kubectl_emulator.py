"""The issue's done-criterion, black-box: ``kubectl apply -f examples/themiscluster.yaml``
against the emulator, ``python -m themis_operator`` running as a process, and every check
made through the real kubectl.
"""

import base64
import json

import pytest
from themis_shard.plan import ClusterPlan
from themis_testing.emulator import running_emulator
from themis_testing.fakeshards import FakeShards
from themis_testing.validation import validate_manifest

from .conftest import ROOT, Kubectl, eventually, operator_process, stop

pytestmark = pytest.mark.e2e

CHILDREN = [
    ("secret", "demo-gossip"),
    ("secret", "demo-ca"),
    ("secret", "demo-tls"),
    ("secret", "demo-api-keys"),
    ("configmap", "demo-plan"),
    ("service", "demo"),
    ("service", "demo-headless"),
    ("statefulset", "demo"),
    ("poddisruptionbudget", "demo"),
]


@pytest.fixture(scope="module")
def cluster(kubectl_binary, tmp_path_factory):
    """Emulator + CRDs + operator process + fake shard status endpoints."""
    tmp = tmp_path_factory.mktemp("e2e-operator")
    shards = FakeShards().start()
    with running_emulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp / "kubeconfig")
        kubectl = Kubectl(kubectl_binary, kubeconfig)
        kubectl.run("apply", "--validate=false", "-f", str(ROOT / "crds"))
        kubectl.run(
            "create",
            "--validate=false",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
                    "spec": {
                        "group": "monitoring.coreos.com",
                        "scope": "Namespaced",
                        "names": {
                            "kind": "ServiceMonitor",
                            "plural": "servicemonitors",
                            "singular": "servicemonitor",
                        },
                        "versions": [
                            {
                                "name": "v1",
                                "served": True,
                                "storage": True,
                                "schema": {
                                    "openAPIV3Schema": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    }
                                },
                            }
                        ],
                    },
                }
            ),
        )
        env = {
            "THEMIS_OPERATOR_STATUS_INTERVAL_S": "1",
            "THEMIS_OPERATOR_PROBE_TIMEOUT_S": "0.5",
            "THEMIS_OPERATOR_SHARD_URL_TEMPLATE": shards.url_template,
        }
        log = tmp / "operator.log"
        process = operator_process(kubeconfig, log, env, "--namespace", "default")
        try:
            yield kubectl, shards
        finally:
            stop(process)
            shards.stop()
            print(log.read_text()[-4000:])


def plan(kubectl: Kubectl) -> ClusterPlan:
    return ClusterPlan.from_json(kubectl.json("configmap", "demo-plan")["data"]["plan.json"])


def strip_server_fields(obj: dict) -> dict:
    """What the user would write: drop fields only the API server fills in."""
    obj = json.loads(json.dumps(obj))
    for field in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        obj["metadata"].pop(field, None)
    return obj


def test_apply_example_produces_the_full_validated_set_of_children(cluster):
    kubectl, shards = cluster
    for i in range(3):
        shards.set("default", f"demo-{i}")
    out = kubectl.run("apply", "--validate=false", "-f", str(ROOT / "examples/themiscluster.yaml")).stdout
    assert "themiscluster.themisdb.io/demo created" in out
    eventually(lambda: all(kubectl.exists(kind, name) for kind, name in CHILDREN))
    uid = kubectl.json("tc", "demo")["metadata"]["uid"]
    for kind, name in CHILDREN:
        child = kubectl.json(kind, name)
        assert child["metadata"]["ownerReferences"][0]["uid"] == uid
        assert child["metadata"]["labels"]["themisdb.io/cluster"] == "demo"
        validate_manifest(strip_server_fields(child))
    sts = kubectl.json("statefulset", "demo")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert kubectl.json("pdb", "demo")["spec"]["maxUnavailable"] == 1
    headless = kubectl.json("service", "demo-headless")["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert [p["port"] for p in kubectl.json("service", "demo")["spec"]["ports"]] == [8080]
    tls = kubectl.json("secret", "demo-tls")["data"]
    assert base64.b64decode(tls["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")
    assert {f"demo-{i}.crt" for i in range(3)} <= set(tls)
    assert plan(kubectl).ring_version == 1
    assert plan(kubectl).members[0].url == "https://demo-0.demo-headless.default.svc:8080"


def test_kubectl_get_shows_the_printer_columns(cluster):
    kubectl, _ = cluster
    eventually(
        lambda: "raid5" in kubectl.run("get", "tc").stdout and "0/3" in kubectl.run("get", "tc").stdout
    )
    header = kubectl.run("get", "tc").stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "RAID", "PHASE", "AGE"]
    assert "RING" in kubectl.run("get", "tc", "-o", "wide").stdout
    status = kubectl.json("tc", "demo")["status"]
    assert {c["type"] for c in status["conditions"]} == {"Ready", "Progressing", "Degraded"}


def test_patch_shards_bumps_the_ring_and_scales_the_statefulset(cluster):
    kubectl, shards = cluster
    for i in range(5):
        shards.set("default", f"demo-{i}")
    kubectl.run("patch", "tc", "demo", "--type", "merge", "-p", '{"spec": {"shards": 5}}')
    eventually(lambda: kubectl.json("statefulset", "demo")["spec"]["replicas"] == 5)
    assert plan(kubectl).ring_version == 2
    assert len(plan(kubectl).members) == 5
    eventually(lambda: kubectl.json("tc", "demo")["status"].get("ringVersion") == 2)

    kubectl.run("patch", "tc", "demo", "--type", "merge", "-p", '{"spec": {"shards": 4}}')
    eventually(lambda: plan(kubectl).ring_version == 3)
    eventually(lambda: kubectl.json("tc", "demo")["status"]["phase"] == "Scaling")
    assert kubectl.json("statefulset", "demo")["spec"]["replicas"] == 5  # demo-4 still hands off
    assert plan(kubectl).draining == ("demo-4",)
    shards.set("default", "demo-4", migration="drained", ring_version=3)
    eventually(lambda: kubectl.json("statefulset", "demo")["spec"]["replicas"] == 4)
    assert len(plan(kubectl).members) == 4 and plan(kubectl).ring_version == 3


def test_apply_lora_adapter_writes_placement_into_the_plan(cluster):
    kubectl, _ = cluster
    kubectl.run("apply", "--validate=false", "-f", str(ROOT / "examples/loraadapter.yaml"))
    placement = eventually(lambda: plan(kubectl).adapters)
    assert placement[0].name == "legal" and len(placement[0].shards) == 2
    eventually(lambda: kubectl.json("lora", "legal").get("status", {}).get("placed"))
    assert kubectl.json("lora", "legal")["status"]["placedShards"] == list(placement[0].shards)
    assert "legal" in kubectl.run("get", "lora").stdout


def test_schema_violations_are_rejected_by_the_api_server(cluster):
    kubectl, _ = cluster
    bad = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "bad"},
        "spec": {"shards": 0, "raidMode": "raid10"},
    }
    done = kubectl.run("apply", "--validate=false", "-f", "-", input=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert "is invalid" in done.stderr and "spec.raidMode" in done.stderr and "spec.shards" in done.stderr
    assert not kubectl.exists("tc", "bad")


def test_semantically_invalid_cluster_is_degraded_with_no_children(cluster):
    kubectl, _ = cluster
    kubectl.run(
        "apply",
        "--validate=false",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "themisdb.io/v1alpha1",
                "kind": "ThemisCluster",
                "metadata": {"name": "broken"},
                "spec": {"shards": 2, "raidMode": "raid5"},
            }
        ),
    )
    kubectl.run("wait", "--for=condition=Degraded", "tc/broken", "--timeout=20s")
    message = kubectl.run(
        "get", "tc", "broken", "-o", "jsonpath={.status.conditions[?(@.type=='Degraded')].message}"
    ).stdout
    assert "raid5 needs at least 3 shards" in message
    assert not kubectl.exists("statefulset", "broken")
    assert not kubectl.exists("configmap", "broken-plan")
    kubectl.run("delete", "tc", "broken")


def test_delete_removes_everything(cluster):
    kubectl, _ = cluster
    kubectl.run("delete", "lora", "legal")
    kubectl.run("delete", "-f", str(ROOT / "examples/themiscluster.yaml"))
    eventually(lambda: not kubectl.exists("tc", "demo"))
    for kind, name in CHILDREN:
        assert not kubectl.exists(kind, name), (kind, name)
    assert (
        kubectl.run("get", "statefulsets,services,configmaps,secrets,pdb", "-o", "name").stdout.strip() == ""
    )
