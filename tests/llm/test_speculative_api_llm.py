"""``speculative: true`` through the shard's HTTP API: same greedy text, Prometheus metrics."""

from __future__ import annotations

import httpx
import pytest

from .test_speculative_llm import RAG_PROMPT

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def http(make_server):
    # Fixed n_draft: the adaptive controller may (correctly) decide not to draft on a loaded
    # machine, and this spec is about the HTTP path and its metrics, not that decision.
    srv = make_server(
        max_concurrent_requests=4,
        n_ctx=1024,
        speculative_source="prompt_lookup",
        n_draft=8,
        speculative_adaptive=False,
    )
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        yield c


def test_speculative_request_returns_the_plain_greedy_text_and_exports_metrics(http):
    body = {"prompt": RAG_PROMPT, "max_tokens": 24, "temperature": 0}
    plain = http.post("/v1/infer", json=body)
    spec = http.post("/v1/infer", json={**body, "speculative": True})
    assert plain.status_code == 200 and spec.status_code == 200, spec.text
    # equal up to batch-shape noise: the engine-level specs check the near-tie criterion; on
    # this prompt the two agree in full
    assert spec.json()["text"] == plain.json()["text"]
    text = http.get("/metrics").text
    for name in (
        "themis_speculation_draft_tokens_total",
        "themis_speculation_accepted_tokens_total",
        "themis_draft_roundtrip_seconds_bucket",
        "themis_speculation_n_draft_bucket",
    ):
        assert any(
            ln.startswith(name + "{") and 'model="gemma3-270m"' in ln and 'source="prompt_lookup"' in ln
            for ln in text.splitlines()
        ), name
    drafted = [ln for ln in text.splitlines() if ln.startswith("themis_speculation_draft_tokens_total{")]
    assert drafted and float(drafted[0].split()[-1]) > 0


def drafted_total(http) -> float:
    lines = [
        ln
        for ln in http.get("/metrics").text.splitlines()
        if ln.startswith("themis_speculation_draft_tokens_total{")
    ]
    return sum(float(ln.split()[-1]) for ln in lines)


def test_openai_routes_take_the_speculative_extension(http):
    before = drafted_total(http)
    r = http.post(
        "/v1/completions",
        json={"prompt": RAG_PROMPT, "max_tokens": 16, "temperature": 0, "speculative": True},
    )
    assert r.status_code == 200, r.text
    assert drafted_total(http) > before
    after_completions = drafted_total(http)
    r = http.post(
        "/v1/completions",
        json={"prompt": RAG_PROMPT, "max_tokens": 16, "temperature": 0, "speculative": False},
    )
    assert r.status_code == 200 and drafted_total(http) == after_completions


def test_this_shard_as_a_draft_shard_validates_its_input(http):
    """``/internal/draft`` with the shard's own model as the draft (no draft model configured)."""
    ok = http.post("/internal/draft", json={"rid": "r1", "pos": 0, "tokens": [2, 818, 5279], "k": 3})
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["tokens"]) == 3 and ok.json()["q"] is None  # greedy: point masses
    bad = http.post("/internal/draft", json={"rid": "r2", "pos": 0, "tokens": [2, 10**9], "k": 3})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_token"
    lost = http.post("/internal/draft", json={"rid": "never-seen", "pos": 5, "tokens": [3], "k": 2})
    assert lost.status_code == 409 and lost.json()["error"]["code"] == "draft_state_lost"
    assert (
        http.post("/internal/draft", json={"rid": "r1", "pos": 0, "tokens": [2], "k": 99}).status_code == 400
    )
    info = http.get("/internal/draft/info").json()  # what verify shards judge it by
    assert info["model_bytes"] > 100e6 and len(info["draft_of"]) == 64
    assert http.delete("/internal/draft/r1").status_code == 200
