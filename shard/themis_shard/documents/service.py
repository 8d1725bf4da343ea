"""Document writes and document embeddings, above the cluster's routed commit.

Embed-on-write lives here rather than in a route so a collection that asks for embeddings
(``embed_field``) gets them whichever door a write came through: the documents API, a
transaction, or an AQL ``INSERT``/``UPDATE``. Embedding stored documents (``EMBED`` by URN)
reads the same collection setting, so both live together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..cluster.documents.coordinator import DistributedDocuments
from ..cluster.replication.fencing import DEFAULT_CONCERN, WriteConcern
from ..errors import BadRequest, ThemisError
from ..storage.documents import Change, DocumentStore, StoredDocument, Write
from ..storage.names import urn
from ..vector.catalog import EMBEDDING_FIELD

#: The field embedded by URN when the collection names none.
DEFAULT_EMBED_FIELD = "text"


class Embedder(Protocol):
    """The shard's embedding model (``LLMRuntime`` satisfies it)."""

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def embed_rows(self, texts: list[str]) -> np.ndarray: ...


def pending_embeddings(
    writes: Sequence[Write], embed_field: Callable[[str], str | None]
) -> list[tuple[int, str]]:
    """(index, text) of the writes that need an embedding: a put into a collection with an
    ``embed_field`` holding text, which does not carry its own embedding."""
    todo: list[tuple[int, str]] = []
    for i, w in enumerate(writes):
        if w.document is None or EMBEDDING_FIELD in w.document:
            continue
        field = embed_field(w.collection)
        if field and isinstance(w.document.get(field), str):
            todo.append((i, w.document[field]))
    return todo


def with_embeddings(
    writes: Sequence[Write], todo: Sequence[tuple[int, str]], vectors: Sequence[Sequence[float]]
) -> list[Write]:
    out = list(writes)
    for (i, _), vector in zip(todo, vectors, strict=True):
        w = out[i]
        out[i] = Write(w.collection, w.key, {**w.document, EMBEDDING_FIELD: list(vector)}, w.if_version)
    return out


def text_to_embed(collection: str, key: str, doc: StoredDocument | None, field: str) -> str:
    """The text of a stored document to embed, or the 4xx that says why there is none."""
    if doc is None:
        raise ThemisError(
            f"document {urn(collection, key)} does not exist", code="document_not_found", status=404
        )
    text = doc.document.get(field)
    if not isinstance(text, str) or not text:
        raise BadRequest(f"{urn(collection, key)} has no text in field {field!r} to embed", code="no_text")
    return text


class DocumentService:
    """Writes through embed-on-write to the cluster's commit; embeddings of stored documents.

    ``embedder`` is None on a shard without an embedding model: only a write or an ``EMBED``
    that needs it is refused (400 ``embedding_unavailable``).
    """

    def __init__(
        self, store: DocumentStore, documents: DistributedDocuments, embedder: Embedder | None
    ) -> None:
        self.store = store
        self.documents = documents
        self.embedder = embedder

    def _embed_field(self, collection: str) -> str | None:
        return (
            self.store.collection(collection).embed_field if self.store.has_collection(collection) else None
        )

    def _require_embedder(self) -> Embedder:
        if self.embedder is None:
            raise BadRequest("this shard has no embedding model", code="embedding_unavailable")
        return self.embedder

    async def embed_missing(self, writes: list[Write]) -> list[Write]:
        """Fill ``embedding`` from the collection's ``embed_field`` text (embed-on-write)."""
        todo = pending_embeddings(writes, self._embed_field)
        if not todo:
            return writes
        vectors = await self._require_embedder().embed([text for _, text in todo])
        return with_embeddings(writes, todo, vectors)

    async def commit(self, writes: list[Write], concern: WriteConcern = DEFAULT_CONCERN) -> list[Change]:
        return await self.documents.commit(await self.embed_missing(writes), concern)

    async def commit_batch(
        self, writes: list[Write], concern: WriteConcern = DEFAULT_CONCERN
    ) -> list[Change]:
        return await self.documents.commit_batch(await self.embed_missing(writes), concern)

    async def embed_stored(self, keys: list[tuple[str, str]]) -> list[list[float]]:
        """Embed documents held by this shard, from their collection's ``embed_field`` (or "text")."""
        return (await self.embed_stored_rows(keys)).tolist()

    async def embed_stored_rows(self, keys: list[tuple[str, str]]) -> np.ndarray:
        """:meth:`embed_stored` as float32 rows (what a peer asking for them is sent)."""
        embedder = self._require_embedder()
        texts = [
            text_to_embed(c, k, self.store.get(c, k), self._embed_field(c) or DEFAULT_EMBED_FIELD)
            for c, k in keys
        ]
        return await embedder.embed_rows(texts)
