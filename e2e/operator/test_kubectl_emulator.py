"""The issue's front door, black-box: ``kubectl`` against the API emulator, ``python -m
themis_operator`` and the process node (``themis_testing.kube_node``) as processes, so every
pod of the operator's StatefulSet is a real shard process on its own loopback address.

The shards here load no model (``spec.engine.llm: false``, ~2 s to start); the real model
through the same front door is ``test_kube_model.py``. A fresh namespace per run keeps the
node's /etc/hosts names apart from any other run on the machine.
"""

import base64
import json
import ssl

import httpx
import pytest
import yaml
from themis_client import ThemisClient
from themis_core.plan import ClusterPlan
from themis_testing.validation import validate_manifest

from .conftest import ROOT, Kubectl, api_key, eventually, kubectl_on_stack, light

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

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
SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def cluster(kubectl_binary, tmp_path_factory):
    """Emulator + CRDs + operator + node; kubectl bound to a fresh namespace."""
    with kubectl_on_stack(kubectl_binary, tmp_path_factory.mktemp("kube"), "e2e") as kubectl:
        kubectl.run("create", "-f", "-", input=json.dumps(SERVICE_MONITOR_CRD))
        yield kubectl


def plan(kubectl: Kubectl) -> ClusterPlan:
    return ClusterPlan.from_json(kubectl.json("configmap", "demo-plan")["data"]["plan.json"])


def strip_server_fields(obj: dict) -> dict:
    """What the user would write: drop fields only the API server fills in."""
    obj = json.loads(json.dumps(obj))
    for field in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        obj["metadata"].pop(field, None)
    return obj


def cluster_ca(kubectl: Kubectl, check_hostname: bool = True) -> ssl.SSLContext:
    """Trust in the cluster CA (from the demo-tls Secret the operator made)."""
    ca = base64.b64decode(kubectl.json("secret", "demo-tls")["data"]["ca.crt"]).decode()
    context = ssl.create_default_context(cadata=ca)
    context.check_hostname = check_hostname
    return context


def https(kubectl: Kubectl, check_hostname: bool = True) -> httpx.Client:
    """For the probes (/health, /ready by pod IP): status codes, as the kubelet reads them."""
    return httpx.Client(verify=cluster_ca(kubectl, check_hostname), timeout=10)


def themis(kubectl: Kubectl, url: str | None = None) -> ThemisClient:
    """The typed client through the cluster's Service (or ``url``), with the minted admin key."""
    return ThemisClient(
        url or service(kubectl), verify=cluster_ca(kubectl), timeout=10, headers=api_key(kubectl, "demo")
    )


def service(kubectl: Kubectl) -> str:
    return f"https://demo.{kubectl.namespace}.svc:8080"


def ready_pods(kubectl: Kubectl, count: int) -> bool:
    """``count`` pods of the cluster, every one Running and Ready"""
    pods = kubectl.json("pods", "-l", "app.kubernetes.io/instance=demo")["items"]
    return len(pods) == count and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"]) for p in pods
    )


def test_apply_example_yields_real_shards_that_form_a_cluster(cluster):
    kubectl = cluster
    example = light(yaml.safe_load((ROOT / "examples/themiscluster.yaml").read_text()))
    out = kubectl.run("apply", "-f", "-", input=json.dumps(example)).stdout
    assert "themiscluster.themisdb.io/demo created" in out
    eventually(lambda: all(kubectl.exists(kind, name) for kind, name in CHILDREN))
    uid = kubectl.json("tc", "demo")["metadata"]["uid"]
    for kind, name in CHILDREN:
        child = kubectl.json(kind, name)
        assert child["metadata"]["ownerReferences"][0]["uid"] == uid
        assert child["metadata"]["labels"]["themisdb.io/cluster"] == "demo"
        validate_manifest(strip_server_fields(child))
    assert kubectl.json("pdb", "demo")["spec"]["maxUnavailable"] == 1
    headless = kubectl.json("service", "demo-headless")["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert plan(kubectl).members[0].url == f"https://demo-0.demo-headless.{kubectl.namespace}.svc:8080"

    eventually(lambda: ready_pods(kubectl, 3), timeout=60)
    eventually(lambda: kubectl.json("statefulset", "demo")["status"]["readyReplicas"] == 3)
    # kubectl get pods -o wide: every pod has its own address, reachable from here.
    rows = [line.split() for line in kubectl.run("get", "pods", "-o", "wide").stdout.splitlines()]
    header, rows = rows[0], rows[1:]
    assert header[:6] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]
    assert [(r[0], r[1], r[2]) for r in rows] == [(f"demo-{i}", "1/1", "Running") for i in range(3)]
    ips = [r[5] for r in rows]
    assert len(set(ips)) == 3 and all(ip.startswith("127.") for ip in ips)
    with https(kubectl, check_hostname=False) as http:
        for ip in ips:
            assert http.get(f"https://{ip}:8080/health").status_code == 200
    # The shards found each other through the headless Service's names, over mTLS.
    with themis(kubectl) as themis_db:
        status = eventually(
            lambda: (
                (s := themis_db.cluster_status()) and sum(m.state == "alive" for m in s.members) == 3 and s
            )
        )
    assert {m.shard_id for m in status.members} == {"demo-0", "demo-1", "demo-2"}
    kubectl.run("wait", "--for=condition=Ready", "tc/demo", "--timeout=60s")


