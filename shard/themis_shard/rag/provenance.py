"""What ties an answer to the data and the generation that made it: the sources as URN@version
(with the hybrid-clock stamp of that version, so a reused version number is told apart), the model,
the adapter, the seed and the sampling. ``POST /v1/rag:replay`` takes this record back and re-runs
the answer against exactly those versions. Pure functions."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

#: Seeds a shard picks when a request names none: within every engine's accepted range.
SEED_RANGE = 2**31


def pick_seed(asked: int | None) -> int:
    """The seed a generation runs with: the asked one, else a fresh one (reported, so a replay
    draws the same tokens)."""
    return asked if asked is not None else secrets.randbelow(SEED_RANGE)


def cited(sources: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{"urn", "version", "hlc", "score"}]``: a source as an answer cites it."""
    return [{k: s[k] for k in ("urn", "version", "hlc", "score") if s.get(k) is not None} for s in sources]


def replay_record(
    *,
    query: str,
    collection: str,
    sources: Sequence[dict[str, Any]],
    generation: dict[str, Any],
    domain: str | None,
    seed: int,
    max_tokens: int | None,
    temperature: float,
    passage_chars: int,
    speculative: bool,
) -> dict[str, Any]:
    """The body ``POST /v1/rag:replay`` takes, sent back as it came: the question, the sources
    at their versions, the model and adapter that generated (as the engine reported them), the
    seed and sampling (``max_tokens`` None: the shard's default), and the answer to compare with."""
    return {
        "query": query,
        "collection": collection,
        "sources": [{"urn": s["urn"], "version": s.get("version"), "hlc": s.get("hlc")} for s in sources],
        "model": generation.get("model"),
        "adapter": generation.get("adapter"),
        "domain": domain,
        "seed": seed,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "passage_chars": passage_chars,
        "speculative": speculative,
        "answer": generation.get("text"),
    }
