"""Spec: the plain document PUT and GET, and transactions (served without the framework's
routing) answer exactly what the routes answer — successes, refusals, metrics — and anything
out of the plain case is the routes' to answer."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from themis_shard.app import create_app

from tests.conftest import shard_settings

#: ``?w=all&`` means ``w=all`` to the route, but is not the plain form: it always takes the route
PLAIN, ROUTED = "?w=all", "?w=all&"


def answer(r) -> tuple[int, object]:
    return r.status_code, r.json()


def test_a_plain_write_and_read_answer_as_the_routes_do(client: TestClient) -> None:
    first = client.put(f"/v1/collections/books/documents/dune{PLAIN}", json={"title": "Dune"})
    second = client.put(f"/v1/collections/books/documents/dune{ROUTED}", json={"title": "Dune II"})
    assert answer(first) == (200, {"urn": "urn:themis:books:dune", "version": 1})
    assert answer(second) == (200, {"urn": "urn:themis:books:dune", "version": 2})
    assert first.headers["content-type"] == second.headers["content-type"] == "application/json"
    plain = client.get("/v1/collections/books/documents/dune")
    assert answer(plain) == (
        200,
        {"urn": "urn:themis:books:dune", "version": 2, "document": {"title": "Dune II"}},
    )


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/collections/Bad Name!/documents/k", {"a": 1}),  # an invalid collection name
        ("/v1/collections/books/documents/" + "k" * 600, {"a": 1}),  # a key over its limit
        ("/v1/collections/books/documents/k", {"a": "x" * (2 << 20)}),  # a document over its limit
    ],
)
def test_a_refused_write_gets_the_routes_refusal(client: TestClient, path: str, body: dict) -> None:
    plain = client.put(path + PLAIN, json=body)
    routed = client.put(path + ROUTED, json=body)
    assert plain.status_code in (400, 413) and answer(plain) == answer(routed)


def test_a_missing_document_is_the_routes_404(client: TestClient) -> None:
    plain = client.get("/v1/collections/books/documents/nowhere")
    routed = client.get("/v1/collections/books/documents/nowhere?unplain=1")  # a query: the route's
    assert plain.status_code == 404 and answer(plain)[1]["error"]["code"] == "document_not_found"
    assert answer(plain) == answer(routed)


@pytest.mark.parametrize(
    "content, code",
    [
        (b"[1, 2]", "invalid_request"),  # not an object
        (b"{not json", "malformed_json"),
        (b'{"big": 123456789012345678901234567890}', None),  # beyond 64 bits: the route parses it
    ],
)
def test_a_body_out_of_the_plain_case_is_the_routes_to_answer(
    client: TestClient, content: bytes, code: str | None
) -> None:
    r = client.put(
        "/v1/collections/books/documents/odd", content=content, headers={"content-type": "application/json"}
    )
    if code is None:
        assert r.status_code == 200, r.text
        assert client.get("/v1/collections/books/documents/odd").json()["document"] == {
            "big": 123456789012345678901234567890
        }
    else:
        assert r.status_code == 400 and r.json()["error"]["code"] == code


def test_parameters_and_conditions_still_mean_what_they_mean(client: TestClient) -> None:
    assert client.put("/v1/collections/books/documents/c", json={"v": 1}).status_code == 200
    stale = client.put("/v1/collections/books/documents/c", json={"v": 2}, headers={"If-Match": "7"})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "version_conflict"
    bad = client.put("/v1/collections/books/documents/c?w=three", json={"v": 2})
    assert bad.status_code == 400 and "w" in bad.json()["error"]["message"]
    for w in ("1", "majority", "all"):
        assert client.put(f"/v1/collections/books/documents/c?w={w}", json={"w": w}).status_code == 200


def test_plain_requests_are_counted_under_the_routes_template(client: TestClient) -> None:
    client.put(f"/v1/collections/books/documents/m{PLAIN}", json={"a": 1})
    client.get("/v1/collections/books/documents/m")
    metrics = client.get("/metrics").text
    template = 'route="/v1/collections/{collection}/documents/{key}"'
    assert f'themis_http_requests_total{{method="PUT",{template},status="200"}}' in metrics
    assert f'themis_http_requests_total{{method="GET",{template},status="200"}}' in metrics


def test_the_document_gauges_count_what_the_store_holds_when_scraped(client: TestClient) -> None:
    """Written through the API or taken as another owner's copy, every document this shard
    holds is counted; the operations counter counts the API's writes and reads."""
    from themis_shard.storage.documents import Replicated

    client.put(f"/v1/collections/books/documents/g1{PLAIN}", json={"a": 1})
    client.get("/v1/collections/books/documents/g1")
    store = client.app.state.node.store
    store.apply_replicated([Replicated("books", "g2", 1, {"a": 2}, store.clock.now(), "s-other")])
    metrics = client.get("/metrics").text
    assert 'themis_documents{collection="books"} 2.0' in metrics
    assert 'themis_vectors{collection="books"} 0.0' in metrics
    assert 'themis_document_operations_total{op="put"} 1.0' in metrics
    assert 'themis_document_operations_total{op="get"} 1.0' in metrics