def test_kubectl_get_shows_the_printer_columns(cluster):
    kubectl = cluster
    eventually(lambda: "3/3" in kubectl.run("get", "tc").stdout)
    header = kubectl.run("get", "tc").stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "RAID", "PHASE", "AGE"]
    assert "RING" in kubectl.run("get", "tc", "-o", "wide").stdout
    status = kubectl.json("tc", "demo")["status"]
    assert {"Ready", "Progressing", "Degraded"} <= {c["type"] for c in status["conditions"]}


def test_documents_are_served_through_the_clusters_service(cluster):
    kubectl = cluster
    with themis(kubectl) as themis_db:
        assert themis_db.declare_collection("books", dimension=3).dimension == 3
        for i in range(20):
            assert themis_db.put("books", f"b{i}", {"n": i, "embedding": [i, 1, 0]}).version >= 1
        assert themis_db.get("books", "b7").document["n"] == 7


def all_documents_readable(kubectl: Kubectl) -> bool:
    with themis(kubectl) as themis_db:
        return all(themis_db.get("books", f"b{i}").document["n"] == i for i in range(20))


def test_kubectl_scale_reshards_online(cluster):
    kubectl = cluster
    out = kubectl.run("scale", "tc/demo", "--replicas=4").stdout
    assert "scaled" in out
    assert kubectl.json("tc", "demo")["spec"]["shards"] == 4
    eventually(lambda: kubectl.json("statefulset", "demo")["spec"]["replicas"] == 4)
    eventually(lambda: ready_pods(kubectl, 4), timeout=60)
    eventually(lambda: plan(kubectl).ring_version == 2 and len(plan(kubectl).members) == 4)
    eventually(lambda: "4/4" in kubectl.run("get", "tc").stdout, timeout=60)
    assert all_documents_readable(kubectl)

    # Scale-in: demo-3 hands its keys off, then the StatefulSet shrinks.
    kubectl.run("scale", "tc/demo", "--replicas=3")
    eventually(lambda: plan(kubectl).ring_version == 3)
    eventually(lambda: kubectl.json("statefulset", "demo")["spec"]["replicas"] == 3, timeout=90)
    eventually(lambda: ready_pods(kubectl, 3), timeout=60)
    assert len(plan(kubectl).members) == 3
    assert all_documents_readable(kubectl)


def test_a_pod_deleted_with_its_pvc_comes_back_and_serves(cluster):
    kubectl = cluster
    old_uid = kubectl.json("pvc", "data-demo-1")["metadata"]["uid"]
    kubectl.run("delete", "pod/demo-1", "pvc/data-demo-1")
    eventually(lambda: kubectl.exists("pvc", "data-demo-1"), timeout=30)
    assert kubectl.json("pvc", "data-demo-1")["metadata"]["uid"] != old_uid  # a new, empty claim
    eventually(lambda: ready_pods(kubectl, 3), timeout=60)
    host = f"https://demo-1.demo-headless.{kubectl.namespace}.svc:8080"
    with https(kubectl) as http:
        assert http.get(f"{host}/ready").status_code == 200
    with themis(kubectl, host) as themis_db:
        # It serves every document (reading through its peers for what its empty volume lacks).
        for i in range(20):
            assert themis_db.get("books", f"b{i}").document["n"] == i
    assert all_documents_readable(kubectl)


