"""The process node on its own (no operator): what a StatefulSet, its pods and a Service become.

A tiny web server stands in for a workload (``python -m http.server`` from the image's venv):
its pods start from their spec — ``$(VAR)`` in args, a wildcard bind address becoming the
pod's own, a ConfigMap volume kept up to date, a PVC that outlives the pod — pass their
readiness probe, are reachable at their podIPs and through the Service's name, are recreated
when deleted, and a container that keeps exiting goes into CrashLoopBackOff.
"""

import json
import uuid
from pathlib import Path

import httpx
import pytest

from .conftest import Kubectl, eventually, kube_stack

pytestmark = [pytest.mark.e2e]


def statefulset(name: str, command: list[str], replicas: int = 2, probe: bool = True) -> dict:
    container = {
        "name": "web",
        "image": "ghcr.io/themisdb/themis-shard:0.1.0",
        "command": command,
        "env": [
            {"name": "BIND", "value": "0.0.0.0"},
            {"name": "SRV", "value": "/srv"},
            {"name": "DATA", "value": "$(SRV)/data"},
            {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": [
            {"name": "conf", "mountPath": "/srv/conf"},
            {"name": "data", "mountPath": "/srv/data"},
        ],
    }
    if probe:
        container["readinessProbe"] = {
            "httpGet": {"path": "/conf/greeting", "port": "http"},
            "periodSeconds": 1,
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [container],
                    "volumes": [{"name": "conf", "configMap": {"name": "greeting"}}],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
                }
            ],
        },
    }


WEB = [
    "sh",
    "-c",
    'echo "$ME" >> "$DATA/boots" && exec python -m http.server 8080 --bind "$BIND" --directory "$SRV"',
]


@pytest.fixture(scope="module")
def node(kubectl_binary, tmp_path_factory):
    namespace = f"node-{uuid.uuid4().hex[:6]}"
    with kube_stack(tmp_path_factory.mktemp("kube"), namespace, operator=False) as stack:
        kubectl = Kubectl(kubectl_binary, stack.kubeconfig, namespace)
        for obj in (
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "greeting"},
                "data": {"greeting": "hello"},
            },
            statefulset("web", WEB),
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": "http"}]},
            },
        ):
            kubectl.run("create", "-f", "-", input=json.dumps(obj))
        yield kubectl


def pod(kubectl: Kubectl, name: str) -> dict:
    return kubectl.json("pod", name)


def ready(p: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])
    )


def test_pods_start_from_their_spec_and_serve_on_their_own_address(node):
    kubectl = node
    eventually(lambda: all(ready(pod(kubectl, f"web-{i}")) for i in range(2)), timeout=30)
    eventually(lambda: kubectl.json("statefulset", "web")["status"]["readyReplicas"] == 2)
    ips = [pod(kubectl, f"web-{i}")["status"]["podIP"] for i in range(2)]
    assert len(set(ips)) == 2
    for i, ip in enumerate(ips):
        assert httpx.get(f"http://{ip}:8080/conf/greeting").text == "hello"
        assert httpx.get(f"http://{ip}:8080/data/boots").text == f"web-{i}\n"  # $(ME) from the fieldRef
    # The pods' DNS names (hostname.subdomain) and the Service's name resolve here.
    assert (
        httpx.get(f"http://web-1.web.{kubectl.namespace}.svc.cluster.local:8080/conf/greeting").text
        == "hello"
    )
    assert httpx.get(f"http://web.{kubectl.namespace}.svc:8080/conf/greeting").text == "hello"


def test_a_changed_config_map_reaches_the_mounted_file(node):
    kubectl = node
    kubectl.run(
        "patch", "configmap", "greeting", "--type", "merge", "-p", '{"data": {"greeting": "bonjour"}}'
    )
    ip = pod(kubectl, "web-0")["status"]["podIP"]
    eventually(lambda: httpx.get(f"http://{ip}:8080/conf/greeting").text == "bonjour")


def test_a_deleted_pod_is_recreated_with_its_volume_and_the_old_process_stopped(node):
    kubectl = node
    old = pod(kubectl, "web-0")
    pid = int(old["status"]["containerStatuses"][0]["containerID"].removeprefix("process://"))
    kubectl.run("delete", "pod", "web-0")
    eventually(lambda: pod(kubectl, "web-0")["metadata"]["uid"] != old["metadata"]["uid"])
    eventually(lambda: ready(pod(kubectl, "web-0")), timeout=30)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    ip = pod(kubectl, "web-0")["status"]["podIP"]
    assert httpx.get(f"http://{ip}:8080/data/boots").text == "web-0\nweb-0\n"  # the PVC outlived the pod


def test_a_container_that_keeps_exiting_goes_into_crash_loop_back_off(node):
    kubectl = node
    crash = statefulset(
        "crash", ["python", "-c", "import sys; print('bye'); sys.exit(3)"], replicas=1, probe=False
    )
    kubectl.run("create", "-f", "-", input=json.dumps(crash))

    def crash_looping():
        status = pod(kubectl, "crash-0")["status"]["containerStatuses"][0]
        return (
            status["restartCount"] >= 2
            and status["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
            and status
        )

    status = eventually(crash_looping, timeout=30)
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert not status["ready"]
    assert "CrashLoopBackOff" in kubectl.run("get", "pod", "crash-0").stdout
    kubectl.run("delete", "statefulset", "crash")
    eventually(lambda: not kubectl.exists("pod", "crash-0"))


def test_scaling_the_statefulset_adds_and_removes_pods_but_keeps_claims(node):
    kubectl = node
    kubectl.run("scale", "statefulset", "web", "--replicas=3")
    eventually(lambda: kubectl.exists("pod", "web-2") and ready(pod(kubectl, "web-2")), timeout=30)
    kubectl.run("scale", "statefulset", "web", "--replicas=1")
    eventually(lambda: not kubectl.exists("pod", "web-2") and not kubectl.exists("pod", "web-1"), timeout=30)
    assert kubectl.exists("pvc", "data-web-2")