def txn(*ops: dict) -> dict:
    return {"operations": list(ops)}


def put(key: str, document: dict, **extra) -> dict:
    return {"op": "put", "collection": "books", "key": key, "document": document, **extra}


def test_a_plain_transaction_answers_as_the_route_does(client: TestClient) -> None:
    plain = client.post(f"/v1/transactions{PLAIN}", json=txn(put("a", {"n": 1}), put("b", {"n": 1})))
    routed = client.post(f"/v1/transactions{ROUTED}", json=txn(put("a", {"n": 2}), put("b", {"n": 2})))
    assert answer(plain) == (
        200,
        {
            "committed": True,
            "results": [
                {"op": "put", "urn": "urn:themis:books:a", "version": 1},
                {"op": "put", "urn": "urn:themis:books:b", "version": 1},
            ],
            "id": None,
        },
    )
    assert answer(routed)[1]["results"][0]["version"] == 2
    assert plain.headers["content-type"] == routed.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "body",
    [
        txn(),  # empty: refused by transact itself
        txn(put("c", {"n": 1}), put("a", {"n": 9}, if_version=7)),  # a failed condition: 409
        txn({"op": "check", "collection": "books", "key": "x"}),  # the model refuses: the route's 400
        txn(put("Bad Name!", {"n": 1})),
        {"operations": [put("c", {"n": 1})], "lock": True},  # an unknown field, refused by name
    ],
)
def test_a_refused_transaction_gets_the_routes_refusal(client: TestClient, body: dict) -> None:
    client.post("/v1/transactions", json=txn(put("a", {"n": 1})))
    plain = client.post(f"/v1/transactions{PLAIN}", json=body)
    routed = client.post(f"/v1/transactions{ROUTED}", json=body)
    assert plain.status_code in (400, 409) and answer(plain) == answer(routed)
    assert client.get("/v1/collections/books/documents/c").status_code == 404  # nothing applied


def test_plain_transactions_are_counted_under_the_routes_template(client: TestClient) -> None:
    client.post("/v1/transactions", json=txn(put("m", {"a": 1})))
    metrics = client.get("/metrics").text
    assert 'themis_http_requests_total{method="POST",route="/v1/transactions",status="200"}' in metrics


# -- what the layers around every route do, done for these too ---------------------------------


def access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "themis.access"]


def test_every_request_of_these_paths_is_logged_traced_and_counted_once(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Served without routing or by the route (a condition), each has one access line under
    the route's template, a ``traceresponse`` header, and one count."""
    template = "/v1/collections/{collection}/documents/{key}"
    with caplog.at_level("DEBUG", logger="themis.access"):
        plain = client.put("/v1/collections/books/documents/t", json={"v": 1})
        routed = client.put("/v1/collections/books/documents/t", json={"v": 2}, headers={"If-Match": "1"})
        got = client.get("/v1/collections/books/documents/t")
    assert [r.status_code for r in (plain, routed, got)] == [200, 200, 200]
    lines = [line.rsplit(" ", 1)[0] for line in access_lines(caplog)]  # without the latency
    assert lines == [f"PUT {template} 200", f"PUT {template} 200", f"GET {template} 200"]
    traced = [r.headers["traceresponse"] for r in (plain, routed, got)]
    assert len(set(traced)) == 3 and all(t.startswith("00-") for t in traced)
    metrics = client.get("/metrics").text
    counted = f'themis_http_requests_total{{method="PUT",route="{template}",status="200"}} 2.0'
    assert counted in metrics


def test_a_traceparent_sent_by_the_caller_is_continued(client: TestClient) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    r = client.put("/v1/collections/books/documents/p", json={"v": 1}, headers={"traceparent": parent})
    assert r.status_code == 200
    assert r.headers["traceresponse"].split("-")[1] == "0af7651916cd43dd8448eb211c80319c"


def test_a_body_without_a_declared_length_is_still_served(client: TestClient) -> None:
    def chunks():
        yield b'{"title": '
        yield b'"streamed"}'

    r = client.put(
        "/v1/collections/books/documents/s", content=chunks(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    assert client.get("/v1/collections/books/documents/s").json()["document"] == {"title": "streamed"}


def test_a_body_over_the_request_limit_is_a_413_and_writes_nothing(tmp_path) -> None:
    settings = shard_settings(tmp_path / "shard").model_copy(update={"max_request_bytes": 64})
    with TestClient(create_app(settings)) as small:
        r = small.put("/v1/collections/books/documents/big", json={"body": "x" * 100})
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
        assert small.get("/v1/collections/books/documents/big").status_code == 404
