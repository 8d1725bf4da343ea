"""An S3-compatible object store for tests: moto's server mode as a real process on a free port.

The backup tests talk to it through boto3 exactly as to any S3 endpoint (``AWS_ENDPOINT_URL``);
nothing of Themis is faked.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from .ports import free_port as _free_port


@contextmanager
def moto_s3(log_dir: Path, buckets: tuple[str, ...] = ("backups",), timeout: float = 30.0) -> Iterator[str]:
    """Start ``moto_server`` (from this venv), create ``buckets``; yield its endpoint URL."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(Path(log_dir) / "moto.log", "ab") as log:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"moto_server did not answer at {url}") from None
                    time.sleep(0.1)
            for bucket in buckets:
                httpx.put(f"{url}/{bucket}", timeout=5).raise_for_status()
            yield url
        finally:
            proc.kill()
            proc.wait()


def s3_env(endpoint: str) -> dict[str, str]:
    """boto3's environment for ``endpoint`` (moto takes any credentials)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
