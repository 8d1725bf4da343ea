"""Rebuild, assembly and ingest across in-process shards (real router, real RemoteExecutor)."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from themis_shard.raid.layout import UnitRef
from themis_shard.raid.service import RaidUnrecoverable

pytestmark = pytest.mark.asyncio


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_every_shard_derives_the_same_manifest_and_only_its_own_units(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    assert manifest.sha256 == sha(model_file) and manifest.size == model_file.stat().st_size
    for sid in cluster.ids:
        store = cluster[sid].store
        assert store.active_key == manifest.key
        assert len(cluster.unit_files(sid)) == len(manifest.layout.units_on(sid, manifest.size))
        assert sha(store.model_path(manifest.key)) == manifest.sha256


async def test_raid5_wiped_shard_rebuilds_its_units_bit_exact(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    before = cluster.unit_files("shard-2")
    cluster.wipe("shard-2")
    cluster.transport.down.add("shard-2")
    replacement = cluster.replace("shard-2")
    cluster.transport.down.discard("shard-2")
    path = await replacement.prepare(str(model_file), assemble=True)
    assert cluster.unit_files("shard-2") == before
    assert sha(path) == manifest.sha256
    assert replacement.progress.state == "done" and replacement.progress.units_repaired == len(before)
    assert replacement.progress.bytes_transferred > 0
    assert replacement.status()["origin"] == "cluster"


async def test_raid5_rebuild_does_not_fall_back_to_the_source(raid_cluster, model_file, tmp_path):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    cluster.wipe("shard-1")
    path = await cluster["shard-1"].prepare(str(tmp_path / "no-such-source.gguf"), assemble=True)
    assert sha(path) == manifest.sha256


async def test_raid6_two_lost_shards_are_rebuilt_bit_exact(raid_cluster, model_file):
    cluster = raid_cluster(5, "raid6")
    manifest = await cluster.ingest_everywhere(model_file)
    assert (manifest.data_units, manifest.parity_units) == (3, 2)
    before = {sid: cluster.unit_files(sid) for sid in ("shard-0", "shard-3")}
    for sid in before:
        cluster.wipe(sid)
        cluster.services[sid].store.save_manifest(manifest)
        cluster.services[sid].store.set_active(manifest.key)
    # shard-0 rebuilds while shard-3 is still empty: two of five units per stripe are missing.
    result = await cluster["shard-0"].sync(manifest, assemble=True)
    assert result["units_repaired"] == len(before["shard-0"])
    await cluster["shard-3"].sync(manifest, assemble=False)
    for sid, units in before.items():
        assert cluster.unit_files(sid) == units
    assert sha(cluster["shard-0"].store.model_path(manifest.key)) == manifest.sha256


async def test_a_corrupt_unit_is_detected_by_crc_and_repaired(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    service = cluster["shard-1"]
    ref = manifest.layout.units_on("shard-1", manifest.size)[2]
    unit = service.store.unit_path(manifest.key, ref)
    good = unit.read_bytes()
    unit.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])
    report = await service.verify()
    assert report["corrupt"] == 1 and report["bad_units"] == [str(ref)]
    assert service.status()["degraded"] is True
    await service.sync(manifest, assemble=False)
    assert unit.read_bytes() == good
    assert (await service.verify())["ok"] == report["expected"]


async def test_a_truncated_unit_is_repaired(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    ref = manifest.layout.units_on("shard-3", manifest.size)[0]
    path = cluster["shard-3"].store.unit_path(manifest.key, ref)
    good = path.read_bytes()
    path.write_bytes(good[:1000])
    assert (await cluster["shard-3"].verify())["corrupt"] == 1
    await cluster["shard-3"].sync(manifest, assemble=False)
    assert path.read_bytes() == good


async def test_assembly_reads_around_a_corrupt_peer_unit(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    # Corrupt a data unit on shard-2, then assemble on shard-0 from scratch: parity fills in.
    ref = next(r for r in manifest.layout.units_on("shard-2", manifest.size) if r.index < manifest.data_units)
    path = cluster["shard-2"].store.unit_path(manifest.key, ref)
    path.write_bytes(b"\0" * manifest.unit_size)
    cluster["shard-0"].store.model_path(manifest.key).unlink()
    await cluster["shard-0"].sync(manifest, assemble=True)
    assert sha(cluster["shard-0"].store.model_path(manifest.key)) == manifest.sha256


async def test_a_second_failure_beyond_tolerance_is_reported_not_papered_over(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    for sid in ("shard-1", "shard-2"):
        shutil.rmtree(cluster[sid].store.root / "units")
        (cluster[sid].store.root / "units").mkdir()
    service = cluster["shard-1"]
    service.store.model_path(manifest.key).unlink()
    with pytest.raises(RaidUnrecoverable, match=r"raid5 tolerates 1 lost shard") as err:
        await service.prepare(str(model_file), assemble=True)
    assert "unit_missing on shard-2" in str(err.value)
    assert not service.store.model_path(manifest.key).exists()  # nothing half-built to load
    assert service.status()["operation"]["state"] == "failed"


async def test_beyond_tolerance_with_a_dead_peer_waits_then_fails(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5", startup_timeout_s=0.5)
    manifest = await cluster.ingest_everywhere(model_file)
    cluster.wipe("shard-0")
    cluster.transport.down.add("shard-3")
    with pytest.raises(RaidUnrecoverable, match="shard-3 unreachable"):
        await cluster["shard-0"].prepare(str(model_file), assemble=True)
    assert not cluster["shard-0"].store.model_path(manifest.key).exists()


async def test_raid0_has_nothing_to_rebuild_from(raid_cluster, model_file):
    cluster = raid_cluster(3, "raid0")
    manifest = await cluster.ingest_everywhere(model_file)
    cluster.wipe("shard-1")
    with pytest.raises(RaidUnrecoverable, match="raid0 tolerates 0"):
        await cluster["shard-1"].prepare(str(model_file), assemble=True)
    assert manifest.parity_units == 0


async def test_raid1_mirror_rebuilds(raid_cluster, model_file):
    cluster = raid_cluster(3, "raid1")
    manifest = await cluster.ingest_everywhere(model_file)
    before = cluster.unit_files("shard-0")
    cluster.wipe("shard-0")
    path = await cluster["shard-0"].prepare(str(model_file), assemble=True)
    assert cluster.unit_files("shard-0") == before and sha(path) == manifest.sha256


async def test_ingest_places_every_unit_on_its_shard_over_http(raid_cluster, model_file):
    cluster = raid_cluster(5, "raid6")
    manifest = await cluster["shard-4"].ingest(str(model_file), activate=True)
    for sid in cluster.ids:
        service = cluster[sid]
        assert service.store.active_key == manifest.key
        report = await service.verify()
        assert report["ok"] == report["expected"] == len(manifest.layout.units_on(sid, manifest.size))
    path = await cluster["shard-2"].prepare("unused", assemble=True)
    assert sha(path) == sha(model_file)


async def test_ingest_needs_every_shard(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    cluster.transport.down.add("shard-3")
    with pytest.raises(Exception, match="every shard"):
        await cluster["shard-0"].ingest(str(model_file))


async def test_a_corrupt_assembled_file_is_reassembled_not_loaded(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    path = cluster["shard-0"].store.model_path(manifest.key)
    data = bytearray(path.read_bytes())
    data[5000] ^= 1
    path.write_bytes(bytes(data))
    assert sha(await cluster["shard-0"].prepare(str(model_file), assemble=True)) == manifest.sha256


async def test_unit_refs_outside_the_manifest_are_refused(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    from themis_shard.raid.store import UnitCorrupt

    with pytest.raises(UnitCorrupt, match="not a unit"):
        cluster["shard-0"].store.read_unit(manifest, UnitRef(manifest.stripes, 0))


async def test_ingest_from_a_url(raid_cluster, model_file):
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(model_file.parent))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = raid_cluster(3, "raid5")
        url = f"http://127.0.0.1:{server.server_port}/{model_file.name}"
        manifest = await cluster["shard-0"].ingest(url, activate=True)
        assert manifest.sha256 == sha(model_file) and manifest.name == model_file.name
        assert not list((cluster["shard-0"].store.root / "incoming").glob("*"))  # download cleaned up
        with pytest.raises(Exception, match="HTTP 404"):
            await cluster["shard-0"].ingest(url + ".missing")
    finally:
        server.shutdown()


async def test_before_formation_a_wiped_shard_restripes_the_source(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    for service in cluster.services.values():
        await service.ingest_local(str(model_file))  # a cluster still starting: nothing formed yet
    cluster.wipe("shard-3")
    path = await cluster["shard-3"].prepare(str(model_file), assemble=True)
    assert sha(path) == sha(model_file) and cluster["shard-3"].progress.op == "ingest"
    assert cluster["shard-3"].status()["origin"] == "source"


async def test_a_source_that_differs_from_the_peers_model_is_refused(raid_cluster, model_file, tmp_path):
    cluster = raid_cluster(4, "raid5")
    for sid in ("shard-0", "shard-1"):
        m = await cluster[sid].ingest_local(str(model_file))
        cluster[sid].store.set_active(m.key)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + b"x" * 1000)
    with pytest.raises(Exception, match="peers hold model"):
        await cluster["shard-2"].prepare(str(other), assemble=True)


async def test_rebuild_respects_the_rate_limit(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5", rebuild_rate_limit_mb_s=4)
    await cluster.ingest_everywhere(model_file)
    cluster.wipe("shard-1")
    await cluster["shard-1"].prepare(str(model_file), assemble=False)
    op = cluster["shard-1"].status()["operation"]
    assert op["bytes_transferred"] > 1e6
    assert op["rate_bytes_per_s"] <= 4.4e6 and op["elapsed_s"] >= op["bytes_transferred"] / 4e6 - 0.3


async def test_only_gguf_files_are_ingested(raid_cluster, tmp_path):
    from themis_shard.errors import ThemisError

    cluster = raid_cluster(3, "raid5")
    secret = tmp_path / "not-a-model.txt"
    secret.write_text("password=hunter2")
    with pytest.raises(ThemisError, match="not a GGUF file") as err:
        await cluster["shard-0"].ingest(str(secret))
    assert err.value.code == "not_gguf" and err.value.status == 400
    with pytest.raises(ThemisError, match="not found"):
        await cluster["shard-0"].ingest(str(tmp_path / "missing.gguf"))
