"""Per-sequence token sampling over one logits row (pure numpy, no llama.cpp).

Each sequence owns a ``Sampler`` with its own random generator, so a seeded request draws the
same tokens whatever else shares its batch (and across a preemption, which keeps the sampler).
The vocabulary is large (262k for Gemma 3), so nothing here sorts the whole row: top-k uses
``argpartition`` and top-p widens a partial sort until the nucleus is covered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Nucleus search starts with this many candidates and doubles until it covers top_p.
_NUCLEUS_START = 256


class SamplingError(ValueError):
    """Invalid sampling parameters (rendered as 400 by the API)."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """What a request asks of the sampler; ``validate`` rejects nonsense before queueing."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    def validate(self, *, max_stop_strings: int = 8) -> SamplingParams:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise SamplingError("max_tokens must be an integer >= 1")
        if not (0.0 <= self.temperature <= 5.0) or self.temperature != self.temperature:
            raise SamplingError("temperature must be within [0, 5]")
        if self.top_k < 0:
            raise SamplingError("top_k must be >= 0 (0 = disabled)")
        if not (0.0 < self.top_p <= 1.0):
            raise SamplingError("top_p must be within (0, 1]")
        if self.seed is not None and not (0 <= self.seed < 2**64):
            raise SamplingError("seed must be within [0, 2^64)")
        if len(self.stop) > max_stop_strings:
            raise SamplingError(f"at most {max_stop_strings} stop strings")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise SamplingError("stop strings must be non-empty strings")
        return self


def top2_margin(logits: np.ndarray) -> float:
    """Gap between the best and second-best logit: how confident a greedy choice is."""
    two = np.partition(logits, -2)[-2:]
    return float(two[1] - two[0])


class Sampler:
    """Draws tokens for one sequence according to its ``SamplingParams``."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)

    def sample(self, logits: np.ndarray) -> int:
        p = self.params
        if p.greedy:
            return int(np.argmax(logits))
        ids, scores = _candidates(logits, p.top_k)
        scores = scores.astype(np.float64) / p.temperature
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        if p.top_p < 1.0:
            ids, probs = _nucleus(ids, probs, p.top_p)
        return int(ids[self._rng.choice(len(ids), p=probs)])


def _candidates(logits: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """All tokens, or the top-k (unordered) when top_k is set."""
    if 0 < top_k < logits.shape[0]:
        ids = np.argpartition(logits, -top_k)[-top_k:]
        return ids, logits[ids]
    return np.arange(logits.shape[0]), logits


def _nucleus(ids: np.ndarray, probs: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """Smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    n = len(ids)
    k = min(_NUCLEUS_START, n)
    while True:
        part = np.argpartition(probs, -k)[-k:] if k < n else np.arange(n)
        order = part[np.argsort(probs[part])[::-1]]
        cum = np.cumsum(probs[order])
        if cum[-1] >= top_p or k >= n:
            keep = int(np.searchsorted(cum, top_p) + 1)
            keep = min(keep, len(order))
            chosen = order[:keep]
            kept = probs[chosen]
            return ids[chosen], kept / kept.sum()
        k = min(n, k * 4)
