"""Backup and restore through the front door: ``kubectl`` against the API emulator, the real
operator and real shard pods on the process node, moto's S3 server as the object store.

A ThemisBackup of a 3-shard cluster (RAID5, TLS, API keys) completes and ``kubectl get tbk``
shows it; the cluster is deleted with its volumes; a new 2-shard ThemisCluster with
``spec.bootstrap.fromBackup`` serves every document at its version, and a vector search answers
as before.
"""

import base64
import json
import uuid

import pytest
import yaml
from themis_client import ThemisClient
from themis_testing.s3 import moto_s3

from .conftest import ROOT, Kubectl, eventually, kube_stack, light, tls_client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with moto_s3(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


def client(kubectl: Kubectl, cluster: str) -> ThemisClient:
    return tls_client(kubectl, cluster, timeout=20)


def ready_pods(kubectl: Kubectl, cluster: str, count: int) -> bool:
    pods = kubectl.json("pods", "-l", f"app.kubernetes.io/instance={cluster}")["items"]
    return len(pods) == count and all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
        for p in pods
    )


DESTINATION = {"url": "s3://backups/k8s", "region": "us-east-1", "credentialsSecret": {"name": "backup-s3"}}


def test_a_themisbackup_restores_into_a_new_cluster_with_another_shard_count(kubectl_binary, s3, tmp_path):
    namespace = f"bk-{uuid.uuid4().hex[:6]}"
    with kube_stack(tmp_path / "kube", namespace) as stack:
        kubectl = Kubectl(kubectl_binary, stack.kubeconfig, namespace)
        kubectl.run("apply", "--validate=false", "-f", str(ROOT / "crds"))
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "backup-s3"},
            "data": {
                k: base64.b64encode(b"test").decode() for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
            },
        }
        kubectl.run("apply", "--validate=false", "-f", "-", input=json.dumps(secret))
        source = light(yaml.safe_load((ROOT / "examples/themiscluster.yaml").read_text()))
        kubectl.run("apply", "--validate=false", "-f", "-", input=json.dumps(source))
        eventually(lambda: ready_pods(kubectl, "demo", 3), timeout=120, interval=1)
        with client(kubectl, "demo") as db:
            eventually(lambda: db.declare_collection("books", dimension=3, index="flat"), timeout=60)
            for i in range(40):
                db.put("books", f"b{i}", {"n": i, "embedding": [i, 1.0, (i % 5) / 5]})
            db.put("books", "b3", {"n": 3, "again": True, "embedding": [3, 1.0, 0.6]})
            db.delete("books", "b4")
            before = {f"b{i}": db.get("books", f"b{i}") for i in range(40) if i != 4}
            answer = [(h.urn, round(h.score, 5)) for h in db.search("books", vector=[5, 1, 0.2], k=5).results]

        backup = {
            "apiVersion": "themisdb.io/v1alpha1",
            "kind": "ThemisBackup",
            "metadata": {"name": "before"},
            "spec": {"clusterRef": {"name": "demo"}, "destination": DESTINATION | {"endpointURL": s3}},
        }
        kubectl.run("apply", "--validate=false", "-f", "-", input=json.dumps(backup))
        status = eventually(
            lambda: (
                (s := kubectl.json("tbk", "before").get("status") or {}).get("phase")
                in ("Completed", "Failed")
                and s
            ),
            timeout=120,
            interval=1,
        )
        assert status["phase"] == "Completed", status
        table = kubectl.run("get", "tbk").stdout
        assert table.splitlines()[0].split() == [
            "NAME",
            "CLUSTER",
            "PHASE",
            "PROGRESS",
            "SIZE",
            "BACKUP",
            "AGE",
        ]
        assert status["backupId"] in table and "100%" in table

        kubectl.run("delete", "tc", "demo", "--timeout=60s")
        restored = light(yaml.safe_load((ROOT / "examples/themiscluster-restore.yaml").read_text()))
        restored["spec"]["bootstrap"]["fromBackup"] = {
            "backupId": status["backupId"],
            "destination": DESTINATION | {"endpointURL": s3},
        }
        kubectl.run("apply", "--validate=false", "-f", "-", input=json.dumps(restored))
        eventually(lambda: ready_pods(kubectl, "demo-restored", 2), timeout=180, interval=1)
        with client(kubectl, "demo-restored") as db:
            after = eventually(lambda: {k: db.get("books", k) for k in before}, timeout=60)
            assert {k: (d.version, d.document) for k, d in after.items()} == {
                k: (d.version, d.document) for k, d in before.items()
            }
            assert [
                (h.urn, round(h.score, 5)) for h in db.search("books", vector=[5, 1, 0.2], k=5).results
            ] == answer
