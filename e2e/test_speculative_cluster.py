"""Cross-shard speculative decoding between real shard processes: a verify shard finds
its draft shard through gossip (``draft_shard=auto`` + the draft shard's ``draft_of``), verifies
its drafts exactly, and finishes every generation locally when the draft shard dies."""

from __future__ import annotations

import time

import pytest
from themis_client import InferResult, ThemisClient

from .test_kv_prefix import metric

pytestmark = [pytest.mark.e2e, pytest.mark.llm]

ENV = {
    "THEMIS_LLM_N_CTX": "1024",
    "THEMIS_LLM_MAX_CONCURRENT_REQUESTS": "4",
    "THEMIS_LLM_EMBEDDING_MODEL": "none",
    "THEMIS_LLM_ADAPTER_EVAL_ON_LOAD": "false",
    "THEMIS_LLM_N_THREADS": "1",
}
VERIFY = {
    "THEMIS_LLM_SPECULATIVE_SOURCE": "remote",
    "THEMIS_LLM_DRAFT_SHARD": "auto",
    "THEMIS_LLM_N_DRAFT": "4",
    "THEMIS_LLM_SPECULATIVE_ADAPTIVE": "false",  # draft every round: the spec counts drafts
    "THEMIS_LLM_SPECULATION_MAX_DRAFT_S": "2",
    "THEMIS_LLM_SPECULATION_COOLDOWN": "2",
    "THEMIS_CLUSTER_BREAKER_FAILURE_THRESHOLD": "2",
}
# The draft shard drafts with its own model (the same one): every greedy draft is accepted up to
# batch-shape noise, which makes the acceptance count a sharp check of the protocol.
DRAFT = {"THEMIS_LLM_SERVE_DRAFTS": "true"}
PROMPT = "1, 2, 3, 4, 5, 6, 7,"  # confident greedy tokens all the way (no near-ties)


def infer(url: str, **extra) -> InferResult:
    with ThemisClient(url, timeout=300) as shard:
        return shard.infer(PROMPT, max_tokens=24, temperature=0, **extra)


def speculation(url: str) -> dict:
    with ThemisClient(url, timeout=10) as shard:
        return shard.cluster_status().speculation or {}


def scrape(url: str) -> str:
    with ThemisClient(url) as shard:
        return shard.metrics()


def test_verify_shard_drafts_on_its_gossiped_draft_shard_and_survives_its_death(local_cluster):
    cluster = local_cluster(2, llm=True, env=ENV, shard_env={"shard-0": VERIFY, "shard-1": DRAFT})
    verify, draft = cluster.url("shard-0"), cluster.url("shard-1")
    assert speculation(draft)["serves_drafts_for"]  # the model's sha256, announced by gossip
    deadline = time.monotonic() + 30
    while speculation(verify)["draft_shard"] != "shard-1":
        assert time.monotonic() < deadline, speculation(verify)
        time.sleep(0.2)

    plain = infer(verify, speculative=False)
    spec = infer(verify, speculative=True)
    m = scrape(verify)
    drafted = metric(m, "themis_speculation_draft_tokens_total", source="remote")
    accepted = metric(m, "themis_speculation_accepted_tokens_total", source="remote")
    assert drafted > 0 and accepted / drafted > 0.5, (drafted, accepted)
    assert metric(m, "themis_draft_roundtrip_seconds_count", source="remote") > 0
    # same model drafting: the speculative text is the plain one (or departs at a near-tie only,
    # which the engine specs bound; counting has none)
    assert spec.text == plain.text

    cluster.kill("shard-1")
    t0 = time.monotonic()
    after = infer(verify, speculative=True)
    assert after.text == plain.text and after.tokens == 24
    assert time.monotonic() - t0 < 60  # a dead draft shard never hangs a request
    m = scrape(verify)
    assert metric(m, "themis_speculation_fallback_total", source="remote", reason="draft_error") >= 1
    # the breaker opens: later rounds skip the dead shard without a connect attempt
    assert infer(verify, speculative=True).text == plain.text
