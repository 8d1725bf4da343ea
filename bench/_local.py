"""Shared by the cluster benchmarks: drive the `themis` CLI (a real local cluster) from a script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def themis(cwd: Path, *args: str, timeout: float = 3600) -> str:
    """Run `themis <args>` in ``cwd``; exit with its stderr if it fails."""
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
