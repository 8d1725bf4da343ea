"""Spec: a multi-shard cluster routes documents by ring, replicates them (RAID1) and survives a
killed shard without losing an acknowledged write."""

from __future__ import annotations

import time

import httpx
import pytest
from themis_client import Operation, ThemisClient, VersionConflict

from .conftest import peer_auth

pytestmark = pytest.mark.e2e


def test_any_shard_serves_any_document_and_replicas_hold_copies(local_cluster) -> None:
    cluster = local_cluster(3)
    a, c = ThemisClient(cluster.url("shard-0")), ThemisClient(cluster.url("shard-2"))
    for i in range(30):
        assert a.put("books", f"b{i}", {"i": i}).version == 1
    for i in range(30):
        assert c.get("books", f"b{i}").document == {"i": i}
    # RAID1: every document is stored on exactly its two owners.
    stored = sum(ThemisClient(cluster.url(s)).collection("books").documents for s in cluster.ids)
    assert stored == 60
    status = c.cluster_status()
    assert status.ring_version == 1 and [m.shard_id for m in status.members] == cluster.ids


def test_vector_search_fans_out_and_merges_top_k(local_cluster) -> None:
    cluster = local_cluster(3)
    a = ThemisClient(cluster.url("shard-1"))
    a.declare_collection("vecs", dimension=2)
    for i in range(12):
        a.put("vecs", f"v{i}", {"embedding": [1.0, i / 10], "i": i})
    for shard in cluster.ids:  # every shard answers with the cluster-wide top-3, no duplicates
        hits = ThemisClient(cluster.url(shard)).search("vecs", vector=[1.0, 0.0], k=3)
        assert [x.urn for x in hits.results] == [
            "urn:themis:vecs:v0",
            "urn:themis:vecs:v1",
            "urn:themis:vecs:v2",
        ]


def test_raid1_survives_a_killed_shard_and_the_restarted_shard_catches_up(local_cluster) -> None:
    """With a shard dead and no plan authority: keys it is primary of are neither readable nor
    writable (503, nothing written) until the plan changes, the others stay readable; keys it
    only replicates take writes at ``w=1`` (a hint for it) and refuse the default ``w=all``."""
    from themis_shard.cluster.placement.owners import Topology

    cluster = local_cluster(3, raid_mode="raid1")
    urls = {s: cluster.url(s) for s in cluster.ids}
    topo = Topology.of(cluster.plan, "shard-0")
    acked: dict[str, int] = {}
    via = {s: ThemisClient(urls[s], timeout=10) for s in ("shard-0", "shard-2")}
    with httpx.Client(timeout=10) as client:
        for i in range(40):
            acked[f"k{i}"] = via["shard-0"].put("log", f"k{i}", {"i": i}).version
        cluster.kill("shard-1")
        started = time.monotonic()
        dead_primary = [k for k in acked if topo.owners("log", k)[0] == "shard-1"]
        dead_replica = [k for k in acked if topo.owners("log", k)[1] == "shard-1"]
        untouched = [k for k in acked if "shard-1" not in topo.owners("log", k)]
        assert dead_primary and dead_replica and untouched
        for key in dead_primary:
            r = client.put(f"{urls['shard-2']}/v1/collections/log/documents/{key}", json={"lost": True})
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] in ("coordinator_unavailable", "write_outcome_unknown")
        for key in dead_replica:
            r = client.put(f"{urls['shard-0']}/v1/collections/log/documents/{key}", json={"lost": True})
            assert r.status_code == 503 and r.json()["error"]["code"] == "replicas_unavailable", r.text
            r = client.put(f"{urls['shard-0']}/v1/collections/log/documents/{key}?w=1", json={"v": 2})
            assert r.status_code == 200, r.text
            acked[key] = r.json()["version"]
        for key in untouched:
            r = client.put(f"{urls['shard-2']}/v1/collections/log/documents/{key}", json={"v": 2})
            assert r.status_code == 200, r.text
            acked[key] = r.json()["version"]
        for key, version in acked.items():  # nothing refused was written
            for entry in ("shard-0", "shard-2"):
                r = client.get(f"{urls[entry]}/v1/collections/log/documents/{key}")
                if key in dead_primary:  # linearizable reads: the primary only (no authority here)
                    assert r.status_code == 503 and r.json()["error"]["code"] == "primary_unavailable"
                    continue
                assert r.status_code == 200 and r.json()["version"] == version, (key, entry, r.text)
                assert "lost" not in r.json()["document"]
        assert time.monotonic() - started < 60  # a dead shard never hangs requests

        cluster.start("shard-1")  # restart: catch-up and hints bring it up to date
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status = via["shard-0"].cluster_status()
            if not any(status.hints_pending.values()):
                break
            time.sleep(0.2)
        # Every key shard-1 owns is now on shard-1 itself, at the acknowledged version.
        owned = [k for k in acked if topo.owns("shard-1", "log", k)]
        for key in owned:
            r = client.get(f"{urls['shard-1']}/internal/documents/log/{key}", auth=peer_auth())
            assert r.status_code == 200 and r.json()["version"] == acked[key], (key, r.text)
        key = dead_primary[0]  # and its keys are writable again
        r = client.put(f"{urls['shard-2']}/v1/collections/log/documents/{key}", json={"back": True})
        assert r.status_code == 200 and r.json()["version"] == acked[key] + 1, r.text


def test_a_transaction_over_keys_on_different_shards_commits_on_all_of_them(local_cluster) -> None:
    """One primary: the single-coordinator fast path; several: two-phase commit (the protocol
    under faults is e2e/test_cross_shard_transactions.py)."""
    cluster = local_cluster(3)
    from themis_shard.cluster.placement.owners import Topology

    topo = Topology.of(cluster.plan, "shard-0")
    keys = [f"t{i}" for i in range(50)]
    primary = {k: topo.owners("acc", k)[0] for k in keys}
    same = [k for k in keys if primary[k] == primary[keys[0]]][:2]
    other = next(k for k in keys if primary[k] != primary[keys[0]])
    themis = ThemisClient(cluster.url("shard-2"))
    assert themis.transaction([Operation.put("acc", k, {"n": 1}) for k in same]).committed
    done = themis.transaction([Operation.put("acc", k, {"n": 2}) for k in (same[0], other)])
    assert [r.version for r in done.results] == [2, 1]
    for shard in cluster.ids:
        reader = ThemisClient(cluster.url(shard))
        assert reader.get("acc", same[0]).document == {"n": 2} == reader.get("acc", other).document
    # a read check on the fast path (forwarded to the keys' primary with the writes)
    themis = ThemisClient(cluster.url(next(s for s in cluster.ids if s != primary[same[0]])))
    done = themis.transaction([Operation.check("acc", same[0], 2), Operation.put("acc", same[1], {"n": 3})])
    assert [(r.op, r.version) for r in done.results] == [("check", 2), ("put", 2)]
    with pytest.raises(VersionConflict):
        themis.transaction([Operation.check("acc", same[0], 1), Operation.put("acc", same[1], {"n": 4})])
    assert themis.get("acc", same[1]).version == 2
