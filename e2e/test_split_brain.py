"""Spec: pausing a key's owner never lets two shards mint the same version of that key.

The outside tester's split brain, reproduced on real shard processes: a 3-shard RAID1 cluster,
the owner of some keys paused with SIGSTOP while conditional writes (``If-Match``) to those
keys go through the two other shards. The shards' request timeout is shortened (3 s) so a
pause of a few seconds is longer than a forwarded call may take.

What must hold: at most one 200 per (key, version); once the owner is resumed and the cluster
has converged, both owners of every key hold the identical document, and it is the one whose
write was acknowledged (when one was).
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from themis_client import NO_RETRY, ThemisClient, ThemisError

from .conftest import peer_auth

pytestmark = pytest.mark.e2e

TIMEOUT_S = 3.0
PAUSE_S = 7.0
VICTIM = "shard-0"
VIA = ("shard-1", "shard-2")


def _keys(plan, n_early: int, n_late: int) -> tuple[list[str], list[str]]:
    from themis_shard.cluster.placement.owners import Topology

    topo = Topology.of(plan, VICTIM)
    mine = [k for k in (f"r{i}" for i in range(500)) if topo.owners("reg", k)[0] == VICTIM]
    return mine[:n_early], mine[n_early : n_early + n_late]


def _owners(plan, key: str) -> list[str]:
    from themis_shard.cluster.placement.owners import Topology

    return Topology.of(plan, VICTIM).owners("reg", key)


def _put(url: str, key: str, body: dict, if_match: int) -> tuple[str, int, dict, dict]:
    """One conditional write, not retried (a retry would be a second writer); its HTTP status."""
    with ThemisClient(url, timeout=30, retry=NO_RETRY) as shard:
        try:
            written = shard.put("reg", key, body, if_match=if_match)
        except ThemisError as exc:  # a broken connection is status 0
            return key, exc.status, body, {"error": {"code": exc.code, "message": exc.message}}
    return key, 200, body, written.model_dump()


def _replica(url: str, key: str) -> tuple[int, dict | None]:
    # the owner's own copy, from the cluster's /internal route (no read repair, no forwarding)
    r = httpx.get(f"{url}/internal/documents/reg/{key}", timeout=10, auth=peer_auth())
    if r.status_code == 404:
        return 0, None
    assert r.status_code == 200, r.text
    return r.json()["version"], r.json()["document"]


def test_a_paused_owner_never_leaves_two_versions_of_one_write(local_cluster) -> None:
    cluster = local_cluster(
        3,
        raid_mode="raid1",
        env={"THEMIS_CLUSTER_REQUEST_TIMEOUT_S": str(TIMEOUT_S), "THEMIS_CLUSTER_MAX_RETRIES": "1"},
    )
    # Early keys are written while the pause outlasts the forwarding timeout; late keys are
    # written just before the owner resumes (their forwarded call completes). Fewer early keys
    # than the breaker's failure threshold (5), so the late writes still reach the owner.
    early, late = _keys(cluster.plan, 4, 4)
    keys = early + late
    with ThemisClient(cluster.url(VIA[0]), timeout=10) as base:
        for key in keys:
            assert base.put("reg", key, {"v": 1}).version == 1

    victim = cluster.procs[VICTIM]
    results = []
    with ThreadPoolExecutor(max_workers=2 * len(keys)) as pool:
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            futures = [
                pool.submit(_put, cluster.url(via), key, {"by": via, "key": key}, 1)
                for key in early
                for via in VIA
            ]
            time.sleep(PAUSE_S - TIMEOUT_S / 2)
            futures += [
                pool.submit(_put, cluster.url(via), key, {"by": via, "key": key}, 1)
                for key in late
                for via in VIA
            ]
            time.sleep(TIMEOUT_S / 2)
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        results = [f.result() for f in futures]

    acked: dict[str, list[dict]] = {}
    for key, status, body, reply in results:
        assert status in (200, 409, 503), (key, status, reply)
        if status == 200:
            assert reply["version"] == 2, reply
            acked.setdefault(key, []).append(body)
    print({k: len(v) for k, v in acked.items()}, [(k, s) for k, s, _, _ in results])
    assert all(len(bodies) == 1 for bodies in acked.values()), acked  # at most one 200 per version
    assert any(k in acked for k in late), "the writes sent just before the resume were acknowledged"

    # Converge: every hint delivered, then the owners' own copies compared byte for byte.
    shards = [ThemisClient(cluster.url(s), timeout=10) for s in cluster.ids]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pending = [shard.cluster_status().hints_pending for shard in shards]
        if not any(n for p in pending for n in p.values()):
            break
        time.sleep(0.5)
    # Anti-entropy may still be copying: wait (bounded) until the owners agree, then judge.
    deadline = time.monotonic() + 60
    while True:
        replicas = {
            key: {owner: _replica(cluster.url(owner), key) for owner in _owners(cluster.plan, key)}
            for key in keys
        }
        diverged = {k: c for k, c in replicas.items() if len({repr(v) for v in c.values()}) != 1}
        if not diverged or time.monotonic() > deadline:
            break
        time.sleep(1)
    for key, copies in replicas.items():
        if key in diverged:
            continue
        version, document = next(iter(copies.values()))
        if key in acked:
            assert (version, document) == (2, acked[key][0]), (key, copies, acked[key])
    assert not diverged, f"replicas differ: {diverged}"
    # Every shard now serves the one document the owners hold.
    for key in keys:
        served = {shard.get("reg", key).document.get("by") for shard in shards}
        assert len(served) == 1, (key, served)
    for shard in shards:
        shard.close()
