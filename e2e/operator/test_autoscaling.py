"""Autoscaling that runs: the chart's HPA scales a ThemisCluster out under LLM load and back in.

Everything on the path is the real thing except the two Kubernetes parts the local Kubernetes
lacks (``themis_testing.autoscaler``): the HPA controller's loop and the custom metrics API, run
with the HPA controller's arithmetic and the chart's own Prometheus Adapter rules.

1. The kube stack (API emulator, process node, operator) and ``kubectl apply`` of what
   ``helm template`` renders for ``cluster.enabled`` + ``autoscaling.enabled``: the ThemisCluster
   (2 shards, RAID1, the bundled model), the autoscaling/v2 HPA on its scale subresource, and the
   Prometheus Adapter rules ConfigMap.
2. A real Prometheus scrapes the shard pods every second, with ``namespace``/``pod`` labels as the
   ServiceMonitor's scrape sets them. Debian's Prometheus is built without Kubernetes discovery,
   so the pods' addresses reach it as file-based targets, rewritten from the API server's pod list
   every second.
3. The metrics adapter serves the three signals per pod from that Prometheus with the rules from
   the ConfigMap; the HPA controller syncs every 2 s.
4. Concurrent completions through the cluster's Service push ``themis_pending_llm_requests`` over
   its target: the HPA writes ``spec.shards`` 3, the operator reshards, a third shard pod serves.
   The load stops: the HPA scales back to ``minShards`` and the operator hands the data off.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from themis_testing.background import Background
from themis_testing.ports import free_port

from .conftest import ROOT, Kubectl, eventually, kube_stack

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.llm,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="apt-get install -y prometheus"),
]

VALUES = {
    "cluster": {
        "enabled": True,
        "name": "demo",
        "spec": {
            "shards": 2,
            "raidMode": "raid1",
            "tls": {"enabled": False},
            "auth": {"enabled": False},
            "resources": {"gpus": 0},
        },
    },
    "autoscaling": {
        "enabled": True,
        "minShards": 2,
        "maxShards": 3,
        "targetPendingRequests": 2,
        # Live signals, set where this 2-core machine's idle and loaded shards do not cross them:
        # the test scales on the queue and checks that the other two are served.
        "targetKVUtilization": 0.95,
        "targetTTFTP90Seconds": 120,
        "scaleUpStabilizationSeconds": 0,
        "scaleDownStabilizationSeconds": 5,
        "scaleDownPeriodSeconds": 30,
    },
}
METRICS = {"themis_pending_llm_requests", "themis_llm_kv_utilization", "themis_llm_ttft_p90_seconds"}


def rendered(namespace: str) -> list[dict]:
    helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk==0.2.2")
    helm.disable_logging()
    out = helm.Chart.load(str(ROOT / "charts" / "themis")).render(
        VALUES, name="themis", namespace=namespace, is_install=True
    )
    return [d for path, text in out.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]


def prometheus_config(targets: Path) -> dict:
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "themis",
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
            }
        ],
    }


class PodTargets(threading.Thread):
    """Rewrites Prometheus' file targets from the API server's pods (podIP, the ``http`` port)."""

    def __init__(self, api_server: str, namespace: str, path: Path) -> None:
        super().__init__(daemon=True)
        self.url = f"{api_server}/api/v1/namespaces/{namespace}/pods"
        self.path, self.stop = path, threading.Event()
        self.write([])

    def write(self, groups: list[dict]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.path)

    def run(self) -> None:
        while not self.stop.wait(1):
            try:
                pods = httpx.get(self.url, params={"labelSelector": "app.kubernetes.io/name=themis"}).json()[
                    "items"
                ]
            except (httpx.HTTPError, ValueError):
                continue
            groups = []
            for pod in pods:
                ip = (pod.get("status") or {}).get("podIP")
                ports = [
                    p
                    for c in pod["spec"]["containers"]
                    for p in c.get("ports") or []
                    if p.get("name") == "http"
                ]
                if ip and ports:
                    labels = {"namespace": pod["metadata"]["namespace"], "pod": pod["metadata"]["name"]}
                    groups.append({"targets": [f"{ip}:{ports[0]['containerPort']}"], "labels": labels})
            self.write(groups)


def spawn(argv: list[str], log: Path) -> subprocess.Popen:
    env_path = ":".join(str(ROOT / p) for p in ("shard", "operator", "testing", "client"))
    return subprocess.Popen(
        argv,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": env_path},
    )


class Load(Background):
    """``clients`` threads sending greedy completions through the Service until stopped."""

    def __init__(self, url: str, clients: int) -> None:
        self.url, self.clients = url, clients
        self.answered = 0
        super().__init__(*[self._run] * clients, join_s=150)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as http:
            while not self.stop.is_set():
                r = http.post(
                    "/v1/completions",
                    json={"prompt": "Write a long story about a lighthouse keeper.", "max_tokens": 48},
                )
                if r.status_code == 200:
                    self.answered += 1


def test_the_hpa_scales_the_cluster_out_under_llm_load_and_back_in_when_idle(kubectl_binary, tmp_path):
    namespace = f"hpa-{uuid.uuid4().hex[:6]}"
    docs = rendered(namespace)
    wanted = [
        d
        for d in docs
        if d["kind"] in ("ThemisCluster", "HorizontalPodAutoscaler")
        or d["metadata"]["name"].endswith("prometheus-adapter-rules")
    ]
    assert {d["kind"] for d in wanted} == {"ThemisCluster", "HorizontalPodAutoscaler", "ConfigMap"}
    procs: list[subprocess.Popen] = []
    with kube_stack(tmp_path / "kube", namespace, operator=False) as stack:
        kubectl = Kubectl(kubectl_binary, stack.kubeconfig, namespace)
        kubectl.run("apply", "-f", str(ROOT / "crds"))
        kubectl.run("create", "namespace", namespace, check=False)
        kubectl.run("apply", "-f", "-", input=yaml.safe_dump_all(wanted))
        # started once its CRD, namespace and cluster exist: a kopf that looked before the CRD
        # was there once never saw the cluster (CI: no handler ran in 7 minutes)
        stack.start_operator()

        rules = kubectl.json("configmap", "themis-prometheus-adapter-rules")["data"]["config.yaml"]
        (tmp_path / "adapter.yaml").write_text(rules)
        targets = PodTargets(stack.url, namespace, tmp_path / "targets.json")
        targets.start()
        (tmp_path / "prometheus.yml").write_text(json.dumps(prometheus_config(targets.path)))
        prom_port, adapter_port = free_port(), free_port()
        prometheus = f"http://127.0.0.1:{prom_port}"
        metrics_api = f"http://127.0.0.1:{adapter_port}"
        try:
            procs.append(
                spawn(
                    [
                        shutil.which("prometheus"),
                        f"--config.file={tmp_path / 'prometheus.yml'}",
                        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{prom_port}",
                    ],
                    tmp_path / "prometheus.log",
                )
            )
            module = [sys.executable, "-m", "themis_testing.autoscaler"]
            procs.append(
                spawn(
                    [
                        *module,
                        "adapter",
                        "--config",
                        str(tmp_path / "adapter.yaml"),
                        "--prometheus-url",
                        prometheus,
                        "--kubeconfig",
                        str(stack.kubeconfig),
                        "--port",
                        str(adapter_port),
                    ],
                    tmp_path / "adapter.log",
                )
            )
            procs.append(
                spawn(
                    [
                        *module,
                        "controller",
                        "--kubeconfig",
                        str(stack.kubeconfig),
                        "--metrics-url",
                        metrics_api,
                        "--namespace",
                        namespace,
                        "--sync-period",
                        "2",
                    ],
                    tmp_path / "hpa.log",
                )
            )

            def ready(count: int) -> bool:
                """``count`` shard pods Ready and the cluster Ready at that size"""
                pods = kubectl.json("pods", "-l", "app.kubernetes.io/instance=demo")["items"]
                tc = kubectl.json("tc", "demo")
                return (
                    len(pods) == count
                    and all(
                        any(
                            c["type"] == "Ready" and c["status"] == "True"
                            for c in p["status"].get("conditions") or []
                        )
                        for p in pods
                    )
                    and any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in (tc.get("status") or {}).get("conditions") or []
                    )
                    and len((tc.get("status") or {}).get("shards") or []) == count
                )

            eventually(lambda: ready(2), timeout=420, interval=2)

            def served() -> dict:
                """the custom metrics API serves all three signals for both pods, from Prometheus"""
                out = {}
                for metric in METRICS:
                    r = httpx.get(
                        f"{metrics_api}/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{metric}",
                        params={"labelSelector": "app.kubernetes.io/instance=demo"},
                    )
                    items = r.json()["items"] if r.status_code == 200 else []
                    if {i["describedObject"]["name"] for i in items} != {"demo-0", "demo-1"}:
                        return {}
                    out[metric] = items
                return out

            idle = eventually(served, timeout=60, interval=1)
            assert all(i["value"] == "0" for i in idle["themis_pending_llm_requests"])

            service = f"http://demo.{namespace}.svc:8080"
            started = time.monotonic()
            with Load(service, clients=12) as load:
                eventually(lambda: kubectl.json("tc", "demo")["spec"]["shards"] == 3, timeout=240, interval=1)
                scaled_out_s = time.monotonic() - started
                hpa = kubectl.json("hpa", "demo")
                eventually(lambda: ready(3), timeout=420, interval=2)
            print(f"scaled out after {scaled_out_s:.1f}s of load; {load.answered} completions answered")
            status = hpa["status"]
            assert status["desiredReplicas"] == 3
            observed = {
                m["pods"]["metric"]["name"]: m["pods"]["current"]["averageValue"]
                for m in status["currentMetrics"]
            }
            assert set(observed) == METRICS, observed
            print("HPA status at scale-out:", json.dumps(status))

            # Idle: the HPA follows the queue back down to minShards; the operator drains demo-2 first.
            stopped = time.monotonic()
            eventually(lambda: kubectl.json("tc", "demo")["spec"]["shards"] == 2, timeout=180, interval=1)
            eventually(lambda: ready(2), timeout=300, interval=2)
            print(f"scaled back in {time.monotonic() - stopped:.1f}s after the load stopped")
            print(kubectl.run("get", "hpa,tc,pods", "-o", "wide").stdout)
            with httpx.Client(base_url=service, timeout=120) as http:
                r = http.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 4})
                assert r.status_code == 200, r.text
        finally:
            targets.stop.set()
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
            for name in ("hpa", "adapter", "prometheus"):
                log = tmp_path / f"{name}.log"
                if log.exists():
                    print(f"---- {name}.log (tail)\n" + log.read_text()[-2500:])
