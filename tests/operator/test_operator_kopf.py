"""The real kopf operator (in a thread) against the Kubernetes emulator: end-to-end behaviour.

Each test works in its own namespace; the operator watches all of them. The shards are real:
the process node (``themis_testing.kube_node``) runs every pod of the operator's StatefulSets
as a shard process without a model (``spec.engine.llm: false``), so readiness, an unreachable
shard and scale-in hand-off are the shards' own behaviour, read by the operator from their
``/v1/cluster/status``. Namespaces carry a per-run suffix: pod names go into /etc/hosts.
"""

import copy
import os
import signal
import time
import uuid

import pytest
from kubernetes.config import new_client_from_config
from themis_core.plan import ClusterPlan
from themis_operator.kube import ApiKube
from themis_testing.validation import load_example, validate_manifest

from .conftest import eventually

TC = ("themisdb.io/v1alpha1", "ThemisCluster")
LORA = ("themisdb.io/v1alpha1", "LoRAAdapter")
RUN = uuid.uuid4().hex[:5]


pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def kube(kubeconfig, crds):
    return ApiKube(new_client_from_config(config_file=str(kubeconfig)))


def create_cluster(kube, namespace, name="demo", **spec):
    body = copy.deepcopy(load_example("themiscluster.yaml"))
    body["metadata"].update(name=name, namespace=namespace)
    body["spec"]["engine"] = {**body["spec"].get("engine", {}), "llm": False}  # no model: ~2 s starts
    body["spec"].update(spec)
    return kube.create(body)


def remove_cluster(kube, namespace, name="demo"):
    """Delete the cluster so that its shard processes stop (the node deletes orphaned pods)."""
    if kube.get(*TC, namespace, name) is not None:
        kube.delete(*TC, namespace, name)
    eventually(lambda: kube.get(*TC, namespace, name) is None)


def plan(kube, namespace, name="demo") -> ClusterPlan:
    return ClusterPlan.from_json(kube.get("v1", "ConfigMap", namespace, f"{name}-plan")["data"]["plan.json"])


def sts(kube, namespace, name="demo") -> dict:
    return kube.get("apps/v1", "StatefulSet", namespace, name)


def status(kube, namespace, name="demo") -> dict:
    return (kube.get(*TC, namespace, name) or {}).get("status") or {}


def events(emulator, namespace) -> list[str]:
    return [e.get("reason") for e in emulator.objects("v1", "events", namespace)]


def test_create_builds_valid_children_and_reports_status(running_operator, kube, emulator, kube_node):
    ns = f"create-{RUN}"
    owner = create_cluster(kube, ns)
    statefulset = eventually(lambda: sts(kube, ns))
    assert statefulset["spec"]["replicas"] == 3
    pod = statefulset["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    children = [
        kube.get("v1", "Secret", ns, "demo-tls"),
        kube.get("v1", "Secret", ns, "demo-ca"),
        kube.get("v1", "ConfigMap", ns, "demo-plan"),
        kube.get("v1", "Service", ns, "demo"),
        kube.get("v1", "Service", ns, "demo-headless"),
        kube.get("policy/v1", "PodDisruptionBudget", ns, "demo"),
        statefulset,
    ]
    for child in children:
        assert child is not None
        assert child["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
        validate_manifest(child)
    assert children[5]["spec"]["maxUnavailable"] == 1  # raid5
    assert plan(kube, ns).ring_version == 1
    st = eventually(lambda: status(kube, ns).get("shards") and status(kube, ns))
    assert st["ringVersion"] == 1 and st["observedGeneration"] == 1
    eventually(lambda: all(s.get("reachable") for s in status(kube, ns)["shards"]), timeout=60)
    assert {"Created", "PlanCreated"} <= set(events(emulator, ns))
    remove_cluster(kube, ns)


def test_ready_shards_make_the_cluster_running(running_operator, kube, emulator, kube_node):
    ns = f"running-{RUN}"
    create_cluster(kube, ns)
    # The node's StatefulSet controller writes readyReplicas from the pods' readiness probes.
    eventually(lambda: (sts(kube, ns) or {}).get("status", {}).get("readyReplicas") == 3, timeout=60)
    st = eventually(lambda: status(kube, ns).get("phase") == "Running" and status(kube, ns), timeout=30)
    assert st["ready"] == "3/3"
    conditions = {c["type"]: c["status"] for c in st["conditions"]}
    assert {k: conditions[k] for k in ("Ready", "Progressing", "Degraded")} == {
        "Ready": "True",
        "Progressing": "False",
        "Degraded": "False",
    }
    remove_cluster(kube, ns)


def test_unreachable_shards_degrade_the_cluster_with_a_warning(running_operator, kube, emulator, kube_node):
    ns = f"unreachable-{RUN}"
    create_cluster(kube, ns)
    eventually(lambda: status(kube, ns).get("phase") == "Running", timeout=60)
    # demo-2 hangs (its process stopped, not killed): it stops answering, as a wedged shard would.
    pod = kube.get("v1", "Pod", ns, "demo-2")
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("process://"))
    os.kill(pid, signal.SIGSTOP)
    try:
        st = eventually(lambda: status(kube, ns).get("phase") == "Degraded" and status(kube, ns), timeout=30)
        assert "demo-2" in st["message"]
        assert "ShardsUnreachable" in events(emulator, ns)
    finally:
        os.kill(pid, signal.SIGCONT)
    remove_cluster(kube, ns)


