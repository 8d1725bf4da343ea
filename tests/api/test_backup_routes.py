"""Spec: a shard's backup routes — the decision gate is held by one backup at a time, a snapshot
is taken only under the gate of its own backup, its files come back byte for byte (sha256 as
listed) and nothing outside the snapshot is served, and dropping it opens the gate."""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient

B = "/v1/cluster/backups"


def test_a_snapshot_needs_its_own_backups_gate(client: TestClient) -> None:
    r = client.post(f"{B}/b1/snapshot")
    assert r.status_code == 409 and r.json()["error"]["code"] == "gate_not_held"


def test_one_backup_holds_the_gate_and_its_snapshot_files_come_back_whole(client: TestClient) -> None:
    client.put("/v1/collections/c/documents/k", json={"a": 1})
    gate = client.post(f"{B}/b1/gate", json={"lease_s": 30})
    assert gate.status_code == 200 and gate.json()["closed"] and gate.json()["plan"]["ring"]["version"] == 1
    other = client.post(f"{B}/b2/gate")
    assert other.status_code == 409 and other.json()["error"]["code"] == "backup_in_progress"
    assert client.post(f"{B}/b1/gate").json()["closing"] == gate.json()["closing"]  # renewed, no gap
    snap = client.post(f"{B}/b1/snapshot")
    assert snap.status_code == 200, snap.text
    files = snap.json()["files"]
    assert snap.json()["documents"] == 1 and any(f["path"] == "db/CURRENT" for f in files)
    for f in files:
        body = client.get(f"{B}/b1/files/{f['path']}").content
        assert (len(body), hashlib.sha256(body).hexdigest()) == (f["size"], f["sha256"])
    assert client.get(f"{B}/b1/files/db/..%2F..%2Fdocuments%2FCURRENT").status_code == 404
    assert client.get(f"{B}/b1/files/db/NOPE").json()["error"]["code"] == "backup_file_not_found"
    assert client.delete(f"{B}/b1").json()["dropped"] is True
    assert client.post(f"{B}/b2/gate").status_code == 200  # dropping opened the gate
    assert client.delete(f"{B}/b2/gate").json()["closed"] is False


def test_a_malformed_backup_id_or_lease_is_refused_by_name(client: TestClient) -> None:
    assert client.post(f"{B}/Not_An_Id/gate").status_code == 400
    r = client.post(f"{B}/b1/gate", json={"lease_s": 0})
    assert r.status_code == 400 and "lease_s" in r.text
    r = client.post(f"{B}/b1/gate", json={"lease": 5})
    assert r.status_code == 400 and "lease" in r.text
