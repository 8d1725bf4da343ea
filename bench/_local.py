"""Shared by the cluster benchmarks: drive the `themis` CLI (a real local cluster) from a script.

``THEMIS_BENCH_AUTH=1`` starts the clusters with API keys on (``themis up --auth``);
``api_headers`` is the ``Authorization`` header the benchmark's clients then send
(``$THEMIS_API_KEY``, else the cluster's own admin key).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def themis(cwd: Path, *args: str, timeout: float = 3600) -> str:
    """Run `themis <args>` in ``cwd``; exit with its stderr if it fails."""
    if args and args[0] == "up" and os.environ.get("THEMIS_BENCH_AUTH") == "1":
        args = (*args, "--auth")
    out = subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode:
        raise SystemExit(out.stderr)
    return out.stdout


def api_headers(cwd: Path) -> dict[str, str]:
    key = os.environ.get("THEMIS_API_KEY")
    local = Path(cwd) / ".themis" / "auth" / "admin.key"
    if not key and local.exists():
        key = local.read_text().strip()
    return {"Authorization": f"Bearer {key}"} if key else {}
