"""Spec: a shard started without a model (``themis up --no-llm``, ``THEMIS_LLM_ENABLED=false``) still
serves the whole public API (docs/API.md): its inference and adapter routes answer 503
``llm_disabled`` naming the shard and the setting, whatever the body, never a 404; everything else
works as on any shard. A real shard app (RocksDB, FAISS, the node's lifespan), built with no engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from themis_shard.app import create_app
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings
from themis_testing.app_server import Server, free_port

#: The engine's public routes (docs/API.md "Inference" and "Adapters").
ENGINE_ROUTES = [
    ("POST", "/v1/infer"),
    ("POST", "/v1/infer:batch"),
    ("POST", "/v1/embed"),
    ("POST", "/v1/rag"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/embeddings"),
    ("GET", "/v1/models"),
    ("GET", "/v1/adapters"),
    ("POST", "/v1/adapters"),
    ("GET", "/v1/adapters/legal"),
    ("DELETE", "/v1/adapters/legal"),
    ("POST", "/v1/adapters:train"),
    ("POST", "/v1/adapters/legal:federate"),
]


@pytest.fixture
def shard(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path / "shard", shard_id="shard-3", llm=LLMSettings(enabled=False))
    with TestClient(create_app(settings)) as client:
        yield client


def refusal(response) -> dict:
    assert response.status_code == 503, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == "llm_disabled", body
    return body["error"]


@pytest.mark.parametrize(("method", "path"), ENGINE_ROUTES)
def test_each_engine_route_answers_503_llm_disabled_naming_the_shard_and_the_flag(
    shard: TestClient, method: str, path: str
) -> None:
    message = refusal(shard.request(method, path, json={"prompt": "hi", "max_tokens": 4}))["message"]
    assert "shard-3" in message
    assert "--no-llm" in message and "THEMIS_LLM_ENABLED=false" in message


def test_the_refusal_comes_before_the_body_is_judged(shard: TestClient) -> None:
    """A client learns the one thing that matters (no model here), not a 400 about its fields."""
    refusal(shard.post("/v1/infer", json={"no_such_field": 1}))
    refusal(
        shard.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    )


def test_a_peer_forwarding_inference_here_gets_the_same_named_refusal(shard: TestClient) -> None:
    refusal(shard.post("/internal/infer", json={"prompt": "hi"}))


def test_documents_vectors_and_health_work_as_on_any_shard(shard: TestClient) -> None:
    assert shard.get("/health").json()["status"] == "ok"
    assert shard.get("/ready").status_code == 200
    assert shard.put("/v1/collections/books", json={"dimension": 2}).status_code == 200
    assert (
        shard.put("/v1/collections/books/documents/dune", json={"embedding": [1.0, 0.0]}).status_code == 200
    )
    hits = shard.post("/v1/collections/books/search", json={"vector": [1.0, 0.0], "k": 1}).json()["results"]
    assert [h["urn"] for h in hits] == ["urn:themis:books:dune"]


def test_aql_inference_on_a_shard_without_a_model_is_refused_by_the_same_name(tmp_path: Path) -> None:
    """AQL's INFER reaches the same inference pipeline in process: its caller gets the same 503, named."""
    port = free_port()
    settings = Settings(data_dir=tmp_path / "shard", port=port, llm=LLMSettings(enabled=False))
    with Server(create_app(settings), port) as srv, httpx.Client(base_url=srv.url) as http:
        r = http.post(
            "/v1/aql", json={"query": "INFER 'gemma' @p OPTIONS {max_tokens: 4}", "bind_vars": {"p": "Hi"}}
        )
        assert refusal(r)["message"].startswith("shard shard-0 runs without a model")


def test_a_path_no_route_serves_is_still_404(shard: TestClient) -> None:
    r = shard.post("/v1/inference", json={})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_the_refused_routes_are_exactly_the_engines_routes(tmp_path: Path) -> None:
    """The no-model app refuses what the engine would serve, nothing more (public and /internal)."""

    def routes(llm: bool) -> set[tuple[str, str]]:
        app = create_app(Settings(data_dir=tmp_path / str(llm), llm=LLMSettings(enabled=llm)))
        return {(m, r.path) for r in iter_route_contexts(app.routes) for m in r.methods or ()}

    with_model, without = routes(True), routes(False)
    assert with_model == without
