"""/v1/infer and friends through a real uvicorn server running the real shard app."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from .conftest import wait_until

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def server(make_server, model_path):
    # a second alias for the same GGUF file: any path can be served under its own name
    return make_server(
        max_concurrent_requests=4, max_queue=4, n_ctx=1024, extra_models={"gemma-copy": str(model_path)}
    )


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


def engine_idle(server) -> bool:
    s = server.llm.models["gemma3-270m"].engine.stats()
    return s["running"] == 0 and s["queued"] == 0 and s["kv_pages_used"] == 0


def cancelled_count(server) -> float:
    return server.llm.metrics.requests.labels(model="gemma3-270m", finish_reason="cancelled")._value.get()


def sse_events(response: httpx.Response) -> list:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_ready_and_models(http):
    assert http.get("/ready").status_code == 200
    models = http.get("/v1/models").json()
    m, copy = models["data"]
    assert (m["id"], copy["id"]) == ("gemma3-270m", "gemma-copy") and m["object"] == "model"
    assert m["fingerprint"]["architecture"] == "gemma3" and m["fingerprint"]["quantisation"] == "Q4_K_M"
    assert len(m["fingerprint"]["sha256"]) == 64 and copy["fingerprint"] == m["fingerprint"]


def test_each_alias_is_served(http):
    body = {"prompt": "The capital of France is", "max_tokens": 4}
    a = http.post("/v1/infer", json=body).json()
    b = http.post("/v1/infer", json={**body, "model": "gemma-copy"}).json()
    assert b["model"] == "gemma-copy" and a["text"] == b["text"]


def test_infer_returns_text_tokens_and_timings(http):
    r = http.post("/v1/infer", json={"prompt": "The capital of France is", "max_tokens": 8})
    assert r.status_code == 200
    body = r.json()
    assert body["tokens"] == 8 and body["finish_reason"] == "length" and body["text"]
    assert body["shard_id"] == "shard-0" and body["model"] == "gemma3-270m"
    assert 0 < body["timings"]["ttft_ms"] <= body["timings"]["total_ms"]


def test_stream_sends_tokens_in_order_then_done(http):
    body = {"prompt": "Count: one, two,", "max_tokens": 10}
    plain = http.post("/v1/infer", json=body).json()
    with http.stream("POST", "/v1/infer", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert final["done"] is True and final["tokens"] == 10 and final["finish_reason"] == "length"
    tokens = [e["token"] for e in events[:-2]]
    assert "".join(tokens) == plain["text"]  # greedy, same prompt: the stream is the same text, in order


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"prompt": ""}, 400, "empty_prompt"),
        ({"prompt": "hi " * 2000}, 400, "context_length_exceeded"),
        ({"prompt": "hi", "model": "gpt-9"}, 404, "model_not_found"),
        ({"prompt": "hi", "adapter": "nope"}, 404, "adapter_not_found"),
        ({"prompt": "hi", "temperature": -1}, 400, "invalid_sampling"),
        ({"prompt": "hi", "top_p": 0}, 400, "invalid_sampling"),
        ({"prompt": "hi", "max_tokens": 0}, 400, "invalid_sampling"),
        ({"prompt": "hi", "stop": [""]}, 400, "invalid_sampling"),
        ({"prompt": 42}, 400, "invalid_request"),
        ({}, 400, "invalid_request"),
        ({"prompt": "hi", "shared_prefix_chars": 3}, 400, "invalid_request"),  # past the prompt
        ({"prompt": "hi", "shared_prefix_chars": 0}, 400, "invalid_request"),
    ],
)
def test_bad_input_is_a_clear_4xx(http, body, status, code):
    r = http.post("/v1/infer", json=body)
    assert r.status_code == status and r.json()["error"]["code"] == code


def test_malformed_json_is_400(http):
    r = http.post("/v1/infer", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400


def test_full_queue_answers_429_with_retry_after(server, http):
    """4 running + 4 queued fit; the rest of a burst of 16 is refused at once, not queued."""

    def one(i: int) -> httpx.Response:
        return http.post("/v1/infer", json={"prompt": f"Story {i}:", "max_tokens": 24})

    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(one, range(16)))
    codes = [r.status_code for r in responses]
    assert codes.count(429) >= 1 and codes.count(200) >= 8, codes
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["retry-after"] == "1" and refused.json()["error"]["code"] == "queue_full"
    assert all(r.json()["tokens"] == 24 for r in responses if r.status_code == 200)
    assert wait_until(lambda: engine_idle(server))


def test_stream_disconnect_cancels_and_frees_kv(server, http):
    with http.stream(
        "POST", "/v1/infer", json={"prompt": "Write a long essay:", "max_tokens": 1000, "stream": True}
    ) as r:
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert "token" in first
        assert server.llm.models["gemma3-270m"].engine.ledger.used_pages > 0
    # leaving the block closes the connection mid-stream; 1000 tokens would take > 20 s here
    assert wait_until(lambda: engine_idle(server), timeout=8)
    assert cancelled_count(server) >= 1


def test_json_request_disconnect_cancels_the_sequence(server):
    body = json.dumps({"prompt": "Write a long essay:", "max_tokens": 1000}).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(
            b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        assert wait_until(lambda: server.llm.models["gemma3-270m"].engine.ledger.used_pages > 0, timeout=20)
        before = cancelled_count(server)
    assert wait_until(lambda: engine_idle(server), timeout=8)
    assert cancelled_count(server) == before + 1


def test_engine_keeps_serving_after_bad_and_cancelled_requests(http):
    r = http.post("/v1/infer", json={"prompt": "Two plus two is", "max_tokens": 3})
    assert r.status_code == 200 and r.json()["tokens"] == 3


def test_batch_keeps_request_order_and_reports_failures_in_place(http):
    r = http.post(
        "/v1/infer:batch",
        json={
            "requests": [
                {"prompt": "Alpha", "max_tokens": 2},
                {"prompt": "", "max_tokens": 2},
                {"prompt": "Beta", "max_tokens": 3},
            ]
        },
    )
    results = r.json()["results"]
    assert results[0]["tokens"] == 2 and results[2]["tokens"] == 3
    assert results[1]["error"]["code"] == "empty_prompt"


def test_metrics_cover_the_engine(http):
    time.sleep(0.1)
    text = http.get("/metrics").text
    for name in (
        "themis_llm_ttft_seconds_bucket",
        "themis_llm_inter_token_seconds_bucket",
        "themis_llm_queue_seconds_bucket",
        "themis_llm_tokens_generated_total",
        "themis_llm_batch_size_bucket",
        "themis_pending_llm_requests",
        "themis_llm_running_sequences",
        "themis_llm_kv_pages_used",
        "themis_llm_kv_pages_free",
        "themis_llm_preemptions_total",
        "themis_active_lora_adapters",
        "themis_llm_rejected_requests_total",
    ):
        assert name in text, name


def test_in_process_infer_for_aql_and_rag(server):
    import asyncio

    async def go():
        return await server.llm.infer("The capital of France is", max_tokens=3)

    loop = asyncio.new_event_loop()
    try:
        result = loop.run_until_complete(go())
    finally:
        loop.close()
    assert result["tokens"] == 3 and result["text"] and result["model"] == "gemma3-270m"
