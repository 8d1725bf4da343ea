"""The real model through the front door: ``make kube-up``, then ``kubectl apply -f crds/`` and
``kubectl apply -f examples/themiscluster.yaml`` as it is (bundled Gemma 3 270M, RAID5, TLS),
the pods real shard processes on the process node, then a completion through the cluster's
client Service, and ``make kube-down``.

The node runs pods from what Dockerfile.shard puts in the image (``kube_node.image``): were the
Dockerfile to leave the bundled model out, the shards could not start — as in a real cluster —
and this test fails at the first crash with the shard's own reason.
"""

import base64
import json
import os
import ssl
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from themis_client import ThemisClient, Unauthorized

from .conftest import NODE_ENV, OPERATOR_ENV, ROOT, Kubectl, api_key, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.llm]


def pods_ready(kubectl: Kubectl, count: int) -> bool:
    """every shard pod Running and Ready (fails at once on a crash, with the shard's reason)"""
    pods = kubectl.json("pods", "-l", "app.kubernetes.io/instance=demo")["items"]
    for pod in pods:
        for c in pod["status"].get("containerStatuses") or []:
            if c["restartCount"] > 0:
                last = c["lastState"].get("terminated", {})
                pytest.fail(f"{pod['metadata']['name']} crashed: {last.get('message', '')[-1500:]}")
    return len(pods) == count and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
        for p in pods
    )


def make(target: str, kube_dir: Path, env: dict[str, str]) -> str:
    venv = Path(sys.executable).parent.parent
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT), target, f"VENV={venv}", f"KUBE_DIR={kube_dir}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_make_kube_up_then_the_example_cluster_answers_a_completion_through_its_service(
    kubectl_binary, tmp_path
):
    namespace = f"e2e-{uuid.uuid4().hex[:6]}"
    kube_dir = tmp_path / "kube"
    # The node's and operator's knobs for a quick test; the manifests are the operator's own.
    env = {
        **NODE_ENV,
        **OPERATOR_ENV,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("shard", "operator", "testing")),
    }
    out = make("kube-up", kube_dir, env)
    assert f"kubeconfig {kube_dir / 'kubeconfig'}" in out
    try:
        kubectl = Kubectl(kubectl_binary, kube_dir / "kubeconfig", namespace)
        kubectl.run("apply", "-f", str(ROOT / "crds"))
        kubectl.run("apply", "-f", str(ROOT / "examples/themiscluster.yaml"))
        eventually(lambda: kubectl.exists("statefulset", "demo"))
        eventually(lambda: pods_ready(kubectl, 3), timeout=420, interval=2)
        kubectl.run("wait", "--for=condition=Ready", "tc/demo", "--timeout=120s")
        print(kubectl.run("get", "tc,pods", "-o", "wide").stdout)

        ca = base64.b64decode(kubectl.json("secret", "demo-tls")["data"]["ca.crt"]).decode()
        service = f"https://demo.{namespace}.svc:8080"
        tls = ssl.create_default_context(cadata=ca)
        prompt = {"max_tokens": 8, "temperature": 0}
        with ThemisClient(service, verify=tls, timeout=120) as anonymous, pytest.raises(Unauthorized):
            anonymous.infer("The capital of France is", **prompt)  # keys are on in Kubernetes
        with ThemisClient(
            service, verify=tls, timeout=120, headers=api_key(kubectl, "demo", "client")
        ) as themis_db:
            out = themis_db.infer("The capital of France is", **prompt)
        assert out.text and out.text.strip() and out.shard_id in {"demo-0", "demo-1", "demo-2"}
        print(out.model_dump_json()[:500])
    finally:
        pids = json.loads((kube_dir / "pids.json").read_text()).values()
        make("kube-down", kube_dir, env)
        for name in ("operator", "node"):
            print(f"---- {name}.log (tail)\n" + (kube_dir / f"{name}.log").read_text()[-2000:])
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert f".{namespace}.svc" not in Path("/etc/hosts").read_text()
