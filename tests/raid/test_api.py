"""Bad input at the edges: wrong manifests, truncated/corrupt units, units for the wrong shard."""

from __future__ import annotations

import json

import httpx
import pytest
from themis_shard.raid.manifest import Manifest, ManifestError


def client_for(cluster, sid: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=cluster.transport.apps[sid], base_url=f"http://{sid}")


@pytest.mark.asyncio
async def test_units_are_checked_against_the_manifest_on_put(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    ref = manifest.layout.units_on("shard-1", manifest.size)[0]
    good = cluster["shard-1"].store.unit_path(manifest.key, ref).read_bytes()
    url = f"/internal/raid/units/{manifest.key}/{ref.stripe}/{ref.index}"
    async with client_for(cluster, "shard-1") as c:
        r = await c.put(url, content=good[:-64])
        assert r.status_code == 400 and "truncated" in r.json()["error"]["message"]
        # a first byte that differs from the unit's, whatever random bytes it holds
        r = await c.put(url, content=bytes([good[0] ^ 0xFF]) + good[1:])
        assert r.status_code == 400 and r.json()["error"]["code"] == "unit_corrupt"
        assert (await c.put(url, content=good)).status_code == 204
        other = manifest.layout.units_on("shard-2", manifest.size)[0]
        r = await c.put(f"/internal/raid/units/{manifest.key}/{other.stripe}/{other.index}", content=good)
        assert r.status_code == 409 and r.json()["error"]["code"] == "wrong_shard"
        r = await c.put(f"/internal/raid/units/{'0' * 24}/0/0", content=good)
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_model"
        r = await c.get(f"/internal/raid/units/{manifest.key}/{manifest.stripes}/0")
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_unit"


@pytest.mark.asyncio
async def test_a_corrupt_unit_is_never_served(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    ref = manifest.layout.units_on("shard-0", manifest.size)[1]
    path = cluster["shard-0"].store.unit_path(manifest.key, ref)
    url = f"/internal/raid/units/{manifest.key}/{ref.stripe}/{ref.index}"
    async with client_for(cluster, "shard-0") as c:
        ok = await c.get(url)
        assert ok.status_code == 200 and ok.content == path.read_bytes()
        assert ok.headers["x-themis-crc32"] == f"{manifest.crc(ref.stripe, ref.index):08x}"
        path.write_bytes(b"x" * manifest.unit_size)
        r = await c.get(url)
        assert r.status_code == 409 and r.json()["error"]["code"] == "unit_corrupt"
        path.unlink()
        r = await c.get(url)
        assert r.status_code == 404 and r.json()["error"]["code"] == "unit_missing"


@pytest.mark.asyncio
async def test_wrong_manifests_are_refused(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    body = json.loads(manifest.canonical())
    async with client_for(cluster, "shard-2") as c:
        tampered = {**body, "crc32": [[0] * 4, *body["crc32"][1:]]}
        r = await c.put(f"/internal/raid/manifests/{manifest.key}", content=json.dumps(tampered))
        assert r.status_code == 400 and "does not match its key" in r.json()["error"]["message"]
        short = {**body, "crc32": body["crc32"][:-1]}
        r = await c.put(f"/internal/raid/manifests/{manifest.key}", content=json.dumps(short))
        assert r.status_code == 400 and "crc rows" in r.json()["error"]["message"]
        r = await c.put(f"/internal/raid/manifests/{manifest.key}", content=b"{not json")
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_manifest"
        foreign = Manifest.model_validate({**body, "shards": ["x", "y", "z", "w"]})
        r = await c.put(f"/internal/raid/manifests/{foreign.key}", content=foreign.canonical())
        assert r.status_code == 409 and "does not place units on shard-2" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"unit_size": 1000}, "multiple of 64"),
        ({"mode": "raid5", "parity_units": 2, "shards": ["a", "b", "c", "d"]}, "cannot have"),
        ({"shards": ["a", "b"]}, "needs at least 3 shards"),
        ({"format": 9}, "not supported"),
        ({"sha256": "xyz"}, "sha256"),
        ({"size": 10**12}, "crc rows"),
    ],
)
def test_manifest_consistency(raid_manifest_body, change, message):
    with pytest.raises(ManifestError, match=message):
        Manifest.parse(json.dumps({**raid_manifest_body, **change}))


@pytest.fixture
def raid_manifest_body() -> dict:
    return {
        "name": "m",
        "sha256": "0" * 64,
        "size": 100,
        "mode": "raid5",
        "shards": ["a", "b", "c"],
        "data_units": 2,
        "parity_units": 1,
        "unit_size": 64,
        "crc32": [[1, 2, 3]],
    }


@pytest.mark.asyncio
async def test_status_reports_layout_model_units_and_operation(raid_cluster, model_file):
    cluster = raid_cluster(4, "raid5")
    manifest = await cluster.ingest_everywhere(model_file)
    await cluster["shard-3"].verify()
    async with client_for(cluster, "shard-3") as c:
        status = (await c.get("/v1/raid/status")).json()
        assert status["layout"]["mode"] == "raid5" and status["layout"]["tolerance"] == 1
        assert status["model"]["key"] == manifest.key and status["model"]["sha256"] == manifest.sha256
        assert status["units"]["ok"] == status["units"]["expected"] > 0
        assert status["operation"]["op"] == "ingest" and status["operation"]["state"] == "done"
        assert status["degraded"] is False
        verify = (await c.post("/v1/raid/verify")).json()
        assert verify["missing"] == verify["corrupt"] == 0
        rebuilt = (await c.post("/v1/raid/rebuild", json={"assemble": False})).json()
        assert rebuilt["operation"]["state"] == "done"


def test_raid_is_off_by_default_and_says_so(client):
    assert client.get("/v1/raid/status").json() == {"enabled": False, "shard_id": "shard-0"}
    r = client.post("/v1/raid/verify")
    assert r.status_code == 503 and r.json()["error"]["code"] == "raid_disabled"
