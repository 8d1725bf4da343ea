"""Spec: `themis up --auth` — a real local cluster with API keys on: the keys are minted into
.themis/auth, the shards hold only their digests, a public request forwarded between shards still
works with a client key, cluster operations need the admin key, and the CLI sends it itself."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest
from themis_client import Forbidden, ThemisClient, Unauthorized
from themis_core.plan import ClusterPlan
from themis_shard.cluster.placement.owners import Topology

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
        admin_key = (keys / "admin.key").read_text().strip()
        client_key = (keys / "client.key").read_text().strip()
        assert stat.S_IMODE((keys / "admin.key").stat().st_mode) == 0o600
        digests = (keys / "keys").read_text()
        assert admin_key not in digests and client_key not in digests and "sha256:" in digests
        plan = ClusterPlan.load(tmp_path / ".themis" / "plan.json")
        url = {m.shard_id: m.url for m in plan.members}

        with ThemisClient(url["shard-0"]) as anonymous:
            with pytest.raises(Unauthorized) as no_key:
                anonymous.collections()
            assert no_key.value.code == "unauthorized"
            assert anonymous.health().status == "ok"  # /health is always open

        # a key owned by shard-1, written and read through shard-0: forwarding uses /internal routes
        topo = Topology.of(plan, "shard-0")
        key = next(f"k{i}" for i in range(100) if topo.owners("c", f"k{i}")[0] == "shard-1")
        with (
            ThemisClient(url["shard-0"], api_key=client_key) as via_0,
            ThemisClient(url["shard-1"], api_key=client_key) as via_1,
        ):
            assert via_0.put("c", key, {"a": 1}).version == 1
            assert via_1.get("c", key).document == {"a": 1}
            assert via_0.aql("FOR d IN c RETURN d.a").result == [1]
            with pytest.raises(Forbidden) as not_admin:
                via_0.cluster_status()
            assert not_admin.value.code == "forbidden"
        with ThemisClient(url["shard-0"], api_key=admin_key) as as_admin:
            assert as_admin.cluster_status().shard_id == "shard-0"

        again = themis("up", "--shards", "2", "--no-llm", cwd=tmp_path)  # not silently without keys
        assert again.returncode != 0 and "started with --auth" in again.stderr
        assert themis("up", "--shards", "2", "--no-llm", "--auth", cwd=tmp_path).stdout == up.stdout

        # the CLI finds the admin key itself (scale polls /v1/cluster/status), or takes --api-key
        scale = themis("scale", "--shards", "3", cwd=tmp_path)
        assert scale.returncode == 0, scale.stderr
        state = json.loads((tmp_path / ".themis" / "cluster.json").read_text())
        new = state["shards"][-1]["url"]
        with ThemisClient(new, api_key=client_key) as keyed, ThemisClient(new) as anonymous:
            assert isinstance(keyed.collections(), list)
            with pytest.raises(Unauthorized):
                anonymous.collections()
        bad = themis("--api-key", "themis_wrong", "raid", "status", cwd=tmp_path)
        assert bad.returncode != 0 and "the API key is not valid" in bad.stdout
    finally:
        themis("down", cwd=tmp_path)
