"""`helm install` of charts/themis into the Kubernetes API emulator, then the operator at work.

helm-sdkpy (Helm's Go code, no binary) installs the chart with ``HELM_DRIVER=memory`` (set
before its process starts, so in a child process) into ``themis_testing.emulator``:
CRDs from crds/, RBAC, the operator Deployment, dashboards ConfigMaps, ServiceMonitor,
PrometheusRule and a ThemisCluster from values. Then the operator runs as a process with the
arguments of the Deployment Helm created, and reconciles the chart's ThemisCluster into its
StatefulSet, Services, plan ConfigMap, PDB and status — and the process node
(``themis_testing.kube_node``) runs the StatefulSet's pods as real shard processes, whose
``/v1/cluster/status`` the operator reads into the cluster's status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from themis_testing import real_cluster  # noqa: E402 (needs the path above)
from themis_testing.ports import free_port  # noqa: E402

#: A fresh namespace per run keeps the node's /etc/hosts names apart from other runs.
NAMESPACE = f"themis-{uuid.uuid4().hex[:6]}"
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VALUES = {
    "cluster": {
        "enabled": True,
        "name": "demo",
        # Shards without a model (fast); the real model: e2e/operator/test_kube_model.py
        "spec": {"shards": 2, "raidMode": "raid1", "engine": {"llm": False}},
    },
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "operator": {"statusIntervalSeconds": 1},
}

INSTALL = """
import asyncio, json, sys
import helm_sdkpy
kubeconfig, chart, namespace, values = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=kubeconfig)
release = asyncio.run(helm_sdkpy.Install(config).run("themis", chart, values=values, wait=False, timeout=60))
print(json.dumps({"name": release.get("name"), "status": (release.get("info") or {}).get("status")}))
"""


def eventually(check, timeout: float = 30.0, log: Path | None = None, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            raise AssertionError(f"not true within {timeout}s: {check.__doc__ or check}\n{tail}")
        time.sleep(interval)


@pytest.fixture
def emulator(monkeypatch):
    pytest.importorskip("helm_sdkpy", reason="pip install helm-sdkpy==0.1.32")
    from themis_testing import emulator as module
    from themis_testing.emulator import Kind, running_emulator

    async def server_version(self, request):
        # kmock answers v1.26.4; the chart requires kubeVersion >= 1.29 (Helm checks /version).
        return {
            "major": "1",
            "minor": "37",
            "gitVersion": "v1.37.0",
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    monkeypatch.setattr(module.ThemisEmulator, "_serve_server_version", server_version)
    extra = [
        Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
        Kind(
            "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
        ),
        Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        # The Prometheus Operator's CRDs, as on a cluster running kube-prometheus-stack.
        Kind("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor"),
        Kind("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule"),
    ]
    with running_emulator() as server:
        for kind in extra:
            server.call(lambda e, k=kind: e.register(k))
        yield server


def helm_install(kubeconfig: Path, values: dict) -> dict:
    env = {**os.environ, "HELM_DRIVER": "memory"}  # read once, when Helm's Go code starts
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            INSTALL,
            str(kubeconfig),
            str(ROOT / "charts" / "themis"),
            NAMESPACE,
            json.dumps(values),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def names(emulator, api_version: str, plural: str, namespace: str | None = None) -> set[str]:
    return {o["metadata"]["name"] for o in emulator.objects(api_version, plural, namespace)}


def test_helm_install_then_the_operator_reconciles_the_charts_cluster(emulator, tmp_path):
    from themis_testing.kube_node.stack import Stack

    kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)
    release = helm_install(kubeconfig, VALUES)
    assert release == {"name": "themis", "status": "deployed"}

    # What Helm created: CRDs from crds/, then the templates.
    assert names(emulator, "apiextensions.k8s.io/v1", "customresourcedefinitions") == {
        "themisclusters.themisdb.io",
        "loraadapters.themisdb.io",
        "themisbackups.themisdb.io",
        "themisscheduledbackups.themisdb.io",
    }
    assert names(emulator, "rbac.authorization.k8s.io/v1", "clusterroles") == {"themis-operator"}
    assert names(emulator, "rbac.authorization.k8s.io/v1", "clusterrolebindings") == {"themis-operator"}
    assert names(emulator, "v1", "serviceaccounts", NAMESPACE) == {"themis-operator"}
    assert names(emulator, "monitoring.coreos.com/v1", "servicemonitors", NAMESPACE) == {"themis-shards"}
    assert names(emulator, "monitoring.coreos.com/v1", "prometheusrules", NAMESPACE) == {"themis-alerts"}
    dashboards = names(emulator, "v1", "configmaps", NAMESPACE)
    assert dashboards == {f"themis-dashboard-{p.stem}" for p in (ROOT / "dashboards").glob("*.json")}
    (deployment,) = emulator.objects("apps/v1", "deployments", NAMESPACE)
    (cluster,) = emulator.objects("themisdb.io/v1alpha1", "themisclusters", NAMESPACE)
    assert cluster["metadata"]["name"] == "demo" and cluster["spec"]["shards"] == 2
    assert cluster["spec"]["tls"]["enabled"] is True  # defaulted from the CRD schema by the API server

    # The operator, started with the arguments of the Deployment Helm created.
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["command"][1:]
    args[args.index("--liveness") + 1] = f"http://127.0.0.1:{free_port()}/healthz"
    env = {e["name"]: e["value"] for e in container["env"]}
    if "THEMIS_OPERATOR_METRICS_PORT" in env:  # a fixed port could be taken on a shared machine
        env["THEMIS_OPERATOR_METRICS_PORT"] = str(free_port())
    node = Stack(
        tmp_path / "kube",
        kubeconfig=kubeconfig,
        operator=False,
        node_env={"THEMIS_KUBE_NODE_PROBE_PERIOD_MAX_S": "1", "THEMIS_KUBE_NODE_BACKOFF_INITIAL_S": "1"},
    ).start()
    log = tmp_path / "operator.log"
    operator = subprocess.Popen(
        [sys.executable, "-m", "themis_operator", "--kubeconfig", str(kubeconfig), *args],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={
            **os.environ,
            **env,
            "THEMIS_OPERATOR_PROBE_TIMEOUT_S": "2",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "shard"), str(ROOT / "operator")]),
        },
    )
    try:

        def reconciled():
            """the StatefulSet, Services, plan, PDB and Secrets of the chart's cluster exist"""
            return (
                names(emulator, "apps/v1", "statefulsets", NAMESPACE) == {"demo"}
                and {"demo", "demo-headless"} <= names(emulator, "v1", "services", NAMESPACE)
                and "demo-plan" in names(emulator, "v1", "configmaps", NAMESPACE)
                and {"demo-tls", "demo-ca"} <= names(emulator, "v1", "secrets", NAMESPACE)
                and names(emulator, "policy/v1", "poddisruptionbudgets", NAMESPACE) == {"demo"}
            )

        eventually(reconciled, 60, log)
        (statefulset,) = emulator.objects("apps/v1", "statefulsets", NAMESPACE)
        assert statefulset["spec"]["replicas"] == 2
        assert statefulset["metadata"]["ownerReferences"][0]["uid"] == cluster["metadata"]["uid"]

        def status():
            """both shard pods ready, reported reachable at the generation the operator observed"""
            (tc,) = emulator.objects("themisdb.io/v1alpha1", "themisclusters", NAMESPACE)
            st = tc.get("status") or {}
            shards = st.get("shards") or []
            return (
                st.get("observedGeneration") == 1
                and len(shards) == 2
                and all(s.get("reachable") and s.get("state") == "alive" for s in shards)
                and st
            )

        st = eventually(status, 90, log)
        assert st["ringVersion"] == 1

        def pods_ready():
            """the StatefulSet's two pods are real shard processes that pass their readiness probe"""
            pods = emulator.objects("v1", "pods", NAMESPACE)
            return sorted(p["metadata"]["name"] for p in pods) == ["demo-0", "demo-1"] and all(
                p["status"]["containerStatuses"][0]["ready"] for p in pods
            )

        eventually(pods_ready, 60, log)
        assert operator.poll() is None, log.read_text()[-3000:]
    finally:
        operator.terminate()
        try:
            operator.wait(15)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait(5)
        node.stop()


