"""Spec: the documents, collections and transactions REST API (API.md), including bad input."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

DOC = "/v1/collections/books/documents"


def error_code(response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"]


def test_put_get_delete_round_trip(client: TestClient) -> None:
    r = client.put(f"{DOC}/dune", json={"title": "Dune"})
    assert r.status_code == 200 and r.json() == {"urn": "urn:themis:books:dune", "version": 1}
    r = client.get(f"{DOC}/dune")
    assert r.json() == {"urn": "urn:themis:books:dune", "version": 1, "document": {"title": "Dune"}}
    assert client.delete(f"{DOC}/dune").json() == {"urn": "urn:themis:books:dune", "version": 2}
    r = client.get(f"{DOC}/dune")
    assert r.status_code == 404 and error_code(r) == "document_not_found"
    assert client.delete(f"{DOC}/dune").status_code == 404


def test_if_match_gives_optimistic_concurrency(client: TestClient) -> None:
    client.put(f"{DOC}/dune", json={"v": 1})
    r = client.put(f"{DOC}/dune", json={"v": 2}, headers={"If-Match": "3"})
    assert r.status_code == 409 and error_code(r) == "version_conflict"
    assert client.put(f"{DOC}/dune", json={"v": 2}, headers={"If-Match": '"1"'}).json()["version"] == 2
    r = client.put(f"{DOC}/dune", json={}, headers={"If-Match": "latest"})
    assert r.status_code == 400 and error_code(r) == "invalid_if_match"
    assert client.delete(f"{DOC}/dune", headers={"If-Match": "1"}).status_code == 409


def test_batch_is_atomic_and_returns_versions_in_order(client: TestClient) -> None:
    r = client.post(
        f"{DOC}:batch", json={"documents": [{"key": f"b{i}", "document": {"i": i}} for i in range(5)]}
    )
    assert [x["urn"] for x in r.json()["results"]] == [f"urn:themis:books:b{i}" for i in range(5)]
    r = client.post(
        f"{DOC}:batch",
        json={"documents": [{"key": "ok", "document": {}}, {"key": "bad/key", "document": {}}]},
    )
    assert r.status_code == 400
    assert client.get(f"{DOC}/ok").status_code == 404
    assert client.get("/v1/collections/books").json()["documents"] == 5


def test_transaction_commits_everything_or_nothing(client: TestClient) -> None:
    client.put(f"{DOC}/a", json={"n": 1})
    ok = client.post(
        "/v1/transactions",
        json={
            "operations": [
                {"op": "put", "collection": "books", "key": "b", "document": {"n": 2}},
                {"op": "delete", "collection": "books", "key": "a", "if_version": 1},
                {"op": "put", "collection": "authors", "key": "herbert", "document": {"name": "Frank"}},
            ]
        },
    )
    assert ok.status_code == 200 and ok.json()["committed"] is True
    assert client.get(f"{DOC}/a").status_code == 404
    conflict = client.post(
        "/v1/transactions",
        json={
            "operations": [
                {"op": "put", "collection": "books", "key": "c", "document": {}},
                {"op": "put", "collection": "books", "key": "b", "document": {"n": 3}, "if_version": 7},
            ]
        },
    )
    assert conflict.status_code == 409 and error_code(conflict) == "version_conflict"
    assert client.get(f"{DOC}/c").status_code == 404
    assert client.get(f"{DOC}/b").json()["document"] == {"n": 2}


@pytest.mark.parametrize(
    "method,path,kwargs,status,code",
    [
        (
            "put",
            f"{DOC}/x",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            400,
            "malformed_json",
        ),
        ("put", f"{DOC}/x", {"json": [1, 2]}, 400, "invalid_request"),
        (
            "put",
            f"{DOC}/x",
            {"content": b'{"a": NaN}', "headers": {"content-type": "application/json"}},
            400,
            "invalid_number",
        ),
        (
            "put",
            f"{DOC}/x",
            {"content": b'{"a": 1e999}', "headers": {"content-type": "application/json"}},
            400,
            "invalid_number",
        ),
        ("put", "/v1/collections/Bad_Name/documents/x", {"json": {}}, 400, "invalid_collection_name"),
        ("put", f"{DOC}/{'k' * 300}", {"json": {}}, 400, "invalid_key"),
        ("get", "/v1/collections/nope", {}, 404, "collection_not_found"),
        ("post", "/v1/collections/nope/search", {"json": {"vector": [1.0]}}, 404, "collection_not_found"),
        ("post", f"{DOC}:batch", {"json": {"documents": []}}, 400, "empty_batch"),
        (
            "post",
            "/v1/transactions",
            {"json": {"operations": [{"op": "put", "collection": "c", "key": "k"}]}},
            400,
            "invalid_operation",
        ),
        (
            "post",
            "/v1/transactions",
            {"json": {"operations": [{"op": "merge", "collection": "c", "key": "k"}]}},
            400,
            "invalid_request",
        ),
        ("get", "/v1/no/such/route", {}, 404, "not_found"),
    ],
)
def test_bad_input_is_a_clear_4xx_json_error(client: TestClient, method, path, kwargs, status, code) -> None:
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status, r.text
    assert error_code(r) == code


def test_oversize_documents_and_bodies_get_413(tmp_path, make_settings) -> None:
    from themis_shard.app import create_app

    settings = make_settings(tmp_path / "s", max_document_bytes=200, max_request_bytes=4096)
    with TestClient(create_app(settings)) as c:
        r = c.put(f"{DOC}/big", json={"text": "x" * 500})
        assert r.status_code == 413 and error_code(r) == "document_too_large"
        r = c.put(f"{DOC}/huge", json={"text": "x" * 10_000})
        assert r.status_code == 413 and error_code(r) == "payload_too_large"
        assert c.get(f"{DOC}/big").status_code == 404


def test_vector_collection_search_with_filter_and_validation(client: TestClient) -> None:
    r = client.put("/v1/collections/vecs", json={"dimension": 3, "index": "hnsw"})
    assert r.status_code == 200 and r.json()["dimension"] == 3
    for key, vec, tag in [("x", [1, 0, 0], "a"), ("y", [0.9, 0.1, 0], "b"), ("z", [0, 0, 1], "a")]:
        client.put(f"/v1/collections/vecs/documents/{key}", json={"embedding": vec, "tag": tag})
    r = client.post("/v1/collections/vecs/search", json={"vector": [1, 0, 0], "k": 2})
    assert [x["urn"] for x in r.json()["results"]] == ["urn:themis:vecs:x", "urn:themis:vecs:y"]
    assert r.json()["results"][0]["score"] == pytest.approx(1.0, abs=1e-5)
    r = client.post("/v1/collections/vecs/search", json={"vector": [1, 0, 0], "k": 2, "filter": {"tag": "a"}})
    assert [x["urn"] for x in r.json()["results"]] == ["urn:themis:vecs:x", "urn:themis:vecs:z"]

    bad = client.put("/v1/collections/vecs/documents/w", json={"embedding": [1, 2]})
    assert bad.status_code == 400 and error_code(bad) == "dimension_mismatch"
    assert client.get("/v1/collections/vecs/documents/w").status_code == 404
    for body, code in [
        ({"vector": [1, 0]}, "dimension_mismatch"),
        ({"vector": [1, 0, 0], "k": 0}, "invalid_request"),
        ({"vector": [1, 0, 0], "filter": {"tag": {"$regex": "a"}}}, "invalid_filter"),
        ({}, "invalid_request"),
        ({"text": "hello"}, "embedding_unavailable"),
    ]:
        r = client.post("/v1/collections/vecs/search", json=body)
        assert r.status_code == 400 and error_code(r) == code, (body, r.text)
    # Deleting and updating are reflected at once.
    client.delete("/v1/collections/vecs/documents/x")
    client.put("/v1/collections/vecs/documents/z", json={"embedding": [1, 0, 0], "tag": "a"})
    r = client.post("/v1/collections/vecs/search", json={"vector": [1, 0, 0], "k": 1})
    assert r.json()["results"][0]["urn"] == "urn:themis:vecs:z"


def test_changing_the_dimension_of_a_populated_collection_is_a_conflict(client: TestClient) -> None:
    client.put("/v1/collections/vecs", json={"dimension": 2})
    client.put("/v1/collections/vecs/documents/a", json={"embedding": [1, 2]})
    r = client.put("/v1/collections/vecs", json={"dimension": 3})
    assert r.status_code == 409 and error_code(r) == "dimension_conflict"


def test_health_ready_metrics_and_openapi(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok", "shard_id": "shard-0", "ring_version": 1}
    assert client.get("/ready").status_code == 200
    client.put(f"{DOC}/m", json={})
    text = client.get("/metrics").text
    assert 'themis_document_operations_total{op="put"} 1.0' in text
    assert 'route="/v1/collections/{collection}/documents/{key}"' in text
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/v1/collections/{collection}/documents/{key}",
        "/v1/transactions",
        "/v1/collections/{collection}/search",
    } <= set(paths)


def test_internal_versions_answer_for_many_keys_deletes_included(client: TestClient) -> None:
    """What a shard about to drop copies asks an owner, to send only what it lacks."""
    client.put(f"{DOC}/a", json={"v": 1})
    client.put(f"{DOC}/a", json={"v": 2})
    client.put(f"{DOC}/gone", json={"v": 1})
    client.delete(f"{DOC}/gone")
    r = client.post(
        "/internal/versions", json={"keys": [["books", "a"], ["books", "gone"], ["books", "never"]]}
    )
    assert r.status_code == 200 and r.json() == {"versions": [2, 2, 0]}
    assert client.post("/internal/versions", json={"keys": [["Bad Name!", "a"]]}).status_code == 400
    assert client.post("/internal/versions", json={"keys": "books"}).status_code == 400


def _nested(depth: int) -> dict:
    doc: dict = {"leaf": 1}
    for _ in range(depth - 1):
        doc = {"a": doc}
    return doc


def test_the_deepest_document_accepted_is_one_that_reads_back(client: TestClient) -> None:
    from themis_shard.storage.codec import DEFAULT_MAX_DEPTH

    assert client.put(f"{DOC}/deep", json=_nested(DEFAULT_MAX_DEPTH)).status_code == 200
    r = client.get(f"{DOC}/deep")
    assert r.status_code == 200 and r.json()["document"] == _nested(DEFAULT_MAX_DEPTH)
    for depth in (DEFAULT_MAX_DEPTH + 1, 255, 1500):
        text = '{"a":' * (depth - 1) + '{"leaf":1}' + "}" * (depth - 1)  # deeper than json.dumps goes
        r = client.put(f"{DOC}/deeper", content=text, headers={"content-type": "application/json"})
        # (past the JSON parser's own recursion limit the body is refused before it is a document)
        assert r.status_code == 400 and error_code(r) in ("document_too_deep", "malformed_json"), depth
    assert client.get(f"{DOC}/deeper").status_code == 404


@pytest.mark.parametrize("key", [".", ".."])
def test_dot_segment_keys_are_refused(client: TestClient, key: str) -> None:
    r = client.post(f"{DOC}:batch", json={"documents": [{"key": key, "document": {}}]})
    assert r.status_code == 400 and error_code(r) == "invalid_key"
    r = client.post(
        "/v1/transactions",
        json={"operations": [{"op": "put", "collection": "books", "key": key, "document": {}}]},
    )
    assert r.status_code == 400 and error_code(r) == "invalid_key"
    assert client.put(f"{DOC}/...", json={}).status_code == 200  # not a dot segment


def test_a_write_concern_is_named_or_refused(client: TestClient) -> None:
    for w in ("1", "majority", "all"):
        assert client.put(f"{DOC}/w?w={w}", json={}).status_code == 200
    r = client.put(f"{DOC}/w?w=2", json={})
    assert r.status_code == 400 and error_code(r) == "invalid_request"


def test_an_unexpected_error_says_the_connection_closes(client: TestClient, monkeypatch) -> None:
    from themis_shard.storage.documents import DocumentStore

    def broken(*_a, **_k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(DocumentStore, "collections", broken)
    r = TestClient(client.app, raise_server_exceptions=False).get("/v1/collections")  # the node is open
    assert r.status_code == 500 and r.headers["connection"] == "close" and error_code(r) == "internal"


def test_a_check_operation_validates_a_version_and_writes_nothing(client: TestClient) -> None:
    client.put(f"{DOC}/x", json={"n": 1})
    ops = [
        {"op": "check", "collection": "books", "key": "x", "if_version": 1},
        {"op": "check", "collection": "books", "key": "nobody", "if_version": 0},
        {"op": "put", "collection": "books", "key": "y", "document": {"n": 2}},
    ]
    ok = client.post("/v1/transactions", json={"operations": ops})
    assert ok.status_code == 200, ok.text
    assert [(r["op"], r["version"]) for r in ok.json()["results"]] == [("check", 1), ("check", 0), ("put", 1)]
    assert client.get(f"{DOC}/x").json()["version"] == 1
    stale = [
        {"op": "check", "collection": "books", "key": "x", "if_version": 0},
        {"op": "put", "collection": "books", "key": "z", "document": {}},
    ]
    conflict = client.post("/v1/transactions", json={"operations": stale})
    assert conflict.status_code == 409 and error_code(conflict) == "version_conflict"
    assert client.get(f"{DOC}/z").status_code == 404


@pytest.mark.parametrize(
    ("operation", "code"),
    [
        ({"op": "check", "collection": "books", "key": "x"}, "invalid_operation"),  # no if_version
        (
            {"op": "check", "collection": "books", "key": "x", "if_version": 1, "document": {}},
            "invalid_operation",
        ),
        ({"op": "increment", "collection": "books", "key": "x"}, "invalid_request"),
        (
            {"op": "check", "collection": "books", "key": "x", "if_version": 1, "lock": True},
            "unsupported_parameter",
        ),
    ],
)
def test_bad_transaction_operations_are_refused_by_name(client: TestClient, operation, code) -> None:
    r = client.post("/v1/transactions", json={"operations": [operation]})
    assert r.status_code == 400 and error_code(r) == code, r.text
