"""Failover in Kubernetes, black-box: with ``spec.failover.enabled`` the operator is the plan
authority (``themis_operator.plan_authority``). It probes the real shard pods of the process
node over mTLS, grants their primary leases (anchored on each shard's clock), and when a shard
pod stops answering (``SIGSTOP``: paused, then restarted by its liveness probe) it moves that
shard's keys to their in-sync copies under a new epoch written to the plan ConfigMap. Every key
becomes writable again through the surviving pods with the default ``w=all`` (every in-sync
copy), no acknowledged write is lost, and the shard rejoins once it caught up. The test prints
how long each step took; its bounds are generous (numbers belong to benchmarks).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import pytest
import yaml
from themis_client import ThemisClient, ThemisError

from .conftest import ROOT, Kubectl, eventually, kubectl_on_stack, light, tls_client

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLUSTER = "fo"
KEYS = [f"k{i}" for i in range(24)]
BOUND_S = 60.0


@pytest.fixture(scope="module")
def kubectl(kubectl_binary, tmp_path_factory):
    with kubectl_on_stack(kubectl_binary, tmp_path_factory.mktemp("kube"), "failover") as k:
        yield k


def shard_client(kubectl: Kubectl, index: int) -> ThemisClient:
    """A client of one shard pod (its own address, not the Service's)."""
    return tls_client(kubectl, CLUSTER, host=f"{CLUSTER}-{index}.{CLUSTER}-headless", timeout=5)


def plan(kubectl: Kubectl) -> dict:
    return json.loads(kubectl.json("configmap", f"{CLUSTER}-plan")["data"]["plan.json"])


def pod_ready(kubectl: Kubectl, name: str) -> bool:
    pod = kubectl.json("pod", name)
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def pod_pid(kubectl: Kubectl, name: str) -> int:
    status = kubectl.json("pod", name)["status"]["containerStatuses"][0]
    return int(status["containerID"].removeprefix("process://"))


def test_a_paused_shard_pod_is_failed_over_by_the_operator_and_rejoins_without_losing_a_write(kubectl):
    example = light(yaml.safe_load((ROOT / "examples/themiscluster.yaml").read_text()))
    example["metadata"]["name"] = CLUSTER
    spec = example["spec"]
    spec.update(shards=3, raidMode="raid1", failover={"enabled": True})
    kubectl.run("apply", "-f", "-", input=json.dumps(example))
    eventually(lambda: all(pod_ready(kubectl, f"{CLUSTER}-{i}") for i in range(3)), timeout=120)
    assert plan(kubectl)["failover"]["lease_s"] == 2.0

    clients = [shard_client(kubectl, i) for i in range(3)]
    acked: dict[str, tuple[int, int]] = {}  # key -> (version, value) acknowledged last

    def wrote(db: ThemisClient, key: str, value: int) -> bool:
        try:
            acked[key] = (db.put("failover", key, {"value": value}).version, value)
            return True
        except ThemisError as e:
            # refused while failing over (or no answer from the paused pod), never a 4xx/500
            assert e.status in (0, 503, 504), f"{key}: {e}"
            return False
        except OSError:  # the paused pod's connection: a timeout, never an answer
            return False

    try:
        eventually(lambda: all(wrote(clients[0], k, 0) for k in KEYS), timeout=60)
        victim, survivors = f"{CLUSTER}-1", [clients[0], clients[2]]
        pid = pod_pid(kubectl, victim)
        os.killpg(pid, signal.SIGSTOP)
        paused = time.monotonic()
        pending = set(KEYS)
        writable_after: dict[str, float] = {}

        def all_writable() -> bool:
            for key in sorted(pending):
                if wrote(survivors[len(pending) % 2], key, 1):
                    pending.discard(key)
                    writable_after[key] = time.monotonic() - paused
            return not pending

        eventually(all_writable, timeout=BOUND_S, interval=0.2)
        times = sorted(writable_after.values())
        # The slowest key is the one whose write was waiting on the paused pod when it stopped:
        # the coordinator stops waiting once the new epoch fences the pod (not at the peer's
        # request timeout), burns the write and answers 503, and the retry commits.
        print(
            f"\nkeys writable again after {victim} was paused: median {times[len(times) // 2]:.1f}s, "
            f"every key {times[-1]:.1f}s"
        )
        fenced = plan(kubectl)
        assert fenced["out_of_sync"] == [victim] and fenced["epoch"] > 1
        for key, (version, value) in acked.items():  # nothing acknowledged is lost
            got = survivors[0].get("failover", key)
            assert (got.version, got.document["value"]) == (version, value), key

        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)  # if its liveness probe has not replaced it yet
        resumed = time.monotonic()
        eventually(
            lambda: not plan(kubectl).get("out_of_sync") and not plan(kubectl).get("rejoining"),
            timeout=BOUND_S * 2,
            interval=0.5,
        )
        print(f"{victim} back in the in-sync set {time.monotonic() - resumed:.1f}s after it resumed")
        eventually(lambda: all(wrote(clients[1], k, 2) for k in KEYS), timeout=BOUND_S)
        for key, (version, value) in acked.items():
            for db in clients:
                got = db.get("failover", key)
                assert (got.version, got.document["value"]) == (version, value), key
    finally:
        for db in clients:
            db.close()
