"""A shard whose volumes were wiped rebuilds its RAID weight units from its peers, in the
Kubernetes layout: units on their own weights volume (THEMIS_RAID_WEIGHTS_DIR, /weights/raid in
the pod), apart from the data volume, and both empty at start-up (a deleted PVC and its pod)."""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

from .test_raid import raid_status, wait_formed

pytestmark = [pytest.mark.e2e]


def test_a_shard_started_on_empty_volumes_rebuilds_its_units_from_the_peers(
    local_cluster, tmp_path, monkeypatch
):
    src = tmp_path / "weights-source.gguf"
    src.write_bytes(b"GGUF" + os.urandom(2_000_003))
    monkeypatch.setenv("THEMIS_RAID_ENABLED", "true")
    monkeypatch.setenv("THEMIS_RAID_SOURCE", str(src))
    monkeypatch.setenv("THEMIS_RAID_UNIT_SIZE", str(64 << 10))
    monkeypatch.setenv("THEMIS_RAID_STARTUP_TIMEOUT_S", "20")
    volumes = {f"shard-{i}": tmp_path / f"pvc-weights-shard-{i}" for i in range(3)}
    cluster = local_cluster(
        3,
        raid_mode="raid5",
        shard_env={sid: {"THEMIS_RAID_WEIGHTS_DIR": str(v / "raid")} for sid, v in volumes.items()},
    )
    wait_formed(cluster)
    units = sorted((volumes["shard-2"] / "raid" / "units").rglob("*.*"))
    assert units, "units live on the weights volume, not under the data directory"
    assert not (cluster.root / "shard-2" / "weights").exists()
    content = [p.read_bytes() for p in units]

    cluster.kill("shard-2")
    shutil.rmtree(volumes["shard-2"])  # the weights PVC, deleted with its pod
    shutil.rmtree(cluster.root / "shard-2")  # and the data PVC
    cluster.start("shard-2")

    assert [p.read_bytes() for p in units] == content  # bit-exact, from the peers' units + parity
    st = raid_status(cluster, "shard-2")
    assert st["origin"] == "cluster" and st["operation"]["op"] == "rebuild"
    assert st["operation"]["units_repaired"] == len(units) and st["degraded"] is False
    # /ready is a probe (a status code, no body to type): asked as the kubelet would
    assert httpx.get(f"{cluster.url('shard-2')}/ready", timeout=10).status_code == 200
