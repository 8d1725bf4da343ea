"""Spec: tenants on a real shard (real uvicorn, real llama.cpp, API keys on). A tenant over its
requests_per_s or tokens_per_min gets 429 with Retry-After naming the tenant and the limit while
another tenant is served; ``priority`` above a tenant's max_priority is refused by name; the
official ``openai`` client sees the 429 as a RateLimitError; per-tenant metrics are exposed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_core.tenant_policy import TenantPolicy
from themis_shard.app import create_app
from themis_shard.auth.settings import AuthSettings
from themis_shard.settings import Settings

from .conftest import Server, llm_settings

FLOOD, CALM, TOKENS, ADMIN = new_key(), new_key(), new_key(), new_key()
POLICIES = (
    TenantPolicy("flood", requests_per_s=0.2, max_priority=0),  # one request, then one per 5 s
    TenantPolicy("tokens", tokens_per_min=12),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_path: Path):
    data = tmp_path_factory.mktemp("shard")
    keys = data.parent / "tenant-keys"
    keys.write_text(
        "\n".join(
            [p.line() for p in POLICIES]
            + [
                entry_for(FLOOD, Role.client, "flooder", "flood").line(),
                entry_for(CALM, Role.client, "steady", "calm").line(),
                entry_for(TOKENS, Role.client, tenant="tokens").line(),
                entry_for(ADMIN, Role.admin, "ops").line(),
            ]
        )
        + "\n"
    )
    auth = AuthSettings(enabled=True, keys_file=keys)
    with Server(create_app(Settings(data_dir=data, llm=llm_settings(), auth=auth))) as srv:
        yield srv


def infer(server: Server, key: str, **body) -> httpx.Response:
    body = {"prompt": "Hello", "max_tokens": 2, **body}
    return httpx.post(
        f"{server.url}/v1/infer", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120
    )


def error(r: httpx.Response) -> dict:
    return r.json()["error"]


def test_a_tenant_over_its_request_rate_gets_429_naming_the_limit_while_another_is_served(server) -> None:
    assert infer(server, FLOOD).status_code == 200
    refused = infer(server, FLOOD)
    assert refused.status_code == 429, refused.text
    assert error(refused)["code"] == "tenant_rate_limited"
    assert "tenant 'flood'" in error(refused)["message"] and "requests_per_s" in error(refused)["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 5
    for _ in range(3):  # the other tenant, with no limits, is not held back by the flooder's
        assert infer(server, CALM).status_code == 200


def test_priority_above_the_tenants_allowance_is_refused_by_name(server) -> None:
    r = infer(server, FLOOD, priority=10)
    assert r.status_code == 403 and error(r)["code"] == "priority_not_allowed"
    assert "priority 10 is above tenant 'flood''s max_priority 0" in error(r)["message"]
    assert infer(server, CALM, priority=10).status_code == 200  # no max_priority: any priority
    assert infer(server, ADMIN, priority=10).status_code == 200  # a key without a tenant: default


def test_tokens_per_min_charges_max_tokens_and_refuses_the_excess(server) -> None:
    assert infer(server, TOKENS, max_tokens=8).status_code == 200
    r = infer(server, TOKENS, max_tokens=8)  # 4 of 12 left
    assert r.status_code == 429 and "tokens_per_min" in error(r)["message"]
    assert int(r.headers["retry-after"]) >= 1
    r = infer(server, TOKENS, max_tokens=20)
    assert r.status_code == 400 and error(r)["code"] == "over_tenant_limit"


def test_the_official_openai_client_sees_a_rate_limit_error(server) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=FLOOD, max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        for _ in range(2):
            client.chat.completions.create(
                model="gemma3-270m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
            )
    assert "requests_per_s" in str(refused.value)
    steady = openai.OpenAI(base_url=f"{server.url}/v1", api_key=CALM, max_retries=0)
    answer = steady.chat.completions.create(
        model="gemma3-270m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert answer.choices[0].message is not None


def test_per_tenant_metrics_are_exposed(server) -> None:
    text = httpx.get(f"{server.url}/metrics").text
    assert 'themis_tenant_throttled_total{limit="requests_per_s",tenant="flood"}' in text
    assert 'themis_tenant_requests_total{outcome="admitted",tenant="calm"}' in text
    assert 'themis_tenant_requests_total{outcome="refused",tenant="flood"}' in text
    assert 'themis_tenant_tokens_total{tenant="tokens"} 8.0' in text
    assert 'themis_tenant_inflight{tenant="calm"} 0.0' in text
