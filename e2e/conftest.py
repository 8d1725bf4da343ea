"""Helpers for end-to-end tests: real shard processes on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def shard_process(data_dir: Path, port: int, shard_id: str = "shard-0", llm: bool = False,
                  extra_env: dict[str, str] | None = None, ready_timeout: float = 60) -> Iterator[subprocess.Popen]:
    """A real `python -m themis_shard` process; killed (SIGKILL) on exit if still running."""
    env = {**os.environ, "THEMIS_SHARD_ID": shard_id, "THEMIS_PORT": str(port), "THEMIS_DATA_DIR": str(data_dir),
           "THEMIS_LLM_ENABLED": "true" if llm else "false", **(extra_env or {})}
    log = open(data_dir.parent / f"{shard_id}-{port}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "themis_shard", "--log-level", "warning"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{port}", ready_timeout, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def wait_ready(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"shard exited with {proc.returncode} during start-up")
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s")


@pytest.fixture
def spawn_shard():
    """The :func:`shard_process` context manager, for tests to start real shards."""
    return shard_process


@pytest.fixture
def port() -> int:
    return free_port()
