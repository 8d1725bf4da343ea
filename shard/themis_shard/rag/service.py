"""One ``POST /v1/rag`` request's retrieval: embed the question, retrieve (scatter-gathered,
filtered) and build the prompt, its passages in URN order (``prompt.prompt_order``) so that the
same documents make the same prefix. Generation is the node's one inference pipeline, which
places it (domain routing, the KV-prefix holder weighed against load, else here). Nothing here
knows HTTP; the route wraps the answer.

Every source is cited at its version (``provenance``). With ``snapshot`` the passages are read as
they stood at one hybrid time T taken before the search: a hit written after T is read at its
version as of T (``versions``), or left out when it did not exist then. The candidate set is the
vector index's at search time, so a document deleted after T is not among them (documented).
``replay`` rebuilds the prompt from the cited versions themselves.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from ..cluster.service import ClusterService
from ..documents.vector_search import vector_search
from ..errors import NotFound
from ..metrics import ShardMetrics
from ..storage.documents import DocumentStore
from ..storage.names import parse_urn
from ..vector.catalog import VectorCatalog
from .prompt import passage_text, prompt_order, rag_prompt
from .provenance import cited
from .versions import SourceReader

#: A generation: ``/v1/infer``'s result dict, or its SSE bytes.
Answer = dict | AsyncIterator[bytes]
Embed = Callable[[list[str]], Awaitable[list[list[float]]]]


@dataclass(frozen=True)
class Retrieved:
    sources: list[dict]  # {"urn", "score", "document", "version", "hlc"}, in prompt order
    shards_failed: list[str]
    prompt: str
    retrieval_ms: float
    #: the hybrid time every passage was read at (``snapshot``), else None
    snapshot_hlc: int | None = None
    #: the prompt's first characters any question over these passages shares (``rag_prompt``)
    shared_chars: int = 0

    def cited(self) -> list[dict]:
        return cited(self.sources)


def sse(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


class RagService:
    def __init__(
        self,
        store: DocumentStore,
        vectors: VectorCatalog,
        cluster: ClusterService,
        metrics: ShardMetrics,
        embed: Embed,
        *,
        passage_chars: int,
        speculative: bool,
    ) -> None:
        self.reader = SourceReader(store, cluster)
        self.store = store
        self.vectors = vectors
        self.cluster = cluster
        self.metrics = metrics
        self.embed = embed
        self.passage_chars = passage_chars
        #: Whether an answer that does not say decodes speculatively (``rag_speculative``).
        self.speculative = speculative

    async def retrieve(
        self, question: str, collection: str, k: int, filter_: dict | None, *, snapshot: bool = False
    ) -> Retrieved:
        """The passages and the prompt; 404 ``collection_not_found``, 400 ``not_indexed`` (no
        vector index), 404 ``no_context`` when nothing matched (no answer without context);
        with ``snapshot``, 410 ``snapshot_unavailable`` when a passage's version as of T was
        compacted away."""
        started = time.perf_counter()
        config = self.store.collection(collection)
        self.vectors.index(collection)  # refuses a collection without embeddings before embedding
        at = self.store.clock.now() if snapshot else None
        [vector] = await self.embed([question])
        hits, failed = await vector_search(
            self.vectors, self.cluster, self.metrics, collection, list(vector), k, filter_
        )
        if at is not None:
            hits = await self._as_of(hits, at)
        if not hits:
            raise NotFound(
                f"no document of collection {collection!r} matched (is it empty, or the filter too narrow?)",
                code="no_context",
            )
        hits = prompt_order(hits)
        prompt, shared = rag_prompt(
            question,
            [passage_text(h["document"], config.embed_field) for h in hits],
            passage_chars=self.passage_chars,
        )
        took = round((time.perf_counter() - started) * 1000, 3)
        return Retrieved(hits, failed, prompt, took, at, shared_chars=shared)

    async def _as_of(self, hits: list[dict], at: int) -> list[dict]:
        """The hits as they stood at ``at``: a newer one read at its version then, or dropped."""

        async def one(hit: dict) -> dict | None:
            if hit.get("hlc") is not None and hit["hlc"] <= at:
                return hit
            record = await self.reader.as_of(*parse_urn(hit["urn"]), at)
            return None if record is None else {**hit, **record}

        return [h for h in await asyncio.gather(*(one(h) for h in hits)) if h is not None]

    async def replay_sources(
        self, question: str, sources: list[tuple[str, int, int | None]], passage_chars: int
    ) -> Retrieved:
        """The cited ``(urn, version, hlc)`` read at exactly those versions (here or from an owner)
        and the prompt they make: 404 ``version_not_found``, 410 ``version_compacted``."""
        started = time.perf_counter()
        keys = [parse_urn(u) for u, _, _ in sources]
        records = await asyncio.gather(
            *(self.reader.at_version(c, k, v, h) for (c, k), (_, v, h) in zip(keys, sources, strict=True))
        )
        hits = [{"urn": u, "score": None, **r} for (u, _, _), r in zip(sources, records, strict=True)]
        prompt, shared = rag_prompt(
            question,
            [
                passage_text(h["document"], self.store.collection(c).embed_field)
                for h, (c, _) in zip(hits, keys, strict=True)
            ],
            passage_chars=passage_chars,
        )
        took = round((time.perf_counter() - started) * 1000, 3)
        return Retrieved(hits, [], prompt, took, shared_chars=shared)


def rag_result(retrieved: Retrieved, generation: dict, seed: int) -> dict:
    """``/v1/rag``'s answer from a finished generation, with what generated it."""
    timings = dict(generation.get("timings") or {})
    timings["retrieval_ms"] = retrieved.retrieval_ms
    out = {
        "answer": generation.get("text"),
        "sources": retrieved.cited(),
        "shard_id": generation.get("shard_id"),
        "model": generation.get("model"),
        "adapter": generation.get("adapter"),
        "seed": seed,
        "finish_reason": generation.get("finish_reason"),
        "usage": generation.get("usage"),
        "timings": timings,
        "shards_failed": retrieved.shards_failed,
    }
    if retrieved.snapshot_hlc is not None:
        out["snapshot_hlc"] = retrieved.snapshot_hlc
    return out


async def rag_stream(retrieved: Retrieved, tokens: AsyncIterator[bytes], seed: int) -> AsyncIterator[bytes]:
    """SSE: first ``{"sources": [...], "seed"}``, then the generation's own events (``{"token"}``
    … ``{"done": true, "model", "adapter", ...}`` … ``[DONE]``) as they come."""
    first = {"sources": retrieved.cited(), "shards_failed": retrieved.shards_failed, "seed": seed}
    if retrieved.snapshot_hlc is not None:
        first["snapshot_hlc"] = retrieved.snapshot_hlc
    yield sse(first)
    async for chunk in tokens:
        yield chunk
