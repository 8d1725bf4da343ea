"""Spec: a 3-shard RAID1 cluster stays writable when a shard dies (``plan_authority.in_sync``).

Real shard processes and the real plan authority (``supervisor.Supervisor``, in a thread here
as ``themis up`` runs it in a process). After ``kill -9`` of one shard, every key becomes
writable again through the survivors under a new epoch that fences the dead shard, with the
default ``w=all`` meaning every in-sync copy; no acknowledged write is lost; the restarted
shard catches up, rejoins, and serves its keys again with every write it missed. The test polls
with generous bounds and prints how long each step took (numbers belong to benchmarks, not
assertions).
"""

from __future__ import annotations

import time

import httpx
import pytest

from .conftest import Authority, LocalCluster, peer_auth

pytestmark = pytest.mark.e2e

KEYS = [f"k{i}" for i in range(24)]
BOUND_S = 90.0


def put(client: httpx.Client, url: str, key: str, doc: dict) -> httpx.Response:
    return client.put(f"{url}/v1/collections/log/documents/{key}", json=doc)


def poll(what: str, condition, bound: float = BOUND_S) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < bound, f"not within {bound:.0f}s: {what}"
        time.sleep(0.2)
    return time.monotonic() - started


def test_after_kill_9_every_key_is_writable_again_nothing_acknowledged_is_lost_and_the_shard_rejoins(
    tmp_path,
) -> None:
    from themis_core.plan import FailoverSettings
    from themis_shard.cluster.placement.owners import Topology
    from themis_shard.cluster.replication.fencing import primary

    cluster = LocalCluster(tmp_path, 3, "raid1", failover=FailoverSettings())
    cluster.start_all()
    victim, survivors = "shard-1", ["shard-0", "shard-2"]
    acked: dict[str, tuple[int, int]] = {}  # key -> (version, value) acknowledged last
    try:
        with Authority.of(cluster) as authority, httpx.Client(timeout=15) as client:
            entry = cluster.url("shard-0")

            def wrote(url: str, key: str, value: int) -> bool:
                r = put(client, url, key, {"value": value})
                if r.status_code == 200:
                    acked[key] = (r.json()["version"], value)
                    return True
                assert r.status_code == 503, r.text  # refused while failing over, never a 4xx/500
                return False

            poll("the first writes (leases granted)", lambda: all(wrote(entry, k, 0) for k in KEYS))
            cluster.kill(victim)
            killed = time.monotonic()
            pending = set(KEYS)

            def all_writable() -> bool:
                for key in sorted(pending):
                    if wrote(cluster.url(survivors[len(pending) % 2]), key, 1):
                        pending.discard(key)
                return not pending

            poll("every key writable through the survivors", all_writable)
            print(f"\nevery key writable again {time.monotonic() - killed:.1f}s after kill -9 of {victim}")
            plan = authority.plan()
            assert plan.out_of_sync == (victim,) and plan.plan_epoch > 1
            topo = Topology.of(plan, "shard-0")
            assert any(topo.owners("log", k)[0] == victim for k in KEYS)  # it was primary of some
            for key, (version, value) in acked.items():  # read back: nothing acknowledged lost
                for s in survivors:
                    r = client.get(f"{cluster.url(s)}/v1/collections/log/documents/{key}")
                    assert r.status_code == 200, r.text
                    assert (r.json()["version"], r.json()["document"]["value"]) == (version, value), key

            cluster.start(victim)
            restarted = time.monotonic()
            poll(
                f"{victim} caught up and back in sync",
                lambda: not authority.plan().out_of_sync and not authority.plan().rejoining,
            )
            print(f"{victim} back in the in-sync set {time.monotonic() - restarted:.1f}s after its restart")
            final = Topology.of(authority.plan(), victim)
            for key, (version, _) in acked.items():  # it holds every write it missed
                if final.owns(victim, "log", key):
                    r = client.get(f"{cluster.url(victim)}/internal/documents/log/{key}", auth=peer_auth())
                    assert r.status_code == 200 and r.json()["version"] == version, (key, r.text)
            back = [k for k in KEYS if primary(final, "log", k) == victim]
            assert back  # primary of its keys again: reads and writes go through it
            poll("its keys writable through it", lambda: all(wrote(cluster.url(victim), k, 2) for k in back))
            for key in back:
                r = client.get(f"{cluster.url('shard-2')}/v1/collections/log/documents/{key}")
                assert (r.json()["version"], r.json()["document"]["value"]) == acked[key]
    finally:
        cluster.stop()
