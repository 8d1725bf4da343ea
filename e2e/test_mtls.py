"""Spec: with `themis up --tls`, clients use HTTPS, shards talk over mTLS, and shard-to-shard
endpoints refuse anyone without a cluster certificate."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys

import httpx
import pytest
from themis_client import ThemisClient

pytestmark = pytest.mark.e2e


def themis(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_tls_cluster_routes_over_mtls_and_refuses_strangers(tmp_path) -> None:
    up = themis("up", "--shards", "2", "--tls", "--no-llm", "--base-port", "0", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads((tmp_path / ".themis" / "cluster.json").read_text())
        plan = json.loads((tmp_path / ".themis" / "plan.json").read_text())
        ca = state["ca"]
        urls = [m["url"] for m in plan["members"]]
        internal = [m["internal_url"] for m in plan["members"]]
        assert all(u.startswith("https://") for u in urls + internal)
        verify = ssl.create_default_context(cafile=ca)
        with (
            ThemisClient(urls[0], verify=verify, timeout=10) as first,
            ThemisClient(urls[1], verify=verify) as second,
        ):
            for i in range(10):  # some keys are owned by the other shard: forwarded over mTLS
                assert first.put("c", f"k{i}", {"i": i}).version == 1
            for i in range(10):
                assert second.get("c", f"k{i}").document == {"i": i}
        # Raw httpx from here: /internal routes and TLS handshakes, not the client's API.
        with httpx.Client(verify=verify, timeout=10) as client:
            # The public listener never serves shard-to-shard endpoints.
            r = client.get(f"{urls[0]}/internal/collections")
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        # The internal listener's TLS handshake demands a client certificate from the cluster CA.
        with (
            pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, ssl.SSLError)),
            httpx.Client(verify=ssl.create_default_context(cafile=ca)) as anon,
        ):
            anon.get(f"{internal[0]}/internal/collections")
        tls = tmp_path / ".themis" / "tls"
        ctx = ssl.create_default_context(cafile=ca)
        ctx.load_cert_chain(tls / "shard-1.crt", tls / "shard-1.key")
        with httpx.Client(verify=ctx) as peer:
            assert peer.get(f"{internal[0]}/internal/collections").status_code == 200
        assert httpx.get(f"{urls[0]}/health", verify=False).status_code == 200  # clients need no cert
    finally:
        themis("down", cwd=tmp_path)
