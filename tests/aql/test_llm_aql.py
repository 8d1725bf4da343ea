"""INFER, batched INFER, EMBED and RAG against the real engine, on a real uvicorn server: AQL's
inference runs in process (no HTTP call of the shard to itself). Kept short: max 4 tokens."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from themis_testing.ports import free_port

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> Iterator[str]:
    pytest.importorskip("llama_cpp")
    import uvicorn
    from themis_shard.app import create_app
    from themis_shard.llm.settings import LLMSettings
    from themis_shard.settings import Settings

    port = free_port()
    llm = LLMSettings(
        enabled=True,
        n_ctx=1024,
        max_concurrent_requests=8,
        embedding_model="bundled",
        embedding_cache_dir=str(tmp_path_factory.mktemp("emb")),
        adapter_eval_on_load=False,
    )
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("shard"), port=port, llm=llm))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    else:
        pytest.fail("shard with the model did not become ready")
    yield url
    server.should_exit = True
    thread.join(timeout=60)


def aql(url: str, query: str, **binds):
    r = httpx.post(f"{url}/v1/aql", json={"query": query, "bind_vars": binds}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["result"]


def inference_http_requests(url: str) -> float:
    """The shard's own count of HTTP requests to its inference routes (any status)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("themis_http_requests_total{")
        and any(f'"{route}"' in line for route in ("/v1/infer", "/v1/infer:batch", "/v1/embed"))
    )


def test_infer_and_batch_infer(shard):
    before = inference_http_requests(shard)
    [one] = aql(
        shard,
        "INFER @m @p DOMAIN 'general' OPTIONS {max_tokens: 4, temperature: 0}",
        m="gemma3-270m",
        p="The capital of France is",
    )
    assert one["text"] and one["tokens"] <= 4 and one["shard_id"]
    many = aql(
        shard,
        "FOR r IN @reqs INFER 'gemma3-270m' r OPTIONS {max_tokens: 2, temperature: 0}",
        reqs=["One, two,", "Red, green,"],
    )
    assert len(many) == 2 and all("text" in m for m in many)
    assert inference_http_requests(shard) == before  # in process, not a loopback call


def test_embed_and_rag_return_the_urns_used(shard):
    assert httpx.put(f"{shard}/v1/collections/facts", json={"embed_field": "text"}).status_code == 200
    facts = {
        "paris": "Paris is the capital of France.",
        "tokyo": "Tokyo is the capital of Japan.",
        "kiwi": "The kiwi is a flightless bird from New Zealand.",
    }
    for key, text in facts.items():
        assert aql(shard, "INSERT {_key: @k, text: @t} INTO facts", k=key, t=text)
    [vector] = aql(shard, "EMBED @t", t="capital of France")
    assert len(vector) == len(aql(shard, "EMBED DOCUMENT 'urn:themis:facts:paris'")[0])
    [answer] = aql(
        shard,
        "RAG @q FROM facts TOP 2 OPTIONS {max_tokens: 4, temperature: 0}",
        q="What is the capital of France?",
    )
    assert "urn:themis:facts:paris" in answer["urns"] and len(answer["urns"]) == 2
    assert answer["urns"] == sorted(answer["urns"])  # prompt order: by URN
    assert isinstance(answer["answer"], str)