def test_apply_lora_adapter_places_it_and_the_shards_see_the_plan(cluster):
    kubectl = cluster
    kubectl.run("apply", "-f", str(ROOT / "examples/loraadapter.yaml"))
    placement = eventually(lambda: plan(kubectl).adapters)
    assert placement[0].name == "legal" and len(placement[0].shards) == 2
    eventually(lambda: kubectl.json("lora", "legal").get("status", {}).get("placed"))
    assert kubectl.json("lora", "legal")["status"]["placedShards"] == list(placement[0].shards)
    assert "legal" in kubectl.run("get", "lora").stdout
    # The shards read the updated plan from their mounted ConfigMap.
    version = plan(kubectl).ring_version
    pods = [themis(kubectl, f"https://demo-{i}.demo-headless.{kubectl.namespace}.svc:8080") for i in range(3)]
    try:
        eventually(lambda: all(pod.cluster_status().ring_version == version for pod in pods))
    finally:
        for pod in pods:
            pod.close()


def test_schema_violations_are_rejected_by_the_api_server(cluster):
    kubectl = cluster
    bad = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "bad"},
        "spec": {"shards": 0, "raidMode": "raid10"},
    }
    done = kubectl.run("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert "is invalid" in done.stderr and "spec.raidMode" in done.stderr and "spec.shards" in done.stderr
    assert not kubectl.exists("tc", "bad")


def test_semantically_invalid_cluster_is_degraded_with_no_children(cluster):
    kubectl = cluster
    broken = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "broken"},
        "spec": {"shards": 2, "raidMode": "raid5"},
    }
    kubectl.run("apply", "-f", "-", input=json.dumps(broken), check=False)
    if kubectl.exists("tc", "broken"):  # where the CRD's CEL rule is not enforced, the operator refuses
        kubectl.run("wait", "--for=condition=Degraded", "tc/broken", "--timeout=20s")
        message = kubectl.run(
            "get", "tc", "broken", "-o", "jsonpath={.status.conditions[?(@.type=='Degraded')].message}"
        ).stdout
        assert "raid5 needs at least 3 shards" in message
        kubectl.run("delete", "tc", "broken")
    assert not kubectl.exists("statefulset", "broken")
    assert not kubectl.exists("configmap", "broken-plan")


def test_a_model_source_that_cannot_be_fetched_degrades_the_cluster_with_the_reason(cluster):
    """The shard's own termination message travels pod status → operator → ThemisCluster."""
    kubectl = cluster
    unfetchable = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "nomodel"},
        "spec": {
            "shards": 2,
            "model": {"source": "http://127.0.0.1:9/missing.gguf"},  # nothing listens on port 9
            "storage": {"dataSize": "1Gi", "weightsSize": "1Gi"},
            # Without TLS the failed shard exits at once (with TLS the certificate reloader holds
            # the process until its next tick; the lead knows).
            "tls": {"enabled": False},
        },
    }
    kubectl.run("apply", "-f", "-", input=json.dumps(unfetchable))

    def degraded():
        """Degraded with the reason the shards gave"""
        conditions = {c["type"]: c for c in kubectl.json("tc", "nomodel")["status"]["conditions"]}
        return conditions["Degraded"]["reason"] == "ModelUnavailable" and conditions["Degraded"]

    condition = eventually(degraded, timeout=60)
    assert condition["status"] == "True"
    assert "source_unavailable" in condition["message"] and "missing.gguf" in condition["message"]
    crashed = [
        c
        for p in kubectl.json("pods", "-l", "app.kubernetes.io/instance=nomodel")["items"]
        for c in p["status"]["containerStatuses"]
        if c["restartCount"] >= 1
    ]
    assert crashed and "missing.gguf" in crashed[0]["lastState"]["terminated"]["message"]
    kubectl.run("delete", "tc", "nomodel")
    eventually(lambda: not kubectl.exists("pod", "nomodel-0"), timeout=30)


def test_delete_removes_everything_but_the_data(cluster):
    kubectl = cluster
    kubectl.run("delete", "lora", "legal")
    kubectl.run("delete", "tc", "demo")
    eventually(lambda: not kubectl.exists("tc", "demo"))
    for kind, name in CHILDREN:
        assert not kubectl.exists(kind, name), (kind, name)
    eventually(lambda: kubectl.run("get", "pods", "-o", "name").stdout.strip() == "", timeout=30)
    assert (
        kubectl.run("get", "statefulsets,services,configmaps,secrets,pdb", "-o", "name").stdout.strip() == ""
    )
    # persistentVolumeClaimRetentionPolicy Retain: the volumes outlive the cluster.
    assert "persistentvolumeclaim/data-demo-0" in kubectl.run("get", "pvc", "-o", "name").stdout
