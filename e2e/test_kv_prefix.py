"""KV-prefix cache across real shard processes: the same system prompt sent to three shards is
prefilled once in the cluster — a request landing elsewhere runs on the holder (prefix-aware
routing) or, with routing off, pulls the state from it (the prefix directory + break-even) — and
the pulled state decodes like a full prefill."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from themis_client import InferResult, ThemisClient

from .conftest import peer_auth

pytestmark = [pytest.mark.e2e, pytest.mark.llm]

ENV = {
    "THEMIS_LLM_N_CTX": "2048",
    "THEMIS_LLM_MAX_CONCURRENT_REQUESTS": "4",
    "THEMIS_LLM_EMBEDDING_MODEL": "none",
    "THEMIS_LLM_ADAPTER_EVAL_ON_LOAD": "false",
    "THEMIS_LLM_PREFIX_MIN_TOKENS": "64",
    "THEMIS_LLM_N_THREADS": "1",
}
SYSTEM = "You are Themis, a careful assistant for a distributed database. Answer precisely. " + "".join(
    f"Rule {i}: shard {i % 7} keeps replica {i % 3} of range {i * 37 % 101}. " for i in range(1, 22)
)
PROMPT = SYSTEM + "Question: which shard keeps range 74? Answer:"


def metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def infer(url: str, **extra) -> InferResult:
    with ThemisClient(url, timeout=300) as shard:
        return shard.infer(PROMPT, max_tokens=10, temperature=0, **extra)


def scrape(url: str) -> str:
    with ThemisClient(url) as shard:
        return shard.metrics()


def prefixes(url: str) -> list[dict]:
    """The shard's KV-prefix directory: an /internal route (signed peer call), not the client's API."""
    return httpx.get(f"{url}/internal/kv_prefix", auth=peer_auth()).json()["entries"]


def test_a_plain_request_runs_on_the_shard_that_holds_its_prefix(local_cluster):
    cluster = local_cluster(2, llm=True, env=ENV)
    holder, other = (cluster.url(s) for s in cluster.ids)
    first = infer(holder)
    time.sleep(2.0)  # > a few directory refreshes (gossip interval 0.3 s)
    routed = infer(other)  # no domain: it leaves the shard it landed on for the holder
    assert routed.shard_id == cluster.ids[0] and routed.text == first.text
    landed, held = scrape(other), scrape(holder)
    assert metric(landed, "themis_inference_prefix_routed_total") == 1.0
    assert metric(held, "themis_kv_prefix_hits_total") == 1.0  # one prefill in the cluster, no pull
    assert metric(landed, "themis_kv_prefix_transfers_total", direction="import") == 0.0
    assert metric(landed, "themis_kv_prefix_states_saved_total") == 0.0


def test_one_prefill_in_the_cluster_for_one_system_prompt(local_cluster):
    """With prefix routing of plain requests off, they pull the prefix state instead."""
    cluster = local_cluster(3, llm=True, env={**ENV, "THEMIS_LLM_PREFIX_ROUTE": "false"})
    urls = [cluster.url(s) for s in cluster.ids]
    first = infer(urls[0])
    assert len(prefixes(urls[0])) == 1
    time.sleep(2.0)  # > a few directory refreshes (gossip interval 0.3 s)
    # Prefix-aware routing: a routed (domain) request arriving at shard-1 goes to the holder.
    routed = infer(urls[1], domain="legal")
    forwarded = metric(scrape(urls[1]), "themis_inference_forwarded_total", where="remote")
    assert forwarded == 1.0
    others = [infer(u) for u in urls[1:]]  # plain requests: pulled from the holder (break-even)
    scraped = [scrape(u) for u in urls]
    saved = [metric(t, "themis_kv_prefix_states_saved_total") for t in scraped]
    hits = [metric(t, "themis_kv_prefix_hits_total") for t in scraped]
    imports = [
        metric(t, "themis_kv_prefix_transfers_total", direction="import", outcome="ok") for t in scraped
    ]
    assert saved == [1.0, 0.0, 0.0], saved  # exactly one prefill of the prefix in the cluster
    assert hits == [1.0, 1.0, 1.0] and imports == [0.0, 1.0, 1.0], (hits, imports)
    assert routed.text == first.text
    assert metric(scraped[0], "themis_kv_prefix_transfers_total", direction="export") == 2.0
    assert others[0].text == others[1].text
    assert others[0].timings.ttft_ms < first.timings.ttft_ms
    # The pulled state decodes like the full prefill (greedy; near ties aside).
    import sys
    from pathlib import Path

    from themis_shard.llm.model import resolve_model_path
    from themis_shard.llm.native import NativeModel

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.llm.conftest import NOISE_LOGITS
    from tests.llm.reference import greedy_reference

    model = NativeModel(resolve_model_path("bundled"))
    try:
        ref, margins = greedy_reference(model, model.tokenize(PROMPT), 10)
        ref_text = model.detokenize(ref)
    finally:
        model.close()
    for out in [first, *others]:
        assert out.text == ref_text or min(margins) <= NOISE_LOGITS, (out.text, ref_text)
    assert re.sub(r"\s", "", first.text) != "" or ref_text.strip() == ""


def test_hot_prefixes_are_replicated_to_every_shard(local_cluster):
    cluster = local_cluster(2, llm=True, env={**ENV, "THEMIS_LLM_PREFIX_REPLICATE_HITS": "1"})
    a, b = (cluster.url(s) for s in cluster.ids)
    infer(a)  # prefill + save
    infer(a)  # a hit: the prefix is now hot
    key = prefixes(a)[0]["hash"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(e["hash"] == key for e in prefixes(b)):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the hot prefix never reached the other shard")
    out = infer(b)  # served from the replicated state: no prefill of the prefix on b
    text = scrape(b)
    assert metric(text, "themis_kv_prefix_hits_total") == 1.0
    assert metric(text, "themis_kv_prefix_states_saved_total") == 0.0
    assert out.text
