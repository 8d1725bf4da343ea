"""The per-domain sets shipped with Themis (``data/``, written for this repository, CC0 1.0).

``<domain>.validation.jsonl``: held-out ``{"prompt", "completion"}`` pairs an adapter for that
domain is evaluated on (its ``accuracy_delta``) and that domain detection's centroids are built
from. ``<domain>.train.jsonl``: ``{"text"}`` documents for tests and benchmarks to load into a
collection and train on — never the validation pairs. ``general`` is the reference for "no domain".
Pure apart from reading the package's files.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).with_name("data")
GENERAL = "general"


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """JSON lines of ``{"prompt", "completion"}``; blank lines skipped, anything else refused."""
    pairs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if not isinstance(item.get("prompt"), str) or not isinstance(item.get("completion"), str):
            raise ValueError(f"line {n}: needs string fields prompt and completion")
        pairs.append((item["prompt"], item["completion"]))
    return pairs


@cache
def shipped_domains() -> tuple[str, ...]:
    """The domains with a shipped validation set, ``general`` excluded."""
    names = sorted(p.name.split(".")[0] for p in DATA_DIR.glob("*.validation.jsonl"))
    return tuple(n for n in names if n != GENERAL)


@cache
def validation_set(domain: str) -> tuple[tuple[str, str], ...]:
    """The held-out pairs shipped for ``domain`` (KeyError when none is shipped)."""
    path = DATA_DIR / f"{domain}.validation.jsonl"
    if not path.is_file():
        raise KeyError(domain)
    return tuple(parse_pairs(path.read_text()))


@cache
def training_texts(domain: str) -> tuple[str, ...]:
    path = DATA_DIR / f"{domain}.train.jsonl"
    if not path.is_file():
        raise KeyError(domain)
    return tuple(json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip())


#: GGUF metadata key under which an adapter file carries its own held-out set (JSON lines).
VALIDATION_KEY = "themis.validation"


def adapter_validation_set(domain: str | None, meta: dict) -> tuple[tuple[tuple[str, str], ...], str] | None:
    """The held-out set an adapter is evaluated on, and its name: the one its file carries, else
    the shipped set of its domain; None (the shard's generic set) for an adapter without either."""
    carried = meta.get(VALIDATION_KEY)
    if isinstance(carried, str) and carried.strip():
        return tuple(parse_pairs(carried)), "adapter"
    if domain:
        try:
            return validation_set(domain.strip().lower()), domain.strip().lower()
        except KeyError:
            return None
    return None
