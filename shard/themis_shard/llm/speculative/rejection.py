"""Exact speculative acceptance: the rejection rule of Leviathan et al. / Chen et al. (pure numpy).

A draft proposes tokens x_1..x_k, each drawn from a draft distribution q_i; the target model
scores the context plus all k tokens in one decode and gives p_1..p_{k+1}. Walking the chain,
token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)) (we draw u ~ U[0,1) and
accept iff u < p/q, so the acceptance probability is exactly min(1, p/q)). At the first
rejection the token is resampled from the residual norm(max(0, p_i − q_i)) and the chain stops;
when all k are accepted a bonus token is drawn from p_{k+1}. Every emitted token is then
distributed exactly as the target model's (with its temperature / top-k / top-p applied: the
``p`` here is the *sampling* distribution, see ``target_dist``).

Distributions are sparse: ``Dist(ids, probs)``. This is also the network form of q (the draft
payload of a remote draft shard): for each draft token the draft sends the support it actually
sampled from — its top-k / nucleus after temperature — with the renormalised probabilities,
float32, typically ≤ 64 entries (≈ 0.5 KB per token instead of 1 MB for a 262k dense row). The
rule stays exact because the draft samples *from that truncated distribution*, so the q we
divide by is the true q, and the residual max(0, p − q) is computed over the union of both
supports (q is 0 outside its support). A deterministic draft (prompt lookup, greedy draft
model) sends a point mass: q(x) = 1, so acceptance is u < p(x) and the residual is p with x
removed, renormalised.

At temperature 0 the target is a point mass on argmax(logits): acceptance is "draft token ==
argmax" and the residual is that argmax, so greedy speculative output equals greedy plain output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sampling import SamplingParams, _candidates, _nucleus


@dataclass(frozen=True, slots=True)
class Dist:
    """A sparse probability distribution over token ids (probs sum to 1, ids distinct)."""

    ids: np.ndarray  # int64
    probs: np.ndarray  # float64

    @staticmethod
    def point(token: int) -> Dist:
        return Dist(np.array([token], np.int64), np.array([1.0]))

    @staticmethod
    def dense(probs: np.ndarray) -> Dist:
        probs = np.asarray(probs, np.float64)
        ids = np.flatnonzero(probs > 0)
        return Dist(ids.astype(np.int64), probs[ids] / probs[ids].sum())

    def prob(self, token: int) -> float:
        if 0 <= token < len(self.ids) and self.ids[token] == token:  # a full-vocabulary row: O(1)
            return float(self.probs[token])
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def sample(self, rng: np.random.Generator) -> int:
        if len(self.ids) == 1:
            return int(self.ids[0])
        return int(self.ids[rng.choice(len(self.ids), p=self.probs)])

    def to_wire(self) -> dict:
        return {"ids": self.ids.astype(np.int64).tolist(), "probs": self.probs.astype(np.float32).tolist()}

    @staticmethod
    def from_wire(d: dict) -> Dist:
        probs = np.asarray(d["probs"], np.float64)
        return Dist(np.asarray(d["ids"], np.int64), probs / probs.sum())


def target_dist(logits: np.ndarray, params: SamplingParams) -> Dist:
    """The distribution the engine's ``Sampler`` draws from for this logits row."""
    if params.greedy:
        return Dist.point(int(np.argmax(logits)))
    ids, scores = _candidates(logits, params.top_k)
    scores = scores.astype(np.float64) / params.temperature
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    if params.top_p < 1.0:
        ids, probs = _nucleus(ids, probs, params.top_p)
    keep = probs > 0
    if keep.all():  # the usual case: no copy of a 262k-entry row
        return Dist(np.asarray(ids, np.int64), probs)
    return Dist(np.asarray(ids[keep], np.int64), probs[keep] / probs[keep].sum())


class TargetRows:
    """The target distributions of a verify round, computed only for the positions the chain
    actually reaches: a sampled request's row is a softmax over the whole vocabulary (262k
    here, milliseconds of numpy), and most rounds stop at the first rejection."""

    def __init__(self, rows: list[np.ndarray], params: SamplingParams) -> None:
        self._rows = rows
        self._params = params
        self._done: dict[int, Dist] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> Dist:
        i = i % len(self._rows)
        d = self._done.get(i)
        if d is None:
            d = self._done[i] = target_dist(self._rows[i], self._params)
        return d


def residual(p: Dist, q: Dist) -> Dist:
    """norm(max(0, p − q)) over p's support (where q > p it is 0; outside p it is 0 too)."""
    qs = np.zeros(len(p.ids))
    if len(q.ids):
        order = np.argsort(q.ids)
        sq = q.ids[order]
        pos = np.searchsorted(sq, p.ids)
        pos = np.minimum(pos, len(sq) - 1)
        hit = sq[pos] == p.ids
        qs[hit] = q.probs[order][pos[hit]]
    r = np.maximum(0.0, p.probs - qs)
    total = r.sum()
    if total <= 1e-12:  # p == q (within rounding): rejection has probability 0; fall back to p
        return p
    keep = r > 0
    return Dist(p.ids[keep], r[keep] / total)


def acceptance(x: int, p: Dist, q: Dist) -> tuple[float, Dist]:
    """Probability that draft token ``x`` is accepted, and the distribution drawn on rejection."""
    px, qx = p.prob(x), q.prob(x)
    if qx <= 0.0:  # a draft that could not have proposed x: exactness needs its q, use a point mass
        q, qx = Dist.point(x), 1.0
    return min(1.0, px / qx), residual(p, q)


def accept_one(x: int, p: Dist, q: Dist, rng: np.random.Generator) -> int | None:
    """One step of the rule: None if ``x`` is accepted, else the resampled token."""
    if len(p.ids) == 1:  # deterministic target (greedy): no randomness needed
        return None if int(p.ids[0]) == x else int(p.ids[0])
    a, res = acceptance(x, p, q)
    if a >= 1.0 or rng.random() < a:
        return None
    return res.sample(rng)


def verify_chain(draft: list[int], q: list[Dist], p, rng: np.random.Generator) -> tuple[int, int]:
    """Walk the draft against ``p`` (len(draft) + 1 target distributions: a list, or
    ``TargetRows`` to compute them on demand).

    Returns ``(n_accepted, next_token)``: the first ``n_accepted`` draft tokens are kept and
    ``next_token`` (the resampled token at the first rejection, or the bonus token from the last
    row when every draft token is accepted) follows them.
    """
    assert len(p) == len(draft) + 1 and len(q) == len(draft)
    for i, x in enumerate(draft):
        r = accept_one(x, p[i], q[i], rng)
        if r is not None:
            return i, r
    return len(draft), p[-1].sample(rng)
