"""Draft sources behind one interface.

A ``DraftSource`` proposes up to k tokens continuing a sequence's context, each with the draft
distribution q it was drawn from (``rejection.Dist``; a point mass for deterministic drafts), and
is told what was finally kept so it can roll its own state back. The engine keys per-sequence
state by the sequence object; sources must tolerate ``release`` of unknown keys.

* ``PromptLookup`` — n-gram matching against the sequence's own context (prompt + generated):
  find the most recent earlier occurrence of the last n tokens (n from ``max_ngram`` down to
  ``min_ngram``) and propose the tokens that followed it. Free (microseconds), deterministic, and
  strong when the answer quotes its context (RAG).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .rejection import Dist


@dataclass(slots=True)
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: list[Dist] = field(default_factory=list)


class DraftUnavailable(Exception):
    """The source cannot draft now (down, timed out): the engine decodes plainly."""


class DraftSource(Protocol):
    name: str
    #: True when drafting cost grows with k (a draft model); False for a fixed cost per round.
    per_token_cost: bool
    #: True when a draft is a function of the sequence's own tokens and costs next to nothing
    #: (prompt lookup): the speculator then chooses draft lengths from the sequence's own
    #: acceptance alone, so a greedy or seeded answer repeats exactly (see ``Speculator.state``).
    deterministic: bool

    def propose(self, key: Hashable, tokens: list[int], k: int, params) -> Draft: ...

    def commit(self, key: Hashable, tokens: list[int]) -> None:
        """``tokens`` is now the sequence's verified context (prompt + kept output)."""

    def release(self, key: Hashable) -> None: ...

    def expected_token_s(self, target_decode_s: float, target_bytes: int) -> float | None:
        """Seconds one draft token should cost before any was timed here; None = unknown."""


class PromptLookup:
    name = "prompt_lookup"
    per_token_cost = False
    deterministic = True

    def __init__(self, min_ngram: int = 2, max_ngram: int = 4) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.min_ngram = min_ngram
        self.max_ngram = max_ngram

    def propose(self, key: Hashable, tokens: list[int], k: int, params=None) -> Draft:
        return Draft(*_point_masses(lookup(tokens, k, self.min_ngram, self.max_ngram)))

    def commit(self, key: Hashable, tokens: list[int]) -> None:
        pass

    def release(self, key: Hashable) -> None:
        pass

    def expected_token_s(self, target_decode_s: float, target_bytes: int) -> float | None:
        return 0.0  # a few microseconds of numpy


def lookup(tokens: list[int], k: int, min_ngram: int = 2, max_ngram: int = 4) -> list[int]:
    """Up to k tokens that followed the most recent earlier occurrence of the context's last
    n-gram (longest n first)."""
    n_tok = len(tokens)
    if k <= 0 or n_tok < min_ngram + 1:
        return []
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(max_ngram, n_tok - 1), min_ngram - 1, -1):
        tail = arr[n_tok - n :]
        # candidate starts i < n_tok - n (an earlier occurrence, with at least one token after it)
        starts = np.flatnonzero(arr[: n_tok - n] == tail[0])
        for i in starts[::-1]:
            if i + n >= n_tok:
                continue
            if np.array_equal(arr[i : i + n], tail):
                return arr[i + n : min(i + n + k, n_tok)].tolist()
    return []


def _point_masses(tokens: list[int]) -> tuple[list[int], list[Dist]]:
    return tokens, [Dist.point(t) for t in tokens]
