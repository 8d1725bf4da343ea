"""Helpers: source plans, and a backup of real stores written to a directory destination."""

from __future__ import annotations

from pathlib import Path

import pytest
from themis_core.cluster_backup.destinations import DirectoryDestination
from themis_core.cluster_backup.manifest import Cut, Manifest, ShardSnapshot
from themis_core.plan import ClusterSpec, Member, build_plan
from themis_shard.backup.snapshot import SnapshotStore
from themis_shard.storage.documents import DocumentStore


def plan_of(n: int):
    members = tuple(Member(shard_id=f"shard-{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(n))
    return build_plan(ClusterSpec(name="src", members=members, raid_mode="raid1" if n > 1 else "raid0"))


def take_backup(tmp: Path, plan, stores: dict[str, DocumentStore]) -> tuple[DirectoryDestination, Manifest]:
    dest = DirectoryDestination(tmp / "dest")
    parts = []
    for sid, store in stores.items():
        files = SnapshotStore(tmp / "stage" / sid, store, tmp / "adapters" / sid).take("b1")
        for f in files:
            dest.put_file(f"b1/shards/{sid}/{f.path}", tmp / "stage" / sid / "b1" / f.path)
        parts.append(ShardSnapshot(shard_id=sid, ring_version=plan.ring_version, files=tuple(files)))
    manifest = Manifest(
        backup_id="b1",
        cluster="src",
        created_at="2026-12-03T12:00:00+00:00",
        themis_version="0",
        plan=plan.model_dump(mode="json"),
        cut=Cut(ring_version=plan.ring_version, closed_ms=0, snapshot_ms=0),
        shards=tuple(parts),
    )
    dest.put_bytes("b1/manifest.json", manifest.to_bytes())
    return dest, manifest


@pytest.fixture(name="plan_of")
def plan_of_fixture():
    return plan_of


@pytest.fixture(name="take_backup")
def take_backup_fixture():
    return take_backup
