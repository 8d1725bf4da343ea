"""Spec: tenants on a real local cluster (`themis up --auth`, a real shard process, llama.cpp), declared
locally through THEMIS_AUTH_KEYS: a tenant over its requests_per_s gets 429 tenant_rate_limited with
Retry-After through the official Python client while another tenant is served, a priority above the
tenant's max_priority is 403 by name, and /metrics counts it per tenant."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from themis_client import Forbidden, RateLimited, ThemisClient
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_core.plan import ClusterPlan
from themis_core.tenant_policy import TenantPolicy

pytestmark = pytest.mark.e2e

FLOOD, CALM = new_key(), new_key()


def themis(*args: str, cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_an_over_limit_tenant_is_refused_by_name_while_another_is_served(tmp_path) -> None:
    keys = [
        TenantPolicy("flood", requests_per_s=0.01, max_priority=0).line(),  # one, then one per 100 s
        entry_for(FLOOD, Role.client, "flooder", "flood").line(),
        entry_for(CALM, Role.client, "steady", "calm").line(),
    ]
    up = themis(
        "up",
        "--shards",
        "1",
        "--base-port",
        "0",
        "--auth",
        cwd=tmp_path,
        env={"THEMIS_AUTH_KEYS": "; ".join(keys)},
    )
    try:
        assert up.returncode == 0, up.stderr
        (member,) = ClusterPlan.load(tmp_path / ".themis" / "plan.json").members
        with ThemisClient(member.url, api_key=FLOOD) as flood, ThemisClient(member.url, api_key=CALM) as calm:
            assert flood.infer("Hello", max_tokens=2).text is not None
            with pytest.raises(RateLimited) as refused:
                flood.infer("Hello", max_tokens=2)
            assert refused.value.code == "tenant_rate_limited"
            assert "tenant 'flood'" in str(refused.value) and "requests_per_s" in str(refused.value)
            for _ in range(2):
                assert calm.infer("Hello", max_tokens=2).text is not None
            with pytest.raises(Forbidden) as too_high:
                flood.infer("Hello", max_tokens=2, priority=5)
            assert too_high.value.code == "priority_not_allowed"
        raw = httpx.post(
            f"{member.url}/v1/infer",
            json={"prompt": "Hello", "max_tokens": 2},
            headers={"Authorization": f"Bearer {FLOOD}"},
        )
        assert raw.status_code == 429 and 1 <= int(raw.headers["retry-after"]) <= 100
        metrics = httpx.get(f"{member.url}/metrics").text
        assert 'themis_tenant_throttled_total{limit="requests_per_s",tenant="flood"} 2.0' in metrics
        assert 'themis_tenant_requests_total{outcome="admitted",tenant="calm"} 2.0' in metrics
    finally:
        themis("down", cwd=tmp_path)
