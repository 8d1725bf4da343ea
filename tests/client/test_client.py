"""Spec: ``themis_client`` against a real shard app (RocksDB, FAISS, the real routers), in-process."""

from __future__ import annotations

import json
import random
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from themis_client import (
    BadRequest,
    Conflict,
    InferBatchResult,
    InferItemError,
    InferResult,
    InferStream,
    NotFound,
    Operation,
    RetryPolicy,
    ThemisClient,
    ThemisConnectionError,
    Unavailable,
    VersionConflict,
    calls,
    new_txn_id,
)
from themis_client.errors import RateLimited, ServerError, error_from_response
from themis_client.sse import sse_events

FAST = RetryPolicy(attempts=3, base_delay_s=0.001, max_delay_s=0.01)


@pytest.fixture
def themis(client: TestClient) -> Iterator[ThemisClient]:
    with ThemisClient(http=client, retry=FAST) as c:
        yield c


def test_documents_round_trip_with_typed_results(themis: ThemisClient) -> None:
    written = themis.put("books", "dune", {"title": "Dune"})
    assert (written.urn, written.version) == ("urn:themis:books:dune", 1)
    doc = themis.get("books", "dune")
    assert doc.document == {"title": "Dune"} and doc.version == 1
    assert themis.delete("books", "dune").version == 2
    with pytest.raises(NotFound) as missing:
        themis.get("books", "dune")
    assert missing.value.code == "document_not_found" and missing.value.status == 404
    assert missing.value.request == "GET /v1/collections/books/documents/dune"


def test_if_match_mismatch_is_a_version_conflict(themis: ThemisClient) -> None:
    themis.put("books", "dune", {"v": 1})
    with pytest.raises(VersionConflict) as conflict:
        themis.put("books", "dune", {"v": 2}, if_match=7)
    assert conflict.value.code == "version_conflict"
    assert themis.put("books", "dune", {"v": 2}, if_match=1).version == 2
    with pytest.raises(VersionConflict):
        themis.delete("books", "dune", if_match=1)


def test_a_key_that_is_not_url_safe_is_refused_not_rerouted(themis: ThemisClient) -> None:
    themis.put("books", "a.b~c-1", {"x": 1})
    assert themis.get("books", "a.b~c-1").urn == "urn:themis:books:a.b~c-1"
    with pytest.raises(BadRequest) as bad:  # escaped, so it reaches the shard's key check
        themis.put("books", "a b?c", {})
    assert bad.value.code == "invalid_key"


def test_batch_and_transactions(themis: ThemisClient) -> None:
    batch = themis.batch("books", {f"b{i}": {"i": i} for i in range(3)})
    assert [r.urn for r in batch.results] == [f"urn:themis:books:b{i}" for i in range(3)]
    assert themis.collection("books").documents == 3
    done = themis.transaction(
        [Operation.put("books", "t", {"n": 1}), Operation.delete("books", "b0", if_version=1)]
    )
    assert done.committed and [r.op for r in done.results] == ["put", "delete"]
    with pytest.raises(VersionConflict):
        themis.transaction(
            [
                {"op": "put", "collection": "books", "key": "u", "document": {}},
                {"op": "put", "collection": "books", "key": "t", "document": {}, "if_version": 9},
            ]
        )
    with pytest.raises(NotFound):
        themis.get("books", "u")  # nothing of the failed transaction applied


def test_bad_input_maps_to_bad_request_with_the_servers_code(themis: ThemisClient) -> None:
    with pytest.raises(BadRequest) as bad:
        themis.batch("books", [("ok", {}), ("bad/key", {})])
    assert bad.value.status == 400 and bad.value.code
    with pytest.raises(BadRequest):
        themis.declare_collection("vecs", dimension=2, no_such_setting=True)


def test_collections_and_vector_search(themis: ThemisClient) -> None:
    info = themis.declare_collection("vecs", dimension=2, index="flat")
    assert (info.name, info.dimension) == ("vecs", 2)
    for i in range(5):
        themis.put("vecs", f"v{i}", {"embedding": [1.0, i / 10], "i": i})
    hits = themis.search("vecs", vector=[1.0, 0.4], k=2)
    assert [h.urn for h in hits.results][:1] == ["urn:themis:vecs:v4"] and len(hits.results) == 2
    filtered = themis.search("vecs", vector=[1.0, 0.4], k=5, filter={"i": {"$lt": 2}})
    assert {h.document["i"] for h in filtered.results} == {0, 1}
    assert "vecs" in {c.name for c in themis.collections()}


def test_aql(themis: ThemisClient) -> None:
    themis.batch("books", {"a": {"y": 1965, "t": "Dune"}, "b": {"y": 1951, "t": "Foundation"}})
    out = themis.aql("FOR b IN books FILTER b.y > @y RETURN b.t", {"y": 1960})
    assert out.result == ["Dune"]
    with pytest.raises(BadRequest) as syntax:
        themis.aql("FOR b IN books RETURN")
    assert syntax.value.code == "aql_syntax_error"


