"""The inference service: the one entry for generations and embeddings, here or on a peer.

It decides where a request runs (``cluster.inference.InferenceRouting``: domain, adapter,
KV-prefix holders, least loaded, failover) and runs this shard's part on the engine
(``local``). It answers with a result, or an async stream of bytes (SSE for one generation,
NDJSON for a batch) that the API layer wraps in an HTTP response; nothing here knows HTTP.

The engine and the cluster come up at different times in a shard's start, so the service reads
each through an accessor when a request needs it: a forwarded ``/internal`` call is served as
soon as the engine is ready, and each refusal (503) is the one the request would meet first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..cluster.routing.inference import InferenceRouting, Routed
from ..documents.service import DocumentService
from ..domains.detector import DomainDetector
from ..errors import BadRequest, ThemisError
from ..llm.generation import Generation
from ..storage.names import parse_urn
from . import openai_local
from .domain_hint import hint_domain
from .local import (
    Disconnected,
    InferRequest,
    infer_result,
    infer_stream,
    submit,
    wait_done,
)
from .openai_types import ChatBody, CompletionBody, EmbeddingsBody, _Common

if TYPE_CHECKING:  # the engine (llama.cpp) is imported only by shards that run one
    from ..llm.runtime import LLMRuntime

#: Largest sub-batch one engine call takes (the engine's own batch limit).
ENGINE_BATCH_LIMIT = 256

#: A result (JSON-ready) or a stream of already framed bytes.
Answer = dict | AsyncIterator[bytes]


@dataclass(frozen=True)
class TextEmbeddings:
    embeddings: list[list[float]]
    dimension: int
    model: str


def engine_chunks(n: int, limit: int = ENGINE_BATCH_LIMIT) -> list[range]:
    """Index ranges of the sub-batches the engine takes one after another."""
    return [range(start, min(n, start + limit)) for start in range(0, n, limit)]


class InferenceService:
    """``runtime()`` returns the ready engine or raises 503; ``routing()`` and ``documents()``
    return the cluster's routing and the document service (raising 503 while the shard starts)."""

    def __init__(
        self,
        runtime: Callable[[], LLMRuntime],
        routing: Callable[[], InferenceRouting],
        documents: Callable[[], DocumentService],
        shard_id: str,
        domains: Callable[[], DomainDetector] | None = None,
    ) -> None:
        self.runtime = runtime
        self._domains = domains
        self._routing = routing
        self._documents = documents
        self.shard_id = shard_id

    # -- one generation ----------------------------------------------------------------------
    def generate(self, req: InferRequest, *, special: bool = False) -> Generation:
        """Queue one generation on this shard's engine (the OpenAI routes' entry too)."""
        return submit(self.runtime(), req, special=special)

    async def infer_here(
        self, req: InferRequest, disconnected: Disconnected, *, every_token: bool = False
    ) -> Answer:
        """``every_token``: a peer's ``/internal`` stream (a frame per token id, for resuming)."""
        if req.resume is not None and not req.stream:
            raise BadRequest("resume continues a stream: stream must be true", code="invalid_request")
        rt = self.runtime()
        gen = submit(rt, req)
        if req.stream:
            return infer_stream(gen, self.shard_id, every_token=every_token)
        return infer_result(await wait_done(gen, disconnected), gen, self.shard_id)

    async def infer(self, req: InferRequest, disconnected: Disconnected) -> Routed:
        """Here unless, in a cluster, the request has a domain (given or detected) or another shard
        holds a longer KV prefix of its prompt."""
        routing = self._routing()
        hint = await hint_domain(self._domains() if self._domains else None, routing, req)
        req = hint.request
        holder = None if routing.routes(req.domain) else routing.prefix_holder(req.prompt)
        if not routing.routes(req.domain) and holder is None:
            return Routed(self.shard_id, hint.annotate(await self.infer_here(req, disconnected)))

        async def here(body: dict) -> Answer:  # the first try, or a stream's continuation
            return await self.infer_here(InferRequest.model_validate(body), disconnected)

        routed = await routing.infer(req.to_json(), here, holder=holder)
        return Routed(routed.shard, hint.annotate(routed.answer))

    # -- OpenAI-compatible ---------------------------------------------------------------------
    def openai_domain(self, body: _Common) -> str | None:
        """The domain a request is routed by: ``domain``, else that of the adapter ``model`` or
        ``adapter`` names (the plan's placement), else ``model`` itself when it names a domain."""
        if body.domain:
            return body.domain
        placed = dict(self._routing().placed_adapters())
        if body.adapter in placed:
            return placed[body.adapter]
        name = body.model
        if not name or name == self._base_alias():
            return None
        if name in placed:
            return placed[name]
        return name if name in placed.values() else None

    def _base_alias(self) -> str | None:
        try:
            return self.runtime().settings.model_alias
        except ThemisError:
            return None

    async def _openai(self, path: str, body: _Common, key: str, local, here) -> Routed:
        """``here(raw)``: the request as a peer sends it, run on this shard (a continuation)."""
        raw = body.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return await self._routing().forward(
            path,
            raw,
            domain=self.openai_domain(body),
            key=key,
            local=local,
            resumable=here if openai_local.resumable(body) else None,
        )

    async def chat(self, body: ChatBody, disconnected: Disconnected) -> Routed:
        """``/v1/chat/completions`` where the router sends it (the rendered prompt is the key the
        KV-prefix holders are looked up by)."""
        try:
            key = self.runtime().apply_chat_template(None, [m.as_template() for m in body.messages])
        except ThemisError:
            key = "\n".join(str(m.content or "") for m in body.messages)

        async def here(raw: dict) -> Answer:
            return await self.chat_here(ChatBody.model_validate(raw), disconnected)

        return await self._openai(
            "/internal/openai/chat/completions", body, key, lambda: self.chat_here(body, disconnected), here
        )

    async def chat_here(self, body: ChatBody, disconnected: Disconnected, *, every_token=False) -> Answer:
        return await openai_local.chat(
            self.runtime(), body, disconnected, self.shard_id, every_token=every_token
        )

    async def completions(self, body: CompletionBody, disconnected: Disconnected) -> Routed:
        key = body.prompt if isinstance(body.prompt, str) else ""

        async def here(raw: dict) -> Answer:
            return await self.completions_here(CompletionBody.model_validate(raw), disconnected)

        return await self._openai(
            "/internal/openai/completions", body, key, lambda: self.completions_here(body, disconnected), here
        )

    async def completions_here(
        self, body: CompletionBody, disconnected: Disconnected, *, every_token=False
    ) -> Answer:
        return await openai_local.completions(
            self.runtime(), body, disconnected, self.shard_id, every_token=every_token
        )

    async def embeddings(self, body: EmbeddingsBody) -> dict:
        raw = body.model_dump(mode="json", exclude_unset=True)
        routed = await self._routing().forward(
            "/internal/openai/embeddings", raw, domain=None, key="", local=lambda: self.embeddings_here(body)
        )
        return routed.answer

    async def embeddings_here(self, body: EmbeddingsBody) -> dict:
        return await openai_local.embeddings(self.runtime(), body)

    def models(self) -> list[dict]:
        """The loaded models, then every adapter placed in the cluster or loaded here (vLLM lists
        LoRA adapters as models whose ``parent`` is the base model)."""
        rt = self.runtime()
        out = [
            {
                "id": m["id"],
                "object": "model",
                "created": m["created"],
                "owned_by": "themis",
                "root": m["id"],
                "parent": None,
                "fingerprint": m["fingerprint"],
            }
            for m in rt.describe()
        ]
        base = rt.settings.model_alias
        created = out[0]["created"] if out else 0
        seen = {m["id"] for m in out}
        adapters = [(a.name, a.domain) for m in rt.models.values() for a in m.adapters.list()]
        for name, domain in adapters + self._routing().placed_adapters():
            if name in seen:
                continue
            seen.add(name)
            out.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "themis",
                    "root": name,
                    "parent": base,
                    "domain": domain,
                }
            )
        return out

    # -- batches -----------------------------------------------------------------------------
    async def infer_batch_here(self, items: list[InferRequest], disconnected: Disconnected) -> list[dict]:
        """This shard's part of a batch: each engine-sized chunk runs concurrently in the engine;
        results in request order, a failed item as ``{"error": ...}`` in its place."""

        async def one(rt: LLMRuntime, item: InferRequest) -> dict:
            try:
                if item.stream:
                    raise BadRequest("stream is not supported inside a batch", code="invalid_request")
                gen = submit(rt, item)
                return infer_result(await wait_done(gen, disconnected), gen, self.shard_id)
            except ThemisError as exc:
                return {"error": {"code": exc.code, "message": exc.message}}

        out: list[dict] = []
        for chunk in engine_chunks(len(items)):
            rt = self.runtime()  # an engine that is not ready refuses the whole batch
            out += await asyncio.gather(*(one(rt, items[i]) for i in chunk))
        return out

    async def infer_batch(
        self, items: list[InferRequest], *, stream: bool, timeout_s: float, disconnected: Disconnected
    ) -> list[dict] | AsyncIterator[bytes]:
        """Scatter-gather over the cluster (results in request order), or NDJSON lines as items
        complete when ``stream``; a lone shard runs a plain batch here."""
        routing = self._routing()
        wire = [item.to_json() for item in items]

        async def local(sub: list[dict]) -> list[dict]:
            return await self.infer_batch_here([InferRequest(**d) for d in sub], disconnected)

        if stream:
            return routing.stream_batch(wire, local, timeout_s)
        if not routing.clustered:
            return await self.infer_batch_here(items, disconnected)
        return await routing.infer_batch(wire, local, timeout_s)

    # -- embeddings --------------------------------------------------------------------------
    async def embed_texts(self, texts: list[str] | None) -> TextEmbeddings:
        rt = self.runtime()
        if texts is None:
            raise BadRequest("texts is required", code="invalid_request")
        vectors = await rt.embed(texts)
        return TextEmbeddings(vectors, rt.embedding_dimension, rt.embedder.name)

    async def embed_urns(self, urns: list[str]) -> list[list[float]]:
        """Each document embedded on a shard that holds it; results in URN order."""
        routing = self._routing()
        docs = self._documents()
        return await routing.embed_urns(urns, docs.embed_stored)

    async def embed_urns_here(self, urns: list[str]) -> list[list[float]]:
        return await self._documents().embed_stored([parse_urn(u) for u in urns])

    async def embed_urns_here_rows(self, urns: list[str]) -> np.ndarray:
        """:meth:`embed_urns_here` as float32 rows, for a peer that asked for them so."""
        return await self._documents().embed_stored_rows([parse_urn(u) for u in urns])
