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
