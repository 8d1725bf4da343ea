"""Upgrading a running cluster from the previous release's code to this tree, one shard at a time,
under a light write load: no acknowledged write is lost and no read fails.

The previous release is a commit of this repository (``THEMIS_UPGRADE_FROM``, default the 0.1.0
line's last commit before data-format markers), unpacked with ``git archive`` and put first on the
shards' ``PYTHONPATH``; the new code is this tree. RAID1 (two copies) and ``?w=1`` writes: a write
whose other owner is restarting is acknowledged with a hint, so each step waits, as the operator's
rollout does, until the restarted shard is Ready (its start-up catch-up done) and no shard holds a
hint any more. Reads of a restarting shard's keys go to the other copy: the new code reads from
the primary only by default (linearizable), and a step restarts primaries without a plan
authority to fail them over, so the new shards opt into the replica fallback
(``THEMIS_CLUSTER_READ_FROM_REPLICAS=true``, what the previous release did by default), as the
README's upgrade procedure says.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from themis_testing.background import Background

from .conftest import LocalCluster, wait_ready

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS = os.environ.get("THEMIS_UPGRADE_FROM", "62d3c45")
KEYS = 40


def previous_release(tmp: Path) -> Path:
    """The previous release's shard package, unpacked from git (no worktree left behind)."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"]).returncode:
        pytest.skip(f"commit {PREVIOUS} is not in this repository's history")
    out = tmp / "previous"
    out.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "shard"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    assert not (out / "shard/themis_shard/data_format.py").exists(), (
        "the previous release must predate markers"
    )
    return out / "shard"


class Load(Background):
    """A writer (``?w=1``, increasing values per key) and a reader of acknowledged keys, each
    sending to any shard and moving on when a connection is refused (as clients do)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.acked: dict[str, int] = {}
        self.write_refusals: list[str] = []
        self.read_failures: list[str] = []
        self.reads = 0
        self._lock = threading.Lock()
        super().__init__(self._write, self._read, join_s=30)

    def _send(self, c: httpx.Client, method: str, path: str, i: int, **kw) -> httpx.Response | None:
        """The first answer; None when no shard answered. A connection lost mid-request (a shard
        stopping under it) sends a read on to the next shard; a write's outcome is then unknown,
        so it is never counted as acknowledged."""
        for j in range(len(self.urls)):
            try:
                return c.request(method, self.urls[(i + j) % len(self.urls)] + path, **kw)
            except httpx.ConnectError:
                continue
            except httpx.TransportError:
                if method != "GET":
                    return None
                continue
        return None

    def _write(self) -> None:
        with httpx.Client(timeout=15) as c:
            n = 0
            while not self.stop.is_set():
                n += 1
                key = f"k{n % KEYS}"
                r = self._send(c, "PUT", f"/v1/collections/up/documents/{key}?w=1", n, json={"n": n})
                if r is not None and r.status_code in (200, 201):
                    with self._lock:
                        self.acked[key] = n
                else:
                    self.write_refusals.append(f"{key}: {r.status_code if r is not None else 'no shard'}")
                time.sleep(0.05)

    def _read(self) -> None:
        with httpx.Client(timeout=15) as c:
            i = 0
            while not self.stop.is_set():
                i += 1
                with self._lock:
                    known = sorted(self.acked.items())
                if not known:
                    time.sleep(0.05)
                    continue
                key, at_least = known[i % len(known)]
                r = self._send(c, "GET", f"/v1/collections/up/documents/{key}", i)
                self.reads += 1
                if r is None or r.status_code != 200:
                    self.read_failures.append(f"{key}: {r.status_code if r is not None else 'no shard'}")
                elif r.json()["document"]["n"] < at_least:
                    self.read_failures.append(
                        f"{key}: read n={r.json()['document']['n']} after n={at_least} was acked"
                    )
                time.sleep(0.02)


def no_hints_anywhere(cluster: LocalCluster) -> bool:
    for sid in cluster.ids:
        status = httpx.get(f"{cluster.url(sid)}/v1/cluster/status", timeout=5).json()
        if any(status.get("hints_pending", {}).values()):
            return False
    return True


def eventually(check, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not true within {timeout}s: {check.__name__}"
        time.sleep(0.2)


def test_a_rolling_upgrade_from_the_previous_release_loses_no_acknowledged_write_and_fails_no_read(tmp_path):
    old_code = previous_release(tmp_path)
    data = tmp_path / "cluster"
    data.mkdir()
    cluster = LocalCluster(
        data, 3, "raid1", shard_env={f"shard-{i}": {"PYTHONPATH": str(old_code)} for i in range(3)}
    )
    try:
        cluster.start_all()
        urls = [cluster.url(s) for s in cluster.ids]
        assert httpx.put(f"{urls[0]}/v1/collections/up", json={}).status_code in (200, 201)
        with Load(urls) as load:
            eventually(lambda: len(load.acked) == KEYS)
            for sid in cluster.ids:  # one shard at a time
                proc = cluster.procs.pop(sid)
                proc.terminate()  # as a pod is deleted: SIGTERM, then a new pod on the same volume
                proc.wait(60)
                cluster.shard_env[sid] = {"THEMIS_CLUSTER_READ_FROM_REPLICAS": "true"}  # this tree's code
                cluster.start(sid, wait=False)
                wait_ready(cluster.url(sid), 120, cluster.procs[sid])
                eventually(lambda: no_hints_anywhere(cluster))
                time.sleep(1)  # some load on the new shard before the next one goes
        assert load.read_failures == [], load.read_failures[:10]
        assert load.reads > 50
        lost = []
        for key, n in sorted(load.acked.items()):
            r = httpx.get(f"{urls[0]}/v1/collections/up/documents/{key}", timeout=10)
            if r.status_code != 200 or r.json()["document"]["n"] < n:
                lost.append((key, n, r.status_code, r.text[:100]))
        assert lost == []
    finally:
        cluster.stop()

    from themis_shard.storage.documents import DocumentStore
    from themis_shard.storage.formats import CURRENT, stored_formats

    for sid in cluster.ids:  # the previous release's unmarked stores were migrated forward
        store = DocumentStore(data / sid / "documents")
        assert stored_formats(store) == dict(CURRENT)
        store.close()