# ---- the same chart on a real cluster (kind/k3d), skipped when none is reachable -------------------
def reachable_cluster() -> str | None:
    """The kubeconfig of a ready kind/k3d cluster (or any with THEMIS_E2E_CLUSTER=1), or None."""
    found = real_cluster.reachable_cluster()
    return found[1] if found else None


REAL = """
import asyncio, json, sys
import helm_sdkpy
kubeconfig, chart, namespace, values = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=kubeconfig)
try:
    release = asyncio.run(helm_sdkpy.Install(config).run(
        "themis-e2e", chart, values=values, create_namespace=True, wait=False, timeout=120))
    status = asyncio.run(helm_sdkpy.Status(config).run("themis-e2e"))
    print(json.dumps({"status": (status.get("info") or {}).get("status")}))
finally:
    asyncio.run(helm_sdkpy.Uninstall(config).run("themis-e2e", wait=True, timeout=120))
"""


def test_helm_install_on_a_real_cluster(tmp_path):
    """Install and uninstall with a real API server's admission (schema, RBAC escalation checks)."""
    pytest.importorskip("helm_sdkpy", reason="pip install helm-sdkpy==0.1.32")
    kubeconfig = reachable_cluster()
    if kubeconfig is None:
        pytest.skip("no reachable kind/k3d cluster (or THEMIS_E2E_CLUSTER=1 with a kubeconfig)")
    namespace = f"themis-helm-{uuid.uuid4().hex[:6]}"
    values = {
        "fullnameOverride": namespace,
        "cluster": {"enabled": True, "name": "demo", "spec": {"shards": 1}},
    }
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                REAL,
                kubeconfig,
                str(ROOT / "charts" / "themis"),
                namespace,
                json.dumps(values),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "deployed"}
    finally:
        kubectl = Path(sys.executable).parent / "kubectl"
        binary = str(kubectl) if kubectl.exists() else "kubectl"
        cleanup = [
            binary,
            f"--kubeconfig={kubeconfig}",
            "delete",
            "namespace",
            namespace,
            "--ignore-not-found",
        ]
        subprocess.run([*cleanup, "--wait=false"], capture_output=True, timeout=60)
