"""The rejection rule is exact: what it emits is distributed as the target, whatever the draft."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from themis_shard.llm.sampling import SamplingParams
from themis_shard.llm.speculative.rejection import (
    Dist,
    accept_one,
    acceptance,
    residual,
    target_dist,
    verify_chain,
)


def one_step_output(p: Dist, q: Dist, vocab: int) -> np.ndarray:
    """Exact distribution of the token emitted at one position: draft x ~ q, then the rule."""
    out = np.zeros(vocab)
    for x, qx in zip(q.ids, q.probs, strict=True):
        a, res = acceptance(int(x), p, q)
        out[int(x)] += qx * a
        out[res.ids] += qx * (1 - a) * res.probs
    return out


def random_dist(rng, vocab: int, kind: str) -> Dist:
    if kind == "point":
        return Dist.point(int(rng.integers(vocab)))
    v = rng.dirichlet(np.full(vocab, 0.5))
    if kind == "sparse":
        v[rng.random(vocab) < 0.5] = 0
        if v.sum() == 0:
            v[rng.integers(vocab)] = 1
    return Dist.dense(v)


KINDS = ("dense", "sparse", "point")


@pytest.mark.parametrize("pk,qk", list(itertools.product(KINDS, KINDS)))
def test_one_step_output_equals_target_exhaustively(pk, qk):
    rng = np.random.default_rng(hash((pk, qk)) % 2**32)
    for vocab in (1, 2, 3, 5, 8):
        for _ in range(60):
            p, q = random_dist(rng, vocab, pk), random_dist(rng, vocab, qk)
            dense_p = np.zeros(vocab)
            dense_p[p.ids] = p.probs
            np.testing.assert_allclose(one_step_output(p, q, vocab), dense_p, atol=1e-12)


def test_identical_draft_is_always_accepted_and_disjoint_never():
    p = Dist.dense(np.array([0.2, 0.5, 0.3]))
    for x in range(3):
        assert acceptance(x, p, p)[0] == pytest.approx(1.0)
    q = Dist.dense(np.array([0, 0, 0, 1.0]))
    a, res = acceptance(3, p, q)
    assert a == 0.0
    np.testing.assert_allclose(res.probs, p.probs)


def test_point_mass_draft_accepts_with_target_probability():
    p = Dist.dense(np.array([0.1, 0.6, 0.3]))
    a, res = acceptance(1, p, Dist.point(1))
    assert a == pytest.approx(0.6)
    assert res.ids.tolist() == [0, 2] and res.probs == pytest.approx([0.25, 0.75])


def test_residual_handles_disjoint_and_partial_supports():
    p = Dist(np.array([5, 7]), np.array([0.5, 0.5]))
    q = Dist(np.array([7, 9]), np.array([0.8, 0.2]))
    r = residual(p, q)
    assert r.ids.tolist() == [5] and r.probs.tolist() == [1.0]


def test_greedy_target_accepts_only_the_argmax():
    logits = np.array([0.0, 3.0, 1.0, 2.9], np.float32)
    p = target_dist(logits, SamplingParams())
    rng = np.random.default_rng(0)
    assert accept_one(1, p, Dist.point(1), rng) is None
    assert accept_one(3, p, Dist.point(3), rng) == 1
    assert verify_chain([1, 2], [Dist.point(1)] * 2, [p, p, p], rng) == (1, 1)
    assert verify_chain([1, 1], [Dist.point(1)] * 2, [p, p, p], rng) == (2, 1)


def test_target_dist_matches_sampler_truncation():
    logits = np.log(np.array([0.05, 0.4, 0.3, 0.2, 0.05]))
    d = target_dist(logits, SamplingParams(temperature=1.0, top_k=3))
    assert sorted(d.ids.tolist()) == [1, 2, 3]
    d = target_dist(logits, SamplingParams(temperature=1.0, top_p=0.65))
    assert sorted(d.ids.tolist()) == [1, 2]
    assert d.prob(1) == pytest.approx(0.4 / 0.7)


def test_wire_form_round_trips():
    d = Dist.dense(np.array([0.0, 0.25, 0.75]))
    back = Dist.from_wire(d.to_wire())
    assert back.ids.tolist() == [1, 2] and back.probs == pytest.approx([0.25, 0.75])


def chi_square_p(counts: np.ndarray, expected_p: np.ndarray) -> float:
    """Pearson chi-square p-value (Wilson–Hilferty approximation of the chi-square tail)."""
    n = counts.sum()
    mask = expected_p > 0
    assert counts[~mask].sum() == 0, "emitted a token the target gives probability 0"
    exp = expected_p[mask] * n
    stat = float(((counts[mask] - exp) ** 2 / exp).sum())
    k = int(mask.sum()) - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_chain_sampling_matches_target_chi_square():
    """Two-token chains with a deliberately bad draft: the first *and* the second emitted token
    follow the target (sampled, fixed seeds)."""
    vocab = 6
    rng = np.random.default_rng(1234)
    p_rows = [Dist.dense(rng.dirichlet(np.ones(vocab))) for _ in range(3)]
    q_rows = [Dist.dense(rng.dirichlet(np.ones(vocab) * 0.3)) for _ in range(2)]
    first, second = np.zeros(vocab), np.zeros(vocab)
    n_acc_total = 0
    n = 20000
    for _ in range(n):
        draft = [q_rows[0].sample(rng), q_rows[1].sample(rng)]
        k, nxt = verify_chain(draft, q_rows, p_rows, rng)
        tok = draft[0] if k >= 1 else nxt
        first[tok] += 1
        if k >= 1:  # a second token was emitted this round
            second[draft[1] if k == 2 else nxt] += 1
        n_acc_total += k
    dense = np.zeros(vocab)
    dense[p_rows[0].ids] = p_rows[0].probs
    assert chi_square_p(first, dense) > 0.001
    dense2 = np.zeros(vocab)
    dense2[p_rows[1].ids] = p_rows[1].probs
    assert chi_square_p(second, dense2) > 0.001
    # and a wrong target is detected by the same test (it has power)
    assert chi_square_p(first, np.roll(dense, 1)) < 1e-6
    assert 0 < n_acc_total < 2 * n
