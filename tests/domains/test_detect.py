"""Domain detection, pure: nearest centroid, a confidence threshold and a margin, else general."""

from __future__ import annotations

import numpy as np
import pytest
from themis_shard.domains.detect import GENERAL, build_centroids, classify, mean_token_vector
from themis_shard.domains.sets import (
    VALIDATION_KEY,
    adapter_validation_set,
    shipped_domains,
    training_texts,
    validation_set,
)


def axis(i: int, d: int = 4, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    v = np.zeros(d, np.float32)
    v[i] = 1.0
    return v + np.random.default_rng(seed).normal(0, noise, d).astype(np.float32)


@pytest.fixture
def centroids():
    return build_centroids(
        {
            "legal": [axis(0, noise=0.05, seed=s) for s in range(5)],
            "medical": [axis(1, noise=0.05, seed=s) for s in range(5)],
            GENERAL: [axis(2, noise=0.05, seed=s) for s in range(5)],
        }
    )


def test_the_nearest_centroid_is_the_domain(centroids):
    out = classify(axis(0), centroids, min_similarity=0.2, min_margin=0.05)
    assert out.domain == "legal" and out.similarity > 0.5 and out.margin > 0.05
    assert classify(axis(1), centroids, min_similarity=0.2, min_margin=0.05).domain == "medical"


def test_nearest_general_far_or_ambiguous_is_general(centroids):
    assert classify(axis(2), centroids, min_similarity=0.2, min_margin=0.05).domain == GENERAL
    far = axis(0) + axis(3)  # legal-ish, but off every centroid
    assert classify(far, centroids, min_similarity=0.2, min_margin=0.05).domain == "legal"
    assert classify(far, centroids, min_similarity=0.9, min_margin=0.05).domain == GENERAL
    between = axis(0) + axis(1)
    out = classify(between, centroids, min_similarity=0.0, min_margin=0.1)
    assert out.domain == GENERAL and out.margin < 0.1


def test_a_domain_not_allowed_is_general(centroids):
    out = classify(axis(0), centroids, min_similarity=0.2, min_margin=0.05, allowed=frozenset({"medical"}))
    assert out.domain == GENERAL


def test_mean_token_vector():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert mean_token_vector(table, [0, 2]).tolist() == [3.0, 4.0, 5.0]
    assert mean_token_vector(table, []).tolist() == [0.0, 0.0, 0.0]


def test_no_examples_is_refused():
    with pytest.raises(ValueError):
        build_centroids({"legal": []})


def test_shipped_sets_cover_legal_medical_code_and_keep_training_apart_from_validation():
    assert set(shipped_domains()) >= {"legal", "medical", "code"}
    for d in ("legal", "medical", "code", GENERAL):
        assert len(validation_set(d)) >= 10
    for d in ("legal", "medical", "code"):
        held_out = {p + c for p, c in validation_set(d)}
        assert len(training_texts(d)) >= 10 and not held_out & set(training_texts(d))
    with pytest.raises(KeyError):
        validation_set("astrology")


def test_an_adapter_is_evaluated_on_the_set_it_carries_else_its_domains():
    carried = '{"prompt": "Q", "completion": " A"}\n'
    assert adapter_validation_set("legal", {VALIDATION_KEY: carried}) == ((("Q", " A"),), "adapter")
    assert adapter_validation_set("Legal", {}) == (validation_set("legal"), "legal")
    assert adapter_validation_set("astrology", {}) is None  # the shard's generic set
    assert adapter_validation_set(None, {}) is None
