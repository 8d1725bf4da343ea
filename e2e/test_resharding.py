"""Spec: scaling a live local cluster 3 → 4 → 3 moves only the keys whose owners changed, while a
writer keeps inserting and a reader keeps reading: nothing acknowledged is lost, nothing read
during the move is a false 404, and afterwards every document is stored exactly `copies` times."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time

import httpx
import pytest
from themis_client import NO_RETRY, NotFound, ThemisClient, ThemisConnectionError, ThemisError
from themis_core.plan import ClusterPlan
from themis_core.ring import HashRing, RingSpec
from themis_testing.background import Background

from .conftest import peer_auth

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def themis(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


class Workload(Background):
    """A writer inserting new documents and a reader reading acknowledged ones, both through
    every shard of the current plan, recording acknowledged versions and false 404s."""

    def __init__(self, plan_path) -> None:
        self.plan_path = plan_path
        self.acked: dict[str, int] = {}
        self.false_404: list[str] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        super().__init__(self.write, self.read, join_s=None)

    def urls(self) -> list[str]:
        plan = ClusterPlan.load(self.plan_path)
        return [m.url for m in plan.members if m.shard_id not in plan.draining]

    # A shard that is listed but not listening yet (just added) or any more (just removed) refuses
    # the connection; like a Service that only routes to ready pods, the client tries another one.
    refused = 0

    @staticmethod
    def shard(clients: dict[str, ThemisClient], url: str) -> ThemisClient:
        """One client per shard URL, not retrying: every refusal and error is counted here."""
        if url not in clients:
            clients[url] = ThemisClient(url, timeout=10, retry=NO_RETRY)
        return clients[url]

    def write(self, start: int = 0) -> None:
        i = start
        clients: dict[str, ThemisClient] = {}
        while not self.stop.is_set():
            key = f"d{i}"
            try:
                written = self.shard(clients, random.choice(self.urls())).put(
                    "docs", key, {"i": i, "pad": "x" * 100}
                )
            except ThemisConnectionError as exc:
                if exc.code != "unreachable":
                    self.errors.append(f"write {key}: {exc!r}")
                else:
                    self.refused += 1
                continue
            except ThemisError as exc:
                self.errors.append(f"write {key}: {exc}")
                time.sleep(0.005)
                continue
            with self.lock:
                self.acked[key] = written.version
            i += 1
            time.sleep(0.005)
        for c in clients.values():
            c.close()

    def read(self) -> None:
        clients: dict[str, ThemisClient] = {}
        while not self.stop.is_set():
            with self.lock:
                keys = list(self.acked)
            if not keys:
                time.sleep(0.01)
                continue
            key = random.choice(keys)
            try:
                self.shard(clients, random.choice(self.urls())).get("docs", key)
            except NotFound:
                self.false_404.append(key)
            except ThemisConnectionError as exc:
                if exc.code != "unreachable":
                    self.errors.append(f"read {key}: {exc!r}")
                else:
                    self.refused += 1
            except ThemisError as exc:
                self.errors.append(f"read {key}: {exc}")
        for c in clients.values():
            c.close()

    def preload(self, url: str, n: int) -> None:
        with ThemisClient(url, timeout=30) as themis_db:
            for start in range(0, n, 200):
                docs = {f"p{i}": {"i": i, "pad": "x" * 100} for i in range(start, start + 200)}
                for item in themis_db.batch("docs", docs).results:
                    self.acked[item.urn.rsplit(":", 1)[1]] = item.version


def expected_moves(keys, old: dict, new: dict, copies: int) -> int:
    """(key, shard) pairs the new ring adds: what consistent hashing says must move."""
    old_ring, new_ring = HashRing.build(RingSpec.from_dict(old)), HashRing.build(RingSpec.from_dict(new))
    moved = 0
    for k in keys:
        urn = f"urn:themis:docs:{k}"
        moved += len(set(new_ring.owners(urn, copies)) - set(old_ring.owners(urn, copies)))
    return moved


def received(urls) -> int:
    total = 0
    for url in urls:
        with ThemisClient(url) as shard:
            total += shard.cluster_status().migration["keys_received"]
    return total


def test_scale_out_and_in_while_serving_loses_nothing(tmp_path) -> None:
    up = themis("up", "--shards", "3", "--no-llm", "--base-port", "0", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    plan_path = tmp_path / ".themis" / "plan.json"
    try:
        first = ClusterPlan.load(plan_path)
        work = Workload(plan_path)
        work.preload(first.members[0].url, 1200)
        with work:
            time.sleep(1)
            before = set(work.acked)
            out = themis("scale", "--shards", "4", cwd=tmp_path)
            assert out.returncode == 0, out.stderr
            grown = ClusterPlan.load(plan_path)
            assert grown.ring_version == first.ring_version + 1
            moved = received([m.url for m in grown.members])
            lower = expected_moves(before, first.ring, grown.ring, grown.copies)
            upper = expected_moves(set(work.acked), first.ring, grown.ring, grown.copies)
            assert 0.9 * lower <= moved <= 1.1 * upper, (moved, lower, upper)
            time.sleep(1)
            back = themis("scale", "--shards", "3", cwd=tmp_path)
            assert back.returncode == 0, back.stderr
            time.sleep(1)
        final = ClusterPlan.load(plan_path)
        assert [m.shard_id for m in final.members] == ["shard-0", "shard-1", "shard-2"]
        assert final.ring_version == first.ring_version + 2
        assert work.errors == [], work.errors[:10]
        assert work.false_404 == [], work.false_404[:10]
        assert len(work.acked) > 1200
        with ThemisClient(final.members[0].url, timeout=10) as themis_db:
            for key, version in work.acked.items():
                assert themis_db.get("docs", key).version == version, key
        stored = 0
        for m in final.members:
            with ThemisClient(m.url, timeout=10) as shard:
                stored += shard.collection("docs").documents
        assert stored == final.copies * len(work.acked)  # exactly `copies` copies, old ones purged
    finally:
        themis("down", cwd=tmp_path)
        state = tmp_path / ".themis" / "cluster.json"
        if state.exists():
            print(json.loads(state.read_text()))


def test_a_newer_version_only_the_leaving_shard_holds_survives_its_drain(tmp_path) -> None:
    """A write can reach an old owner after the new owner pulled its keys (a coordinator still on
    the old plan, a replica that missed a write). Copies are only dropped after the owners have
    them: the leaving shard hands its copies over before it purges, so the newest version of
    every key survives, even where the new owner pulled from the other, older holder."""
    up = themis("up", "--shards", "3", "--no-llm", "--base-port", "0", cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    plan_path = tmp_path / ".themis" / "plan.json"
    try:
        first = ClusterPlan.load(plan_path)
        work = Workload(plan_path)
        work.preload(first.members[0].url, 400)
        leaving = first.members[-1]
        ring = HashRing.build(RingSpec.from_dict(first.ring))
        late = {
            k: v + 1
            for k, v in work.acked.items()
            if leaving.shard_id in ring.owners(f"urn:themis:docs:{k}", 2)
        }
        items = [
            {"collection": "docs", "key": k, "version": v, "document": {"late": True}}
            for k, v in late.items()
        ]
        auth = peer_auth(
            json.loads((tmp_path / ".themis" / "cluster.json").read_text())["launch"]["gossip_secret"]
        )
        # /internal routes are the cluster's own (signed peer calls), not the client's API
        r = httpx.post(f"{leaving.url}/internal/replicate", json={"items": items}, timeout=30, auth=auth)
        assert r.status_code == 200 and r.json()["applied"] == len(late), r.text

        out = themis("scale", "--shards", "2", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        final = ClusterPlan.load(plan_path)
        assert leaving.shard_id not in [m.shard_id for m in final.members]
        with httpx.Client(timeout=10) as client:
            for key, version in {**work.acked, **late}.items():
                for m in final.members:  # both copies, not just the one a read would find
                    r = client.get(f"{m.url}/internal/documents/docs/{key}", auth=auth)
                    assert r.status_code == 200 and r.json()["version"] == version, (m.shard_id, key, r.text)
    finally:
        themis("down", cwd=tmp_path)
