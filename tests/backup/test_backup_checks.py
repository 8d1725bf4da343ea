"""Spec: a backup that is missing, partial, corrupt or from a newer format is refused by name
before anything is restored; retention deletes all but the newest complete backups; a snapshot a
dead backup left staged on a shard is dropped by a later one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from themis_core.cluster_backup.destinations import DirectoryDestination, open_destination, split_ref
from themis_core.cluster_backup.manifest import FORMAT_VERSION, BackupInvalid
from themis_core.cluster_backup.retention import apply_retention, expired
from themis_shard.backup.restore import fetch_backup
from themis_shard.backup.snapshot import STALE_S, SnapshotStore
from themis_shard.storage.documents import DocumentStore


@pytest.fixture
def backup(tmp_path: Path, plan_of, take_backup) -> DirectoryDestination:
    plan = plan_of(2)
    stores = {sid: DocumentStore(tmp_path / "src" / sid, origin=sid) for sid in ("shard-0", "shard-1")}
    for i in range(20):
        stores["shard-0"].put("c", f"k{i}", {"i": i})
    dest, _ = take_backup(tmp_path, plan, stores)
    for s in stores.values():
        s.close()
    return dest


def test_a_whole_backup_passes_its_checks(backup: DirectoryDestination) -> None:
    manifest = fetch_backup(backup, "b1", None)
    assert manifest.format_version == FORMAT_VERSION and len(manifest.shards) == 2


def test_a_flipped_byte_is_refused_naming_the_file(backup: DirectoryDestination) -> None:
    sst = sorted((backup.root / "b1" / "shards" / "shard-0" / "db").glob("*"))[-1]
    raw = bytearray(sst.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    sst.write_bytes(bytes(raw))
    with pytest.raises(BackupInvalid, match=f"{sst.name} is corrupt"):
        fetch_backup(backup, "b1", None)


def test_a_missing_file_is_a_partial_backup(backup: DirectoryDestination) -> None:
    next((backup.root / "b1" / "shards" / "shard-1" / "db").glob("CURRENT")).unlink()
    with pytest.raises(BackupInvalid, match=r"partial.*CURRENT is missing"):
        fetch_backup(backup, "b1", None)


def test_no_manifest_means_no_backup(backup: DirectoryDestination) -> None:
    (backup.root / "b1" / "manifest.json").unlink()
    with pytest.raises(BackupInvalid, match="no complete backup b1"):
        fetch_backup(backup, "b1", None)


def test_a_newer_format_is_refused_with_what_to_do(backup: DirectoryDestination) -> None:
    path = backup.root / "b1" / "manifest.json"
    data = json.loads(path.read_text())
    data["format_version"] = FORMAT_VERSION + 1
    data["a_new_field"] = True
    path.write_text(json.dumps(data))
    with pytest.raises(BackupInvalid, match="restore it with a newer Themis"):
        fetch_backup(backup, "b1", None)


def test_retention_keeps_the_newest_complete_backups(backup: DirectoryDestination) -> None:
    assert expired([("a", "2026-01-01"), ("b", "2026-01-03"), ("c", "2026-01-02")], 2) == ["a"]
    for name, when in (("b0", "2025-01-01T00:00:00+00:00"), ("b2", "2027-01-01T00:00:00+00:00")):
        data = json.loads((backup.root / "b1" / "manifest.json").read_text())
        data["backup_id"], data["created_at"] = name, when
        backup.put_bytes(f"{name}/manifest.json", json.dumps(data).encode())
    backup.put_bytes("b9-partial/shards/x", b"")
    assert apply_retention(backup, 2) == ["b0"]
    assert backup.backups() == ["b1", "b2", "b9-partial"]


def test_destinations_are_directories_or_s3_urls(tmp_path: Path) -> None:
    assert isinstance(open_destination(str(tmp_path)), DirectoryDestination)
    assert split_ref("s3://bucket/some/prefix/themis-1") == ("s3://bucket/some/prefix", "themis-1")
    with pytest.raises(ValueError, match="a directory or an s3://"):
        open_destination("gs://bucket/x")
    with pytest.raises(ValueError, match="not DEST/ID"):
        split_ref("only-an-id")


def test_a_snapshot_a_dead_backup_left_staged_is_dropped_by_the_next(tmp_path) -> None:
    store = DocumentStore(tmp_path / "db")
    snapshots = SnapshotStore(tmp_path / "stage", store, tmp_path / "adapters")
    snapshots.take("old")
    old = tmp_path / "stage" / "old"
    os.utime(old, (0, os.path.getmtime(old) - STALE_S - 1))
    snapshots.take("recent")
    snapshots.take("new")
    assert sorted(p.name for p in (tmp_path / "stage").iterdir()) == ["new", "recent"]
    store.close()
