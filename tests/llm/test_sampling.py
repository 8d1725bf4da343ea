"""Per-sequence sampling: parameters are validated, seeds reproduce, filters restrict."""

import numpy as np
import pytest
from themis_shard.llm.sampling import Sampler, SamplingError, SamplingParams, top2_margin

VOCAB = 50_000


def logits(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=VOCAB).astype(np.float32) * 3


def test_greedy_picks_the_argmax():
    row = logits()
    assert Sampler(SamplingParams()).sample(row) == int(np.argmax(row))
    assert Sampler(SamplingParams(temperature=0.9, top_k=1)).sample(row) == int(np.argmax(row))


def test_same_seed_same_tokens_different_seed_differs():
    rows = [logits(i) for i in range(20)]
    p = SamplingParams(temperature=1.0, seed=7)
    s1, s2, other = Sampler(p), Sampler(p), Sampler(SamplingParams(temperature=1.0, seed=8))
    drawn = [s1.sample(r) for r in rows]
    assert drawn == [s2.sample(r) for r in rows]
    assert drawn != [other.sample(r) for r in rows]


def test_top_k_only_draws_from_the_k_best():
    row = logits(1)
    best = set(np.argsort(row)[-5:].tolist())
    s = Sampler(SamplingParams(temperature=2.0, top_k=5, seed=1))
    assert {s.sample(row) for _ in range(200)} <= best


def test_top_p_draws_from_the_nucleus():
    row = np.full(VOCAB, -20.0, np.float32)
    row[[10, 20, 30]] = [10.0, 9.5, 9.0]  # ~99.99 % of the mass on three tokens
    s = Sampler(SamplingParams(temperature=1.0, top_p=0.5, seed=3))
    assert {s.sample(row) for _ in range(100)} <= {10, 20}
    wide = Sampler(SamplingParams(temperature=1.0, top_p=0.999, seed=3))
    assert {wide.sample(row) for _ in range(300)} == {10, 20, 30}


def test_low_temperature_concentrates_on_the_best():
    row = logits(2)
    s = Sampler(SamplingParams(temperature=0.01, seed=0))
    assert all(s.sample(row) == int(np.argmax(row)) for _ in range(20))


@pytest.mark.parametrize(
    "bad",
    [
        {"max_tokens": 0},
        {"temperature": -0.1},
        {"temperature": 9.0},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -1},
        {"seed": -1},
        {"stop": ("",)},
        {"stop": tuple("abcdefghij")},
    ],
)
def test_invalid_parameters_are_refused(bad):
    with pytest.raises(SamplingError):
        SamplingParams(**bad).validate(max_stop_strings=8)


def test_top2_margin():
    row = np.array([1.0, 5.0, 4.25, -3.0], np.float32)
    assert top2_margin(row) == pytest.approx(0.75)
