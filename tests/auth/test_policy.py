"""Spec: which role each public route needs (pure), and the hashed key ring."""

from __future__ import annotations

import pytest
from themis_core.access_policy import Role, required_role
from themis_core.api_keys import KeyRing, bearer_token, digest, entry_for, new_key, parse_entries
from themis_shard.auth.settings import AuthSettings

CLIENT_ROUTES = [
    ("POST", "/v1/infer"),
    ("POST", "/v1/infer:batch"),
    ("POST", "/v1/embed"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/rag"),
    ("POST", "/v1/rag:replay"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("POST", "/v1/files"),
    ("GET", "/v1/files/file-1/content"),
    ("DELETE", "/v1/files/file-1"),
    ("POST", "/v1/batches"),
    ("GET", "/v1/batches/batch_1"),
    ("POST", "/v1/batches/batch_1/cancel"),
    ("PUT", "/v1/collections/books/documents/dune"),
    ("POST", "/v1/collections/books/documents:batch"),
    ("POST", "/v1/collections/books/search"),
    ("PUT", "/v1/collections/books"),
    ("GET", "/v1/collections"),
    ("POST", "/v1/transactions"),
    ("GET", "/v1/transactions/client-chosen-id"),
    ("POST", "/v1/aql"),
    ("GET", "/v1/adapters"),
    ("GET", "/v1/adapters/legal"),
]
ADMIN_ROUTES = [
    ("POST", "/v1/adapters"),
    ("DELETE", "/v1/adapters/legal"),
    ("GET", "/v1/raid/status"),
    ("POST", "/v1/raid/rebuild"),
    ("POST", "/v1/raid/models"),
    ("POST", "/v1/raid/verify"),
    ("GET", "/v1/cluster/status"),
    ("GET", "/v1/cluster/transactions"),
    ("POST", "/v1/cluster/transactions/some-id:resolve"),
]


@pytest.mark.parametrize(("method", "path"), CLIENT_ROUTES)
def test_data_and_inference_routes_need_the_client_role(method: str, path: str) -> None:
    assert required_role(method, path) is Role.client


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
def test_adapters_raid_and_cluster_operations_need_the_admin_role(method: str, path: str) -> None:
    assert required_role(method, path) is Role.admin


def test_health_ready_and_internal_routes_are_open() -> None:
    for path in ("/health", "/ready", "/internal/commit", "/internal/infer"):
        assert required_role("GET", path) is None, path


def test_the_api_description_needs_a_client_key_unless_configured_open() -> None:
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert required_role("GET", path) is Role.client, path
        assert required_role("GET", path, docs_open=True) is None, path


def test_metrics_are_open_unless_configured_closed() -> None:
    assert required_role("GET", "/metrics", metrics_open=True) is None
    assert required_role("GET", "/metrics", metrics_open=False) is Role.client


def test_a_route_nobody_classified_needs_admin() -> None:
    assert required_role("POST", "/v1/something-new") is Role.admin
    assert required_role("GET", "/v1/inference-admin") is Role.admin  # a prefix ends at a path boundary
    assert required_role("GET", "/internals") is Role.admin


def test_admin_may_do_what_client_may() -> None:
    assert Role.admin > Role.client


def test_keys_are_held_as_sha256_digests_and_checked_by_role() -> None:
    admin, client = new_key(), new_key()
    entries = [entry_for(admin, Role.admin, "ops"), entry_for(client, Role.client)]
    assert all(admin not in e.line() and client not in e.line() for e in entries)
    ring = KeyRing(parse_entries("\n".join(e.line() for e in entries)))
    assert ring.role_of(admin) is Role.admin
    assert ring.role_of(client) is Role.client
    assert ring.role_of(new_key()) is None
    assert ring.role_of("") is None


def test_the_keys_file_format_refuses_malformed_lines_by_number() -> None:
    good = f"# comment\nclient {digest('k')} app   # trailing comment\n\nadmin {digest('a')}"
    assert [e.role for e in parse_entries(good)] == [Role.client, Role.admin]
    assert len(parse_entries(f"client {digest('k')}; admin {digest('a')}")) == 2
    with pytest.raises(ValueError, match=r"line 1.*sha256"):
        parse_entries("client my-plain-text-key")
    with pytest.raises(ValueError, match="unknown role 'root'"):
        parse_entries(f"root {digest('k')}")
    with pytest.raises(ValueError, match="line 2"):
        parse_entries(f"client {digest('k')}\nclient")


def test_bearer_tokens_are_read_from_the_authorization_header() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer   abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_enabling_auth_without_keys_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="THEMIS_AUTH_KEYS"):
        AuthSettings(enabled=True)
    with pytest.raises(ValueError, match="does not exist"):
        AuthSettings(enabled=True, keys_file=tmp_path / "missing")
    keys = tmp_path / "keys"
    keys.write_text(entry_for("k", Role.client).line() + "\n")
    assert AuthSettings(enabled=True, keys_file=keys).key_ring().role_of("k") is Role.client
    assert AuthSettings().enabled is False  # local mode: off by default