def test_scale_out_bumps_the_ring_and_scale_in_waits_for_hand_off(
    running_operator, kube, emulator, kube_node
):
    ns = f"scale-{RUN}"
    create_cluster(kube, ns)
    eventually(lambda: sts(kube, ns))
    kube.patch(*TC, ns, "demo", {"spec": {"shards": 5}})
    eventually(lambda: sts(kube, ns)["spec"]["replicas"] == 5)
    assert plan(kube, ns).ring_version == 2
    assert "demo-4.crt" in kube.get("v1", "Secret", ns, "demo-tls")["data"]

    kube.patch(*TC, ns, "demo", {"spec": {"shards": 3}})
    eventually(lambda: plan(kube, ns).ring_version == 3)
    assert plan(kube, ns).draining == ("demo-3", "demo-4")
    # The StatefulSet keeps the leaving pods until they report their hand-off drained.
    assert sts(kube, ns)["spec"]["replicas"] == 5
    eventually(lambda: sts(kube, ns)["spec"]["replicas"] == 3, timeout=90)
    assert [m.shard_id for m in plan(kube, ns).members] == ["demo-0", "demo-1", "demo-2"]
    assert plan(kube, ns).ring_version == 3
    assert {"Scaled", "RingChanged"} <= set(events(emulator, ns))
    remove_cluster(kube, ns)


def test_lora_adapter_placement_goes_into_the_plan(running_operator, kube, emulator, kube_node):
    ns = f"lora-{RUN}"
    create_cluster(kube, ns)
    eventually(lambda: sts(kube, ns))
    adapter = load_example("loraadapter.yaml")
    adapter["metadata"]["namespace"] = ns
    kube.create(adapter)
    # Each step is a kopf handler that re-plans the cluster and reads its shards: on a loaded
    # two-core machine that has taken over 15 s.
    placed = eventually(lambda: plan(kube, ns).adapters, timeout=60)
    assert placed[0].name == "legal" and len(placed[0].shards) == 2
    lora_status = eventually(
        lambda: (
            (kube.get(*LORA, ns, "legal").get("status") or {}).get("placedShards")
            and kube.get(*LORA, ns, "legal")["status"]
        ),
        timeout=60,
    )
    assert lora_status["placedShards"] == list(placed[0].shards)
    assert plan(kube, ns).ring_version == 1  # adapters never reshuffle the ring
    # These shards load no model, so none can load the adapter: its status must not say Loaded.
    eventually(lambda: all(s.get("reachable") for s in status(kube, ns).get("shards") or [{}]), timeout=60)
    time.sleep(2)  # a few status ticks
    assert kube.get(*LORA, ns, "legal")["status"].get("phase") != "Loaded"
    kube.delete(*LORA, ns, "legal")
    eventually(lambda: plan(kube, ns).adapters == (), timeout=60)
    eventually(lambda: kube.get(*LORA, ns, "legal") is None, timeout=60)
    remove_cluster(kube, ns)


def test_a_federated_adapter_asks_shard_0_for_rounds_and_reports_its_answer(
    running_operator, kube, emulator, kube_node
):
    """These shards run no model, so shard 0 refuses the rounds: the refusal is the status, once
    per generation, and the adapter (no source) never enters the plan."""
    ns = f"fed-{RUN}"
    create_cluster(kube, ns)
    eventually(lambda: all(s.get("reachable") for s in status(kube, ns).get("shards") or [{}]), timeout=60)
    adapter = load_example("loraadapter-federated.yaml")
    adapter["metadata"]["namespace"] = ns
    kube.create(adapter)
    fed = eventually(
        lambda: (kube.get(*LORA, ns, "legal-fed").get("status") or {}).get("federation"), timeout=60
    )
    # the test's shards run without a model: shard-0 answers the named 503, and the operator reports it
    assert fed["phase"] == "Failed" and fed["observedGeneration"] == 1
    assert fed["message"].startswith("503 llm_disabled"), fed["message"]
    assert plan(kube, ns).adapters == ()
    kube.delete(*LORA, ns, "legal-fed")
    eventually(lambda: kube.get(*LORA, ns, "legal-fed") is None)
    remove_cluster(kube, ns)


def test_invalid_spec_is_degraded_without_children_until_fixed(running_operator, kube, emulator, kube_node):
    ns = f"invalid-{RUN}"
    create_cluster(kube, ns, raidMode="raid6", shards=3)
    st = eventually(lambda: status(kube, ns).get("phase") == "Degraded" and status(kube, ns))
    assert "raid6 needs at least 4 shards" in st["message"]
    assert "InvalidSpec" in events(emulator, ns)
    time.sleep(1.5)
    assert sts(kube, ns) is None and kube.get("v1", "ConfigMap", ns, "demo-plan") is None
    kube.patch(*TC, ns, "demo", {"spec": {"shards": 4}})
    eventually(lambda: sts(kube, ns) and sts(kube, ns)["spec"]["replicas"] == 4)
    assert build_pdb_max_unavailable(kube, ns) == 2
    remove_cluster(kube, ns)


def build_pdb_max_unavailable(kube, ns):
    return kube.get("policy/v1", "PodDisruptionBudget", ns, "demo")["spec"]["maxUnavailable"]


def test_delete_removes_every_child(running_operator, kube, emulator, kube_node):
    ns = f"delete-{RUN}"
    create_cluster(kube, ns, monitoring={"serviceMonitor": True})
    eventually(lambda: kube.get("monitoring.coreos.com/v1", "ServiceMonitor", ns, "demo"))
    kube.delete(*TC, ns, "demo")
    eventually(lambda: kube.get(*TC, ns, "demo") is None)
    for api_version, plural in (
        ("v1", "secrets"),
        ("v1", "configmaps"),
        ("v1", "services"),
        ("apps/v1", "statefulsets"),
        ("policy/v1", "poddisruptionbudgets"),
        ("monitoring.coreos.com/v1", "servicemonitors"),
    ):
        assert emulator.objects(api_version, plural, ns) == [], plural
