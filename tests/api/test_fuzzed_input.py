"""Spec: what schemathesis (e2e/test_schemathesis.py) found at the HTTP edge, fixed: a 405 names
every method of its path, a JSON value of the wrong type is refused rather than coerced, and
names, keys and If-Match are judged by the rules the schema states."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

DOC = "/v1/collections/books/documents"


def error_code(response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"]


def test_a_405_allows_every_method_the_path_serves(client: TestClient) -> None:
    r = client.request("PATCH", f"{DOC}/dune")
    assert r.status_code == 405 and error_code(r) == "method_not_allowed"
    assert set(r.headers["allow"].split(", ")) == {"GET", "PUT", "DELETE"}
    r = client.request("OPTIONS", "/v1/collections/books")
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"GET", "PUT"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/collections/books", {"dimension": "3"}),  # a numeric string is not an integer
        ("/v1/collections/books", {"dimension": True}),  # nor is a boolean
        ("/v1/collections/books/search", {"vector": [0.1], "k": "5"}),
        ("/v1/collections/books/search", {"vector": ["0.1"]}),
        (
            "/v1/transactions",
            {"operations": [{"op": "delete", "collection": "b", "key": "k", "if_version": "1"}]},
        ),
        ("/v1/aql", {"query": "RETURN 1", "bind_vars": []}),
    ],
)
def test_a_value_of_the_wrong_json_type_is_refused_not_coerced(client: TestClient, path, body) -> None:
    r = client.request("PUT" if path == "/v1/collections/books" else "POST", path, json=body)
    assert r.status_code == 400 and error_code(r) == "invalid_request", r.text


def test_the_right_json_types_are_still_accepted(client: TestClient) -> None:
    assert client.put("/v1/collections/books", json={"dimension": 2, "hnsw_m": 16}).status_code == 200
    r = client.post("/v1/collections/books/search", json={"vector": [1, 0.5], "k": 3})  # ints are numbers
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("key", ["dune%0A", "%E2%85%A0", "a%20b"])
def test_a_key_is_judged_whole(client: TestClient, key: str) -> None:
    """A trailing newline passed ``re.match(...$)``; the rule is the schema's pattern, whole."""
    r = client.put(f"{DOC}/{key}", json={})
    assert r.status_code == 400 and error_code(r) == "invalid_key"


def test_a_collection_name_with_a_trailing_newline_is_refused(client: TestClient) -> None:
    r = client.put("/v1/collections/books%0A/documents/dune", json={})
    assert r.status_code == 400 and error_code(r) == "invalid_collection_name"


@pytest.mark.parametrize("value", [b"\xb2", b"1\xb2", b"", b"latest", b'"1'])
def test_if_match_takes_ascii_version_numbers_only(client: TestClient, value: bytes) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises: that was a 500."""
    client.put(f"{DOC}/dune", json={})
    r = client.put(f"{DOC}/dune", json={}, headers={"If-Match": value})
    assert r.status_code == 400 and error_code(r) == "invalid_if_match"
    assert client.put(f"{DOC}/dune", json={}, headers={"If-Match": 'W/"1"'}).json()["version"] == 2


def test_an_unknown_adapter_field_is_refused_by_name(tmp_path) -> None:
    """It was ignored (schemathesis loaded ``{"name", "evaluate", "\u00ff\u00a1j": [...]}``)."""
    from themis_shard.app import create_app
    from themis_shard.llm.settings import LLMSettings
    from themis_shard.settings import Settings

    app = create_app(Settings(data_dir=tmp_path / "shard", llm=LLMSettings(enabled=True)))
    r = TestClient(app).post("/v1/adapters", json={"name": "legal", "path": "/x.gguf", "scaling": 2})
    assert r.status_code == 400 and error_code(r) == "unsupported_parameter"
    assert "scaling" in r.json()["error"]["message"]