def test_cluster_status_and_health(themis: ThemisClient) -> None:
    assert themis.health().status == "ok"
    status = themis.cluster_status()
    assert status.shard_id == "shard-0" and [m.shard_id for m in status.members] == ["shard-0"]
    assert status.ring_version == 1 and "state" in status.migration


def test_api_key_is_sent_as_bearer(client: TestClient) -> None:
    seen: list[str | None] = []
    transport = httpx.MockTransport(
        lambda req: (
            seen.append(req.headers.get("authorization")),
            httpx.Response(200, json={"status": "ok"}),
        )[1]
    )
    with ThemisClient("http://shard", api_key="k-123", http=httpx.Client(transport=transport)) as c:
        c.health()
    assert seen == ["Bearer k-123"]


# -- retries, against a real HTTP server that answers given statuses first -------------------------


def test_idempotent_reads_retry_503_and_429_then_succeed(file_server) -> None:
    path = "/v1/collections/books/documents/x"
    file_server.files[path] = b'{"urn": "urn:themis:books:x", "version": 3, "document": {}}'
    file_server.fail[path] = [503, 429]
    with ThemisClient(file_server.url, retry=FAST) as c:
        assert c.get("books", "x").version == 3
    assert file_server.hits[path] == 3


def test_retries_give_up_with_the_last_typed_error(file_server) -> None:
    path = "/v1/cluster/status"
    file_server.fail[path] = [503, 503, 503, 503]
    with ThemisClient(file_server.url, retry=FAST) as c, pytest.raises(Unavailable):
        c.cluster_status()
    assert file_server.hits[path] == FAST.attempts


def test_connect_failures_move_to_the_next_shard(file_server) -> None:
    file_server.files["/health"] = b'{"status": "ok", "shard_id": "shard-1"}'
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    with ThemisClient([dead, file_server.url], retry=FAST) as c:
        assert c.health().shard_id == "shard-1"
        assert c.urls[0] == dead and c.health().shard_id == "shard-1"  # stays on the live one
    with ThemisClient(dead, retry=FAST) as c, pytest.raises(ThemisConnectionError):
        c.health()


def test_a_connection_that_breaks_before_the_answer_is_lost_not_retried() -> None:
    """A shard that dies after reading the request: the write may have been applied, so the
    client neither retries it nor leaks httpx's exception."""
    accepted: list[int] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        listener.settimeout(0.5)

        def serve() -> None:  # accept, read the request, hang up; until nobody calls for 0.5 s
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                accepted.append(1)
                conn.recv(65536)
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with ThemisClient(url, retry=FAST) as c, pytest.raises(ThemisConnectionError) as lost:
            c.put("books", "x", {})
        thread.join()
    assert lost.value.code == "connection_lost" and accepted == [1]


def test_a_read_whose_connection_breaks_before_the_answer_is_sent_again(reads_served) -> None:
    """A shard shutting down (a rolling upgrade) closes a connection that a read was just sent
    on: a read changes nothing, so the client sends it again and the caller sees the answer."""
    url, accepted = reads_served([False, True])
    with ThemisClient(url, retry=FAST) as c:
        found = c.get("books", "x")
    assert found.version == 3 and found.document == {"t": 1} and len(accepted) == 2


def test_a_read_that_keeps_losing_its_connection_fails_as_lost_once_its_tries_are_spent(
    reads_served,
) -> None:
    url, accepted = reads_served([False] * FAST.attempts)
    with ThemisClient(url, retry=FAST) as c, pytest.raises(ThemisConnectionError) as lost:
        c.get("books", "x")
    assert lost.value.code == "connection_lost" and len(accepted) == FAST.attempts


def test_retry_policy_backs_off_exponentially_and_honours_retry_after() -> None:
    policy = RetryPolicy(attempts=5, base_delay_s=0.1, max_delay_s=1.0)
    rng = random.Random(0)
    assert all(0 <= policy.delay(1, rng=rng) <= 0.1 for _ in range(50))
    assert all(0 <= policy.delay(4, rng=rng) <= 0.8 for _ in range(50))
    assert all(policy.delay(9, rng=rng) <= 1.0 for _ in range(50))
    assert policy.delay(1, "0.5", rng=rng) >= 0.5 and policy.delay(1, "60", rng=rng) == 1.0
    assert policy.delay(1, "Wed, 21 Oct 2015 07:28:00 GMT", rng=rng) <= 0.1


def test_error_mapping_from_the_standard_shape() -> None:
    body = {"error": {"code": "version_conflict", "message": "at 3"}}
    assert isinstance(error_from_response(409, body), VersionConflict)
    assert isinstance(error_from_response(429, None, "slow down"), RateLimited)
    err = error_from_response(502, None, "<html>bad gateway</html>")
    assert isinstance(err, ServerError) and err.code == "http_502" and "bad gateway" in err.message


