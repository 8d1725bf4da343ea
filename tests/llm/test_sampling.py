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


# -- penalties, min_p, logit bias, logprobs ------------------------------------------------------


def test_logit_bias_bans_and_forces():
    row = logits(4)
    best = int(np.argmax(row))
    assert Sampler(SamplingParams(logit_bias=((best, -100.0),))).sample(row) != best
    assert Sampler(SamplingParams(logit_bias=((17, 100.0),))).sample(row) == 17
    assert row[best] == logits(4)[best]  # the engine's row is never written to


def test_penalties_only_touch_tokens_already_drawn():
    row = np.zeros(VOCAB, np.float32)
    row[[5, 6]] = [10.0, 9.0]
    s = Sampler(SamplingParams(presence_penalty=2.0))
    assert [s.sample(row) for _ in range(3)] == [5, 6, 5]  # 5 pays 2 once drawn, then 6 does too
    f = Sampler(SamplingParams(frequency_penalty=0.6))
    assert [f.sample(row) for _ in range(4)] == [5, 5, 6, 5]  # 10-0.6k vs 9-0.6j


def test_repetition_penalty_counts_the_prompt():
    row = np.zeros(VOCAB, np.float32)
    row[[5, 6]] = [10.0, 9.0]
    assert Sampler(SamplingParams(repetition_penalty=1.5), context=[5]).sample(row) == 6
    assert Sampler(SamplingParams(repetition_penalty=1.5), context=[7]).sample(row) == 5


def test_min_p_drops_the_unlikely_tail():
    row = np.full(VOCAB, -30.0, np.float32)
    row[[1, 2, 3]] = [5.0, 4.5, 0.0]
    s = Sampler(SamplingParams(temperature=1.0, min_p=0.2, seed=0))
    assert {s.sample(row) for _ in range(300)} == {1, 2}


def test_logprobs_are_the_models_log_softmax():
    row = logits(5)
    s = Sampler(SamplingParams(logprobs=3))
    tok = s.sample(row)
    lp = s.last_logprobs
    ref = row.astype(np.float64) - np.log(np.exp(row.astype(np.float64)).sum())
    assert lp.logprob == pytest.approx(ref[tok]) and [t for t, _ in lp.top] == list(np.argsort(row)[::-1][:3])
    assert all(a >= b for (_, a), (_, b) in zip(lp.top, lp.top[1:], strict=False))


class OnlyEven:
    """A toy constraint: even token ids only."""

    def __init__(self):
        self.accepted = []
        self.masks = 0

    def allows(self, token):
        return token % 2 == 0

    def mask(self, row):
        self.masks += 1
        out = row.copy()
        out[1::2] = -np.inf
        return out

    def accept(self, token):
        self.accepted.append(token)


def test_a_constraint_is_checked_first_and_masks_only_on_rejection():
    c = OnlyEven()
    row = np.zeros(VOCAB, np.float32)
    row[[8, 9]] = [5.0, 1.0]
    s = Sampler(SamplingParams(), constraint=c)
    assert s.sample(row) == 8 and c.masks == 0  # the free choice was allowed: no mask
    row[[8, 9]] = [1.0, 5.0]
    second = s.sample(row)
    assert second == 8 and c.masks == 1 and c.accepted == [8, 8]


@pytest.mark.parametrize(
    "bad",
    [
        {"min_p": 1.5},
        {"presence_penalty": 3.0},
        {"frequency_penalty": -2.5},
        {"repetition_penalty": 0.0},
        {"logit_bias": ((VOCAB, 1.0),)},
        {"logit_bias": ((3, 101.0),)},
        {"logprobs": 21},
    ],
)
def test_new_parameters_are_validated(bad):
    with pytest.raises(SamplingError):
        SamplingParams(**bad).validate(n_vocab=VOCAB)
