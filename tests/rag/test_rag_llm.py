"""Spec: POST /v1/rag against a real shard (real uvicorn, real model and embedding model) with API
keys on — answer with its sources, filter, SSE streaming, and every refusal in the standard
shape; the passages in URN order, so a second question over the same documents restores their KV
state (and a write to one of them takes exactly its part of it away); AQL's RAG on the same shard
runs the caller's inference in process, under the caller's key."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_testing.ports import free_port

pytestmark = pytest.mark.llm

KEY = new_key()
AUTH = {"Authorization": f"Bearer {KEY}"}
FACTS = {
    "paris": ("Paris is the capital of France.", "europe"),
    "tokyo": ("Tokyo is the capital of Japan.", "asia"),
    "kiwi": ("The kiwi is a flightless bird from New Zealand.", "oceania"),
    "berlin": ("Berlin is the capital of Germany.", "europe"),
}


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> Iterator[str]:
    pytest.importorskip("llama_cpp")
    import uvicorn
    from themis_shard.app import create_app
    from themis_shard.auth.settings import AuthSettings
    from themis_shard.llm.settings import LLMSettings
    from themis_shard.settings import Settings

    port = free_port()
    llm = LLMSettings(
        enabled=True,
        n_ctx=1024,
        max_concurrent_requests=4,
        embedding_model="bundled",
        embedding_cache_dir=str(tmp_path_factory.mktemp("emb")),
        adapter_eval_on_load=False,
    )
    auth = AuthSettings(enabled=True, keys=entry_for(KEY, Role.client).line())
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("shard"), port=port, llm=llm, auth=auth))
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
    with httpx.Client(base_url=url, headers=AUTH, timeout=120) as c:
        assert c.put("/v1/collections/facts", json={"embed_field": "text"}).status_code == 200
        docs = [{"key": k, "document": {"text": t, "region": r}} for k, (t, r) in FACTS.items()]
        assert c.post("/v1/collections/facts/documents:batch", json={"documents": docs}).status_code == 200
        assert c.put("/v1/collections/plain/documents/a", json={"text": "no index here"}).status_code == 200
        assert c.put("/v1/collections/empty", json={"embed_field": "text"}).status_code == 200
    yield url
    server.should_exit = True
    thread.join(timeout=60)


def rag(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/rag", json=body, headers=AUTH, timeout=120)


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"]


def test_rag_answers_with_the_urns_and_scores_it_used(shard) -> None:
    r = rag(
        shard, query="What is the capital of France?", collection="facts", k=2, max_tokens=4, temperature=0
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert isinstance(out["answer"], str)
    assert max(out["sources"], key=lambda s: s["score"])["urn"] == "urn:themis:facts:paris"
    assert len(out["sources"]) == 2
    urns = [s["urn"] for s in out["sources"]]
    assert urns == sorted(urns)  # prompt order: the same documents make the same prefix
    assert out["usage"]["completion_tokens"] <= 4 and out["usage"]["prompt_tokens"] > 10
    assert out["timings"]["retrieval_ms"] >= 0 and out["shard_id"] == "shard-0"


def test_rag_filters_the_passages(shard) -> None:
    r = rag(shard, query="capital city", collection="facts", k=4, filter={"region": "asia"}, max_tokens=2)
    assert r.status_code == 200, r.text
    assert [s["urn"] for s in r.json()["sources"]] == ["urn:themis:facts:tokyo"]


def test_rag_streams_the_sources_first_then_the_tokens(shard) -> None:
    events = []
    with httpx.stream(
        "POST",
        f"{shard}/v1/rag",
        json={
            "query": "Which bird cannot fly?",
            "collection": "facts",
            "k": 1,
            "max_tokens": 3,
            "stream": True,
        },
        headers=AUTH,
        timeout=120,
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    first, *rest = [json.loads(e) for e in events[:-1]]
    assert [s["urn"] for s in first["sources"]] == ["urn:themis:facts:kiwi"]
    assert rest[-1]["done"] is True
    assert all("token" in e for e in rest[:-1])


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"query": "q", "collection": "nope"}, 404, "collection_not_found"),
        ({"query": "q", "collection": "plain"}, 400, "not_indexed"),
        ({"query": "q", "collection": "empty"}, 404, "no_context"),
        ({"query": "q", "collection": "facts", "top_p": 0.5}, 400, "unsupported_parameter"),
        ({"query": "  ", "collection": "facts"}, 400, "invalid_request"),
        ({"collection": "facts"}, 400, "invalid_request"),
        ({"query": "q", "collection": "facts", "k": 100000}, 400, "k_too_large"),
        ({"query": "q", "collection": "Bad Name"}, 400, "invalid_collection_name"),
        ({"query": "q", "collection": "facts", "filter": {"region": {"$bogus": 1}}}, 400, None),
    ],
)
def test_rag_refusals_are_4xx_in_the_standard_shape(shard, body, status, code) -> None:
    r = rag(shard, **body)
    assert r.status_code == status, r.text
    got = error_code(r)
    if code is not None:
        assert got == code
    if "top_p" in body:
        assert "top_p" in r.json()["error"]["message"]  # refused by name


def test_rag_needs_an_api_key(shard) -> None:
    r = httpx.post(f"{shard}/v1/rag", json={"query": "q", "collection": "facts"})
    assert r.status_code == 401 and error_code(r) == "unauthorized"


def test_aql_rag_runs_its_inference_for_the_callers_key(shard) -> None:
    r = httpx.post(
        f"{shard}/v1/aql",
        json={
            "query": "RAG @q FROM facts TOP 1 OPTIONS {max_tokens: 2, temperature: 0}",
            "bind_vars": {"q": "Japan"},
        },
        headers=AUTH,
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert r.json()["result"][0]["urns"] == ["urn:themis:facts:tokyo"]


LONG = {
    "a-tides": " ".join(
        f"Tides rise and fall twice a day because the Moon's gravity pulls the oceans (note {i})."
        for i in range(6)
    ),
    "b-winds": " ".join(
        f"Trade winds blow towards the equator because warm air rises there and cool air flows in (note {i})."
        for i in range(6)
    ),
}


def cached(answer: dict) -> int:
    return answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_second_question_over_the_same_documents_restores_their_kv_state(shard) -> None:
    with httpx.Client(base_url=shard, headers=AUTH, timeout=120) as c:
        assert c.put("/v1/collections/notes", json={"embed_field": "text"}).status_code == 200
        for key, text in LONG.items():
            assert c.put(f"/v1/collections/notes/documents/{key}", json={"text": text}).status_code == 200

        def ask(question: str) -> dict:
            r = c.post("/v1/rag", json={"query": question, "collection": "notes", "k": 2, "max_tokens": 2})
            assert r.status_code == 200, r.text
            return r.json()

        first = ask("Why do tides happen?")
        second = ask("Where do trade winds blow?")
        # Both passages in the same order whatever the question or the scores: the prefix is shared.
        assert [s["urn"] for s in first["sources"]] == [s["urn"] for s in second["sources"]]
        assert cached(second) >= 128 and cached(second) > cached(first)
        # A write to the second passage leaves the first one's state usable, and only that.
        changed = LONG["b-winds"].replace("equator", "tropics")
        assert c.put("/v1/collections/notes/documents/b-winds", json={"text": changed}).status_code == 200
        third = ask("Where do trade winds blow?")
        assert [s["version"] for s in third["sources"]] == [1, 2]
        assert 0 < cached(third) < cached(second)