def test_sse_parsing() -> None:
    lines = [
        'data: {"token": "a", "id": 1}',
        "",
        ": keep-alive",
        "",
        'data: {"done": true}',
        "",
        "data: [DONE]",
        "",
    ]
    assert list(sse_events(lines)) == [{"token": "a", "id": 1}, {"done": True}, "[DONE]"]


def test_a_check_operation_asserts_a_version_without_writing(themis: ThemisClient) -> None:
    assert Operation.check("books", "c", 0).model_dump(exclude_none=True) == {
        "op": "check",
        "collection": "books",
        "key": "c",
        "if_version": 0,
    }
    done = themis.transaction([Operation.check("books", "c", 0), Operation.put("books", "d", {"n": 1})])
    assert [(r.op, r.version) for r in done.results] == [("check", 0), ("put", 1)]
    with pytest.raises(VersionConflict):
        themis.transaction([Operation.check("books", "d", 0), Operation.put("books", "e", {})])
    with pytest.raises(NotFound):
        themis.get("books", "e")


def test_a_transaction_id_chosen_before_sending_tells_the_outcome(themis: ThemisClient) -> None:
    txn_id = new_txn_id()
    done = themis.transaction([Operation.put("books", "f", {"n": 1})], txn_id=txn_id)
    assert done.committed and done.id == txn_id
    outcome = themis.transaction_outcome(txn_id)
    assert (outcome.id, outcome.outcome, outcome.settled) == (txn_id, "committed", True)
    with pytest.raises(Conflict) as again:  # one attempt per id: a resend is refused, not applied
        themis.transaction([Operation.put("books", "f", {"n": 2})], txn_id=txn_id)
    assert again.value.code == "transaction_id_in_use" and themis.get("books", "f").version == 1


# -- metrics, RAID, batches, adapters, RAG streams -------------------------------------------------


def test_metrics_are_the_shards_prometheus_text(themis: ThemisClient) -> None:
    themis.put("books", "dune", {"title": "Dune"})
    text = themis.metrics()
    assert isinstance(text, str) and "# TYPE themis_" in text


def test_raid_and_inference_calls_on_a_shard_without_them_are_typed_refusals(themis: ThemisClient) -> None:
    assert themis.raid_status() == {"enabled": False, "shard_id": "shard-0"}
    for call in (themis.raid_verify, themis.raid_rebuild):
        with pytest.raises(Unavailable) as off:
            call()
        assert off.value.code == "raid_disabled"
    # a shard without an LLM refuses the inference routes by name (503 llm_disabled), never 404
    for call in (lambda: themis.infer_batch([{"prompt": "One, two,", "max_tokens": 2}]), themis.adapters):
        with pytest.raises(Unavailable) as off:
            call()
        assert off.value.code == "llm_disabled"


def test_a_batch_keeps_a_failed_item_in_its_place() -> None:
    out = InferBatchResult.model_validate(
        {
            "results": [
                {"text": " three", "tokens": 1, "shard_id": "shard-1"},
                {"error": {"code": "shard_unavailable", "message": "shard-2 died"}},
            ]
        }
    )
    ok, failed = out.results
    assert isinstance(ok, InferResult) and ok.shard_id == "shard-1"
    assert isinstance(failed, InferItemError) and failed.error.code == "shard_unavailable"


def test_adapter_batch_and_rebuild_calls_send_what_the_api_names() -> None:
    load = calls.load_adapter("legal-qa", domain="legal", path="/lora/legal.gguf", evaluate=True)
    assert (load.method, load.path, load.idempotent) == ("POST", "/v1/adapters", False)
    assert load.json == {"name": "legal-qa", "domain": "legal", "path": "/lora/legal.gguf", "evaluate": True}
    assert calls.unload_adapter("legal qa").path == "/v1/adapters/legal%20qa"
    batch = calls.infer_batch([{"prompt": "a", "max_tokens": 2}], timeout_s=90)
    assert batch.json == {"requests": [{"prompt": "a", "max_tokens": 2}], "timeout_s": 90}
    assert not batch.idempotent  # a retried batch would generate twice
    assert calls.raid_rebuild(assemble=True).json == {"assemble": True}
    assert calls.rag("q", "demo", k=1, temperature=0).json == {
        "query": "q",
        "collection": "demo",
        "k": 1,
        "temperature": 0,
    }


def test_a_rag_stream_gives_its_sources_first_then_the_tokens_and_the_result() -> None:
    events = [
        {"sources": [{"urn": "urn:themis:demo:sky", "score": 0.73}], "shards_failed": []},
        {"token": " Ray", "id": 1},
        {"token": "leigh", "id": 2},
        {"done": True, "text": " Rayleigh", "tokens": 2, "shard_id": "shard-1"},
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    stream = InferStream(httpx.Response(200, content=body.encode()))
    assert stream.text() == " Rayleigh"
    assert [s.urn for s in stream.sources or []] == ["urn:themis:demo:sky"]
    assert stream.result is not None and stream.result.shard_id == "shard-1"
