"""The RAG prompt, one template for ``POST /v1/rag`` and AQL's ``RAG``: pure functions."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: Fields that are the store's, not the document's text.
SYSTEM_FIELDS = ("_key", "_urn", "_version", "embedding")
#: Fields tried, after the collection's ``embed_field``, for a document's text.
TEXT_FIELDS = ("text", "content", "body")


def passage_text(doc: Mapping[str, Any], embed_field: str | None = None) -> str:
    """The text a document contributes: its embed field, else text/content/body, else its JSON."""
    for name in (embed_field, *TEXT_FIELDS):
        if name and isinstance(doc.get(name), str):
            return doc[name]
    rest = {k: v for k, v in doc.items() if k not in SYSTEM_FIELDS}
    return json.dumps(rest, ensure_ascii=False, sort_keys=True)


def prompt_order(hits: Sequence[Any], urn: Callable[[Any], str] = lambda h: h["urn"]) -> list[Any]:
    """The passages in the order the prompt lists them: by URN, not by score. The same documents
    then make the same prompt prefix whatever the question (and whatever their scores), so the
    engine's prefix cache restores their KV state instead of prefilling them again. The cache is
    keyed by the tokens themselves: a write to a document changes its passage, so no state built
    from an older version can ever be restored for it."""
    return sorted(hits, key=urn)


def build_prompt(question: str, passages: Sequence[str], *, passage_chars: int) -> str:
    """Numbered passages (each cut to ``passage_chars``) and the question."""
    return rag_prompt(question, passages, passage_chars=passage_chars)[0]


def rag_prompt(question: str, passages: Sequence[str], *, passage_chars: int) -> tuple[str, int]:
    """The prompt, and how many of its first characters any question over the same passages
    shares: everything before the question, which the engine is asked to keep the KV state of
    (``shared_prefix_chars``), so a second question over them prefills only itself."""
    context = "\n".join(f"[{i + 1}] {text[:passage_chars]}" for i, text in enumerate(passages))
    shared = f"Answer the question using only the context.\n\nContext:\n{context}\n\n"
    return f"{shared}Question: {question}\nAnswer:", len(shared)
