"""Per-sequence token sampling over one logits row (pure numpy, no llama.cpp).

Each sequence owns a ``Sampler`` with its own random generator, so a seeded request draws the
same tokens whatever else shares its batch (and across a preemption, which keeps the sampler).
The vocabulary is large (262k for Gemma 3), so nothing here sorts the whole row: top-k uses
``argpartition`` and top-p widens a partial sort until the nucleus is covered. Penalties and
logit bias touch only the tokens seen or biased (the row is copied once, never looped over).

A ``Constraint`` (a grammar, ``grammar.py``) is checked llama-server's way: the token drawn
without it is tested alone, and only when the grammar rejects it is the whole row masked and
the token drawn again, so an unconstrained-looking step costs one single-token check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import BadRequest

#: Nucleus search starts with this many candidates and doubles until it covers top_p.
_NUCLEUS_START = 256


class SamplingError(ValueError):
    """Invalid sampling parameters (rendered as 400 by the API)."""


def generation_budget(asked: object, default: int, limit: int) -> object:
    """The tokens a request may generate: ``asked``, else ``default`` (lowered to ``limit``).

    Asking for more than ``limit`` (0: no limit) is a 400 that names it: a generation is never
    silently shortened, and an unbounded one cannot hold a slot for minutes. Anything not an
    int is returned unchanged for ``SamplingParams.validate`` to refuse.
    """
    if asked is None:
        return min(default, limit) if limit else default
    if limit and isinstance(asked, int) and not isinstance(asked, bool) and asked > limit:
        raise BadRequest(
            f"max_tokens is {asked}; this shard generates at most {limit} tokens per request "
            "(THEMIS_LLM_MAX_TOKENS_LIMIT)",
            code="max_tokens_too_large",
        )
    return asked


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """What a request asks of the sampler; ``validate`` rejects nonsense before queueing."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    #: min-p: drop tokens whose probability is below ``min_p`` × the best one's (0 = off).
    min_p: float = 0.0
    #: OpenAI penalties over the generated tokens: once per token seen / per occurrence.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    #: CTRL / llama.cpp repetition penalty over prompt and generated tokens (1 = off).
    repetition_penalty: float = 1.0
    #: (token id, bias added to its logit); -100 bans, +100 all but forces.
    logit_bias: tuple[tuple[int, float], ...] = ()
    #: Report the chosen token's log-probability and this many alternatives (None = off).
    logprobs: int | None = None
    #: GBNF grammar the output must follow (constrained decoding), or None.
    grammar: str | None = None
    #: Also score the prompt: each prompt token's log-probability and this many alternatives.
    prompt_logprobs: int | None = None
    #: Tokens already sent by a shard that died (a resumed stream): the engine decodes them one
    #: step at a time as that shard did, drawing as it did, and emits them as ``replayed``; what
    #: it samples after them is the continuation (greedy or seeded: the one a single run gives).
    replay: tuple[int, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def plain(self) -> bool:
        """Nothing beyond temperature/top-k/top-p/seed/stop (what speculative decoding verifies)."""
        return (
            not self.replay
            and self.min_p == 0.0
            and self.presence_penalty == 0.0
            and self.frequency_penalty == 0.0
            and self.repetition_penalty == 1.0
            and not self.logit_bias
            and self.logprobs is None
            and self.grammar is None
            and self.prompt_logprobs is None
        )

    def validate(self, *, max_stop_strings: int = 8, n_vocab: int = 2**31) -> SamplingParams:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise SamplingError("max_tokens must be an integer >= 1")
        if not (0.0 <= self.temperature <= 5.0) or self.temperature != self.temperature:
            raise SamplingError("temperature must be within [0, 5]")
        if self.top_k < 0:
            raise SamplingError("top_k must be >= 0 (0 = disabled)")
        if not (0.0 < self.top_p <= 1.0):
            raise SamplingError("top_p must be within (0, 1]")
        # 2^53 (JSON's largest exact integer): a client reading numbers as doubles (JavaScript,
        # many JSON Schema validators) can check the documented limit exactly
        if self.seed is not None and not (0 <= self.seed < 2**53):
            raise SamplingError("seed must be within [0, 2^53)")
        if len(self.stop) > max_stop_strings:
            raise SamplingError(f"at most {max_stop_strings} stop strings")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise SamplingError("stop strings must be non-empty strings")
        if not (0.0 <= self.min_p <= 1.0):
            raise SamplingError("min_p must be within [0, 1]")
        for name in ("presence_penalty", "frequency_penalty"):
            if not (-2.0 <= getattr(self, name) <= 2.0):
                raise SamplingError(f"{name} must be within [-2, 2]")
        if not (0.0 < self.repetition_penalty <= 2.0):
            raise SamplingError("repetition_penalty must be within (0, 2]")
        for tok, bias in self.logit_bias:
            if not (0 <= tok < n_vocab):
                raise SamplingError(f"logit_bias: token id {tok} is outside the vocabulary [0, {n_vocab})")
            if not (-100.0 <= bias <= 100.0):
                raise SamplingError(f"logit_bias: bias for token {tok} must be within [-100, 100]")
        if self.logprobs is not None and not (0 <= self.logprobs <= 20):
            raise SamplingError("top_logprobs must be within [0, 20]")
        if self.prompt_logprobs is not None and not (0 <= self.prompt_logprobs <= 20):
            raise SamplingError("prompt logprobs must be within [0, 20]")
        return self


def top2_margin(logits: np.ndarray) -> float:
    """Gap between the best and second-best logit: how confident a greedy choice is."""
    two = np.partition(logits, -2)[-2:]
    return float(two[1] - two[0])


class Constraint(Protocol):
    """A per-sequence grammar (``grammar.GrammarConstraint``)."""

    def allows(self, token: int) -> bool: ...

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` with every token the grammar rejects at -inf."""
        ...

    def accept(self, token: int) -> None: ...


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """The chosen token's log-probability and the best alternatives (id, logprob), best first."""

    logprob: float
    top: tuple[tuple[int, float], ...]


def log_softmax_at(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """log p(ids) under softmax(logits), one pass over the row."""
    row = logits.astype(np.float64, copy=False)
    m = float(row.max())
    return (logits[ids].astype(np.float64) - m) - np.log(np.exp(row - m).sum())


def top_logprobs(logits: np.ndarray, token: int, k: int) -> TokenLogprobs:
    if k > 0:
        ids = np.argpartition(logits, -k)[-k:]
        ids = ids[np.argsort(logits[ids])[::-1]]
    else:
        ids = np.empty(0, dtype=np.int64)
    lps = log_softmax_at(logits, np.concatenate([[token], ids]).astype(np.int64))
    return TokenLogprobs(
        float(lps[0]), tuple((int(i), float(lp)) for i, lp in zip(ids, lps[1:], strict=True))
    )


class Sampler:
    """Draws tokens for one sequence according to its ``SamplingParams``.

    ``context``: the prompt's tokens (the repetition penalty counts them); ``constraint``: the
    sequence's grammar. Every ``sample`` commits the token it returns (penalty counts, grammar
    state); ``last_logprobs`` holds its log-probabilities when they were asked for.
    """

    def __init__(
        self,
        params: SamplingParams,
        *,
        context: list[int] | None = None,
        constraint: Constraint | None = None,
    ) -> None:
        self.params = params
        self.constraint = constraint
        self._rng = np.random.default_rng(params.seed)
        self._counts: dict[int, int] = {}
        self._seen_context = (
            np.unique(np.asarray(context, dtype=np.int64))
            if context and params.repetition_penalty != 1.0
            else None
        )
        self._bias = (
            (
                np.array([t for t, _ in params.logit_bias], np.int64),
                np.array([b for _, b in params.logit_bias], np.float32),
            )
            if params.logit_bias
            else None
        )
        self.last_logprobs: TokenLogprobs | None = None

    def sample(self, logits: np.ndarray) -> int:
        p = self.params
        row = self._adjusted(logits)
        token = self._draw(row)
        if self.constraint is not None and not self.constraint.allows(token):
            row = self.constraint.mask(row)
            token = self._draw(row)
        if self.constraint is not None:
            self.constraint.accept(token)
        if p.logprobs is not None:
            self.last_logprobs = top_logprobs(logits, token, p.logprobs)
        self._counts[token] = self._counts.get(token, 0) + 1
        return token

    def _adjusted(self, logits: np.ndarray) -> np.ndarray:
        """The row after logit bias and penalties (a copy only when something changes)."""
        p = self.params
        penal = self._counts and (p.presence_penalty or p.frequency_penalty or p.repetition_penalty != 1.0)
        if self._bias is None and not penal and self._seen_context is None:
            return logits
        row = np.array(logits, dtype=np.float32, copy=True)
        if self._bias is not None:
            np.add.at(row, self._bias[0], self._bias[1])
        if p.repetition_penalty != 1.0:
            seen = np.array(list(self._counts), np.int64)
            if self._seen_context is not None:
                seen = np.union1d(seen, self._seen_context)
            if seen.size:
                v = row[seen]
                row[seen] = np.where(v > 0, v / p.repetition_penalty, v * p.repetition_penalty)
        if self._counts and (p.presence_penalty or p.frequency_penalty):
            ids = np.fromiter(self._counts.keys(), np.int64, len(self._counts))
            n = np.fromiter(self._counts.values(), np.float32, len(self._counts))
            row[ids] -= p.frequency_penalty * n + p.presence_penalty
        return row

    def _draw(self, row: np.ndarray) -> int:
        p = self.params
        if p.greedy:
            return int(np.argmax(row))
        ids, scores = _candidates(row, p.top_k)
        finite = np.isfinite(scores)
        if not finite.all():
            ids, scores = ids[finite], scores[finite]
            if not len(ids):
                return int(np.argmax(row))
        scores = scores.astype(np.float64) / p.temperature
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        if p.min_p > 0.0:
            keep = probs >= p.min_p * probs.max()
            ids, probs = ids[keep], probs[keep]
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
