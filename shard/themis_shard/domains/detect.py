"""Domain detection as pure functions: nearest per-domain centroid with a confidence threshold.

A text is represented by the mean of the embedding model's *input token embeddings* (its
``token_embd`` table), centred on the mean of all reference texts and L2-normalised. That is a
static bag-of-tokens embedding: no transformer pass, so classifying a prompt costs a tokenisation
and a (k × d) product — tens of microseconds — where a full MiniLM pass costs tens of
milliseconds on a loaded 2-core machine (measured in ``bench/domains.py``); it is enough to tell
legal from medical from code apart (every held-out training text of the shipped sets lands in
its own domain). Centroids are built from the domains' validation sets; ``general`` is the
reference for requests that belong to no domain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

GENERAL = "general"


@dataclass(frozen=True)
class Detection:
    #: the detected domain, or ``general`` when no domain is confident enough
    domain: str
    #: cosine similarity of the text to the chosen centroid (to the best one for ``general``)
    similarity: float
    #: best minus runner-up similarity
    margin: float


@dataclass(frozen=True)
class Centroids:
    names: tuple[str, ...]
    #: (k, d) unit rows, one per name
    matrix: np.ndarray
    #: (d,) the mean the text vectors are centred on
    centre: np.ndarray


def mean_token_vector(table: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
    """The mean of the token embedding rows (zeros for no tokens)."""
    if not tokens:
        return np.zeros(table.shape[1], np.float32)
    return table[np.asarray(tokens, dtype=np.int64)].mean(axis=0)


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 1e-12 else v


def build_centroids(examples: Mapping[str, Sequence[np.ndarray]]) -> Centroids:
    """Centroids from each domain's raw example vectors (``general`` included when given)."""
    names = tuple(sorted(d for d, vs in examples.items() if len(vs)))
    if not names:
        raise ValueError("no examples to build domain centroids from")
    centre = np.mean([v for d in names for v in examples[d]], axis=0)
    rows = [_unit(np.mean([_unit(v - centre) for v in examples[d]], axis=0)) for d in names]
    return Centroids(names, np.stack(rows).astype(np.float32), centre.astype(np.float32))


def classify(
    vector: np.ndarray,
    centroids: Centroids,
    *,
    min_similarity: float,
    min_margin: float,
    allowed: frozenset[str] | None = None,
) -> Detection:
    """The nearest centroid, or ``general`` when it is ``general``, too far (< ``min_similarity``),
    too close to the runner-up (< ``min_margin``) or not among ``allowed`` domains."""
    sims = centroids.matrix @ _unit(vector - centroids.centre)
    order = np.argsort(-sims)
    best = int(order[0])
    top = float(sims[best])
    margin = top - float(sims[order[1]]) if len(order) > 1 else top
    name = centroids.names[best]
    if (
        name == GENERAL
        or top < min_similarity
        or margin < min_margin
        or (allowed is not None and name not in allowed)
    ):
        return Detection(GENERAL, top, margin)
    return Detection(name, top, margin)
