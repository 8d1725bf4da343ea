"""Spec: API keys on a real shard app — 401 without or with a wrong key, 403 for a role that may
not, health and readiness always open, metrics as configured, errors in the standard shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_shard.app import create_app
from themis_shard.auth.settings import AuthSettings

from tests.conftest import shard_settings

ADMIN, CLIENT = new_key(), new_key()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error_code(response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"]


def make_client(tmp_path: Path, **auth) -> TestClient:
    keys = tmp_path / "api-keys"
    keys.write_text(
        f"{entry_for(ADMIN, Role.admin, 'ops').line()}\n{entry_for(CLIENT, Role.client).line()}\n"
    )
    settings = shard_settings(tmp_path / "shard", auth=AuthSettings(enabled=True, keys_file=keys, **auth))
    return TestClient(create_app(settings))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    with make_client(tmp_path) as c:
        yield c


def test_no_key_is_401_with_a_bearer_challenge(api: TestClient) -> None:
    r = api.get("/v1/collections")
    assert r.status_code == 401 and error_code(r) == "unauthorized"
    assert r.headers["www-authenticate"] == 'Bearer realm="themis"'
    r = api.get("/v1/collections", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert r.status_code == 401 and error_code(r) == "unauthorized"


def test_an_unknown_key_is_401_invalid_api_key(api: TestClient) -> None:
    r = api.put("/v1/collections/books/documents/dune", json={"t": 1}, headers=bearer(new_key()))
    assert r.status_code == 401 and error_code(r) == "invalid_api_key"
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    assert api.get("/v1/collections/books/documents/dune", headers=bearer(ADMIN)).status_code == 404


def test_a_client_key_reads_and_writes_documents_and_runs_aql(api: TestClient) -> None:
    r = api.put("/v1/collections/books/documents/dune", json={"title": "Dune"}, headers=bearer(CLIENT))
    assert r.status_code == 200, r.text
    r = api.post("/v1/aql", json={"query": "FOR b IN books RETURN b.title"}, headers=bearer(CLIENT))
    assert r.status_code == 200 and r.json()["result"] == ["Dune"]


def test_a_client_key_may_not_operate_the_cluster(api: TestClient) -> None:
    for method, path, body in (
        ("GET", "/v1/cluster/status", None),
        ("POST", "/v1/adapters", {"name": "legal", "domain": "legal", "path": "/etc/passwd"}),
        ("DELETE", "/v1/adapters/legal", None),
        ("POST", "/v1/raid/rebuild", {}),
        ("GET", "/v1/raid/status", None),
    ):
        r = api.request(method, path, json=body, headers=bearer(CLIENT))
        assert r.status_code == 403 and error_code(r) == "forbidden", (path, r.text)
        assert "admin role" in r.json()["error"]["message"]
        assert 'error="insufficient_scope"' in r.headers["www-authenticate"]


def test_an_admin_key_may_do_everything(api: TestClient) -> None:
    assert api.get("/v1/cluster/status", headers=bearer(ADMIN)).status_code == 200
    assert api.put("/v1/collections/books/documents/a", json={}, headers=bearer(ADMIN)).status_code == 200


def test_health_and_ready_are_always_open_and_metrics_by_default(api: TestClient) -> None:
    assert api.get("/health").status_code == 200
    assert api.get("/ready").status_code == 200
    assert api.get("/metrics").status_code == 200


def test_the_api_description_needs_a_key_unless_configured_open(api: TestClient, tmp_path: Path) -> None:
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert api.get(path).status_code == 401, path
        assert api.get(path, headers=bearer(CLIENT)).status_code == 200, path
    (tmp_path / "open").mkdir()
    with make_client(tmp_path / "open", docs_open=True) as c:
        assert c.get("/openapi.json").status_code == 200


def test_metrics_can_require_a_key(tmp_path: Path) -> None:
    with make_client(tmp_path, metrics_open=False) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers=bearer(CLIENT)).status_code == 200


def test_a_request_refused_for_its_key_is_refused_before_its_body_is_read(api: TestClient) -> None:
    r = api.post("/v1/aql", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 401


def test_without_auth_settings_the_local_mode_is_open(client: TestClient) -> None:
    assert client.get("/v1/collections").status_code == 200


def test_the_openapi_schema_names_the_bearer_scheme_and_each_operations_role(api: TestClient) -> None:
    schema = api.get("/openapi.json", headers=bearer(CLIENT)).json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    paths = schema["paths"]
    assert paths["/v1/aql"]["post"]["x-themis-role"] == "client"
    assert paths["/v1/aql"]["post"]["security"] == [{"bearer": []}]
    assert paths["/v1/cluster/status"]["get"]["x-themis-role"] == "admin"
    assert "security" not in paths["/health"]["get"]
