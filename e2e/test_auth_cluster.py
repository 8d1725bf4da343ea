"""Spec: `themis up --auth` — a real local cluster with API keys on: the keys are minted into
.themis/auth, the shards hold only their digests, a public request forwarded between shards still
works with a client key, cluster operations need the admin key, and the CLI sends it itself."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import httpx
import pytest
from themis_shard.cluster.placement import Topology
from themis_shard.plan import ClusterPlan

pytestmark = pytest.mark.e2e


def themis(*args: str, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_up_with_auth_mints_keys_and_every_public_route_needs_one(tmp_path) -> None:
    up = themis(
        "up", "--shards", "2", "--raid-mode", "raid0", "--no-llm", "--base-port", "0", "--auth", cwd=tmp_path
    )
    try:
        assert up.returncode == 0, up.stderr
        keys = tmp_path / ".themis" / "auth"
        assert str(keys / "admin.key") in up.stderr and str(keys / "client.key") in up.stderr
        admin, client = (keys / "admin.key").read_text().strip(), (keys / "client.key").read_text().strip()
        assert stat.S_IMODE((keys / "admin.key").stat().st_mode) == 0o600
        digests = (keys / "keys").read_text()
        assert admin not in digests and client not in digests and "sha256:" in digests
        plan = ClusterPlan.load(tmp_path / ".themis" / "plan.json")
        url = {m.shard_id: m.url for m in plan.members}
        as_client = {"Authorization": f"Bearer {client}"}

        r = httpx.get(f"{url['shard-0']}/v1/collections")
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
        assert httpx.get(f"{url['shard-0']}/health").status_code == 200

        # a key owned by shard-1, written and read through shard-0: forwarding uses /internal routes
        topo = Topology.of(plan, "shard-0")
        key = next(f"k{i}" for i in range(100) if topo.owners("c", f"k{i}")[0] == "shard-1")
        r = httpx.put(f"{url['shard-0']}/v1/collections/c/documents/{key}", json={"a": 1}, headers=as_client)
        assert r.status_code == 200, r.text
        r = httpx.get(f"{url['shard-1']}/v1/collections/c/documents/{key}", headers=as_client)
        assert r.json()["document"] == {"a": 1}
        r = httpx.post(f"{url['shard-0']}/v1/aql", json={"query": "FOR d IN c RETURN d.a"}, headers=as_client)
        assert r.status_code == 200 and r.json()["result"] == [1]

        r = httpx.get(f"{url['shard-0']}/v1/cluster/status", headers=as_client)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        r = httpx.get(f"{url['shard-0']}/v1/cluster/status", headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 200

        again = themis("up", "--shards", "2", "--no-llm", cwd=tmp_path)  # not silently without keys
        assert again.returncode != 0 and "started with --auth" in again.stderr
        assert themis("up", "--shards", "2", "--no-llm", "--auth", cwd=tmp_path).stdout == up.stdout

        # the CLI finds the admin key itself (scale polls /v1/cluster/status), or takes --api-key
        scale = themis("scale", "--shards", "3", cwd=tmp_path)
        assert scale.returncode == 0, scale.stderr
        state = json.loads((tmp_path / ".themis" / "cluster.json").read_text())
        new = state["shards"][-1]["url"]
        assert httpx.get(f"{new}/v1/collections", headers=as_client).status_code == 200
        assert httpx.get(f"{new}/v1/collections").status_code == 401
        bad = themis("--api-key", "themis_wrong", "raid", "status", cwd=tmp_path)
        assert bad.returncode != 0 and "the API key is not valid" in bad.stdout
    finally:
        themis("down", cwd=tmp_path)
