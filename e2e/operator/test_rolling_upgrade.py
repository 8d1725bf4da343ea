"""A rolling upgrade through the operator, black-box: kubectl changes a running ThemisCluster's pod
template (``spec.logging.level``, as a new image would) and the operator rolls the real shard pods
of the process node one at a time, highest ordinal first, each step only once the previous pod is
Ready and no hinted write is pending, while a client keeps writing and reading through the
cluster's Service: no acknowledged write is lost and no read fails.

Reads are linearizable by default (primary only). In Kubernetes the operator is not yet the plan
authority that fails a restarting primary over to its in-sync copy, so this cluster opts into
the replica read fallback (``spec.env``, ``THEMIS_CLUSTER_READ_FROM_REPLICAS``), the documented
way to keep reads available through a roll until it is."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml
from themis_client import ThemisClient

from .conftest import ROOT, Kubectl, eventually, kubectl_on_stack, light, tls_client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def kubectl(kubectl_binary, tmp_path_factory):
    with kubectl_on_stack(kubectl_binary, tmp_path_factory.mktemp("kube"), "roll") as k:
        yield k


def client(kubectl: Kubectl) -> ThemisClient:
    return tls_client(kubectl, "demo", timeout=10)


def pods(kubectl: Kubectl) -> dict[str, dict]:
    items = kubectl.json("pods", "-l", "app.kubernetes.io/instance=demo")["items"]
    return {p["metadata"]["name"]: p for p in items}


def ready(pod: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def test_a_template_change_rolls_one_shard_at_a_time_without_losing_a_write_or_failing_a_read(kubectl):
    example = light(yaml.safe_load((ROOT / "examples/themiscluster.yaml").read_text()))
    example["spec"]["raidMode"] = "raid1"
    example["spec"]["env"] = [{"name": "THEMIS_CLUSTER_READ_FROM_REPLICAS", "value": "true"}]
    kubectl.run("apply", "-f", "-", input=json.dumps(example))
    eventually(lambda: len(p := pods(kubectl)) == 3 and all(ready(x) for x in p.values()), timeout=120)
    before = {name: p["metadata"]["uid"] for name, p in pods(kubectl).items()}
    with client(kubectl) as db:  # pods are Ready before the Service routes to them (endpoints follow)
        eventually(lambda: db.put("roll", "seed", {"n": 0}), timeout=60)

    acked: dict[str, int] = {}
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with client(kubectl) as db:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"k{n % 20}"
                try:
                    db.put("roll", key, {"n": n})
                    acked[key] = n
                except Exception:
                    pass
                for k, v in list(acked.items())[:3]:
                    try:
                        got = db.get("roll", k).document["n"]
                        if got < v:
                            failures.append(f"{k}: read {got} after {v} was acknowledged")
                    except Exception as e:
                        failures.append(f"{k}: {type(e).__name__}: {e}")
                time.sleep(0.05)

    worker = threading.Thread(target=load)
    worker.start()
    try:
        eventually(lambda: len(acked) >= 5, timeout=60)
        kubectl.run(
            "patch", "tc", "demo", "--type=merge", "-p", json.dumps({"spec": {"logging": {"level": "debug"}}})
        )
        replaced: list[str] = []
        most_down = 0
        deadline = time.monotonic() + 300
        while len(replaced) < 3:
            assert time.monotonic() < deadline, f"rolled only {replaced}"
            now = pods(kubectl)
            most_down = max(most_down, sum(1 for name in before if name not in now or not ready(now[name])))
            for name, p in now.items():
                if p["metadata"]["uid"] != before[name] and ready(p) and name not in replaced:
                    replaced.append(name)
            time.sleep(0.2)
        assert replaced == ["demo-2", "demo-1", "demo-0"]  # highest ordinal first, one at a time
        assert most_down <= 1
        sts = kubectl.json("statefulset", "demo")
        eventually(
            lambda: (
                kubectl.json("statefulset", "demo")["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
                == 0
            )
        )
        env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["THEMIS_LOG_LEVEL"] == "debug"
        time.sleep(2)
    finally:
        stop.set()
        worker.join(30)
    assert failures == []
    with client(kubectl) as db:
        for key, n in acked.items():
            assert db.get("roll", key).document["n"] >= n
