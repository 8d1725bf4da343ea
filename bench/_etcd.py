"""The benchmarks' peer database: a 3-member etcd (Debian's ``etcd-server``) on loopback ports.

Started and stopped by the benchmark in a temporary directory; it installs nothing itself:
without the binary it stops with the command that installs it (``make bench`` runs it).
Clients talk to etcd's v3 JSON gateway (``/v3/kv/put``, ``/v3/kv/range``, ``/v3/kv/txn``),
whose keys and values are base64 strings.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from _sched import launcher

INSTALL = "apt-get update && apt-get install -y etcd-server etcd-client"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def etcd_binary() -> str:
    found = shutil.which("etcd")
    if found is None:
        raise SystemExit(f"etcd is not installed; the storage benchmark compares against it: {INSTALL}")
    return found


def etcd_version() -> str:
    out = subprocess.run([etcd_binary(), "--version"], capture_output=True, text=True, check=False).stdout
    return out.split()[2] if out.startswith("etcd Version:") else "?"


@dataclass(frozen=True)
class Members:
    urls: list[str]  # client URLs
    pids: list[int]  # processes (their CPU time is the server's cost)


@contextmanager
def etcd_cluster(workdir: Path, members: int = 3, batch_scheduling: bool = False) -> Iterator[Members]:
    """Run a ``members``-node etcd cluster; yields its members' client URLs and processes.
    ``batch_scheduling``: under Linux's SCHED_BATCH (``chrt --batch``), as Themis's shards run by
    default (``themis_shard/sched_policy.py``), so that a comparison gives neither side the
    scheduler's help alone."""
    binary = etcd_binary()
    ports = free_ports(2 * members)
    client = [f"http://127.0.0.1:{p}" for p in ports[:members]]
    peer = [f"http://127.0.0.1:{p}" for p in ports[members:]]
    names = [f"etcd{i}" for i in range(members)]
    initial = ",".join(f"{n}={u}" for n, u in zip(names, peer, strict=True))
    procs = []
    try:
        for i, name in enumerate(names):
            log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append(
                subprocess.Popen(
                    [
                        *launcher(batch_scheduling),
                        binary,
                        f"--name={name}",
                        f"--data-dir={workdir / name}",
                        f"--listen-client-urls={client[i]}",
                        f"--advertise-client-urls={client[i]}",
                        f"--listen-peer-urls={peer[i]}",
                        f"--initial-advertise-peer-urls={peer[i]}",
                        f"--initial-cluster={initial}",
                        "--initial-cluster-state=new",
                        "--initial-cluster-token=themis-bench",
                        "--logger=zap",
                        "--log-level=error",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        wait_writable(client)
        yield Members(client, [p.pid for p in procs])
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_writable(urls: list[str], timeout_s: float = 60) -> None:
    """Until every member accepts a put (a leader is elected and every member reaches it)."""
    deadline = time.monotonic() + timeout_s
    pending = list(urls)
    with httpx.Client(timeout=5) as c:
        while pending:
            url = pending[0]
            try:
                r = c.post(f"{url}/v3/kv/put", json={"key": b64("ready"), "value": b64("1")})
                if r.status_code == 200 and "error" not in r.json():
                    pending.pop(0)
                    continue
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"etcd member {url} did not become writable in {timeout_s:.0f} s")
            time.sleep(0.2)
