"""Spec: a transaction sent with a client id (one shard, in process) tells its outcome at
``GET /v1/transactions/{id}``; an id is one attempt (resent: 409, never applied twice); an id no
shard knows is aborted for good when asked about; ids and the admin routes refuse bad input by
name. The multi-shard behaviour, with a coordinator killed for good, is in
e2e/test_txn_termination.py."""

from __future__ import annotations

from fastapi.testclient import TestClient

OPS = [{"op": "put", "collection": "books", "key": "a", "document": {"n": 1}}]


def test_a_transaction_with_an_id_tells_its_outcome_and_is_never_applied_twice(client: TestClient) -> None:
    r = client.post("/v1/transactions", json={"id": "order-42", "operations": OPS})
    assert r.status_code == 200 and r.json()["id"] == "order-42" and r.json()["committed"], r.text
    r = client.get("/v1/transactions/order-42")
    assert r.status_code == 200 and r.json()["outcome"] == "committed", r.text
    again = client.post("/v1/transactions", json={"id": "order-42", "operations": OPS})
    assert again.status_code == 409 and again.json()["error"]["code"] == "transaction_id_in_use"
    assert client.get("/v1/collections/books/documents/a").json()["version"] == 1


def test_a_failed_transaction_with_an_id_is_aborted(client: TestClient) -> None:
    ops = [{"op": "put", "collection": "books", "key": "b", "document": {}, "if_version": 7}]
    assert client.post("/v1/transactions", json={"id": "t-stale", "operations": ops}).status_code == 409
    assert client.get("/v1/transactions/t-stale").json()["outcome"] == "aborted"


def test_an_id_nobody_knows_is_aborted_for_good_once_asked_about(client: TestClient) -> None:
    r = client.get("/v1/transactions/never-sent")
    assert r.json() == {
        "id": "never-sent",
        "outcome": "aborted",
        "message": r.json()["message"],
        "unanswered": [],
    }
    late = client.post("/v1/transactions", json={"id": "never-sent", "operations": OPS})
    assert late.status_code == 409 and late.json()["error"]["code"] == "transaction_id_in_use"
    assert client.get("/v1/collections/books/documents/a").status_code == 404


def test_bad_ids_are_refused_by_name(client: TestClient) -> None:
    r = client.post("/v1/transactions", json={"id": "has space", "operations": OPS})
    assert r.status_code == 400 and "id" in r.json()["error"]["message"]
    r = client.get("/v1/transactions/" + "x" * 65)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_transaction_id"
    r = client.post("/v1/cluster/transactions/bad%20id:resolve")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_transaction_id"


def test_the_admin_view_lists_nothing_in_doubt_and_resolve_answers_the_outcome(client: TestClient) -> None:
    client.post("/v1/transactions", json={"id": "done", "operations": OPS})
    listing = client.get("/v1/cluster/transactions").json()
    assert listing["transactions"] == [] and listing["unanswered"] == [] and listing["in_doubt_bound_s"] > 0
    r = client.post("/v1/cluster/transactions/done:resolve")
    assert r.status_code == 200 and r.json()["outcome"] == "committed", r.text
