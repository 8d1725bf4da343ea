"""The shard's domain detector: the pure classifier of ``detect`` over this shard's embedding model.

Built lazily on the first request that needs it (the embedding model loads after the node is
built): the embedding GGUF's ``token_embd`` table is read once (gguf, memory-mapped, f16 → f32)
and the centroids are computed from the shipped validation sets. Exports
``themis_domain_detected_total{domain}`` and ``themis_domain_detection_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram

from .detect import GENERAL, Centroids, Detection, build_centroids, classify, mean_token_vector
from .sets import shipped_domains, validation_set
from .settings import DomainSettings

if TYPE_CHECKING:
    from ..llm.embeddings import Embedder

log = logging.getLogger(__name__)


def read_token_table(path: Path) -> np.ndarray:
    """The (vocab, d) input token embeddings of a GGUF embedding model, as float32."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        if t.name == "token_embd.weight":
            if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                return gguf.dequantize(t.data, t.tensor_type).astype(np.float32)
            return np.asarray(t.data, dtype=np.float32)
    raise ValueError(f"{path} has no token_embd.weight")


class DomainModel:
    """Tokenizer + token table + centroids: classifies one text synchronously."""

    def __init__(
        self, tokenize: Callable[[str], list[int]], table: np.ndarray, settings: DomainSettings
    ) -> None:
        self._tokenize = tokenize
        self.table = table
        self.settings = settings
        examples = {
            d: [self.vector(p + c) for p, c in validation_set(d)] for d in (*shipped_domains(), GENERAL)
        }
        self.centroids: Centroids = build_centroids(examples)

    def vector(self, text: str) -> np.ndarray:
        toks = self._tokenize(text)[1:-1]  # without [CLS] … [SEP]
        return mean_token_vector(self.table, toks[: self.settings.max_tokens])

    def classify(self, text: str, allowed: frozenset[str] | None = None) -> Detection:
        s = self.settings
        return classify(
            self.vector(text),
            self.centroids,
            min_similarity=s.min_similarity,
            min_margin=s.min_margin,
            allowed=allowed,
        )


class DomainDetector:
    """``embedder()`` returns this shard's embedding model (None: detection is off)."""

    def __init__(
        self, settings: DomainSettings, embedder: Callable[[], Embedder | None], registry: CollectorRegistry
    ) -> None:
        self.settings = settings
        self._embedder = embedder
        self._model: DomainModel | None = None
        self._lock = asyncio.Lock()
        self.detected = Counter(
            "themis_domain_detected",
            "Requests without a domain, by the domain detected",
            ["domain"],
            registry=registry,
        )
        self.seconds = Histogram(
            "themis_domain_detection_seconds",
            "Time to detect the domain of one request",
            registry=registry,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05),
        )

    async def model(self) -> DomainModel | None:
        if self._model is None and self.settings.detect:
            async with self._lock:
                emb = self._embedder()
                if self._model is None and emb is not None:
                    table = await asyncio.to_thread(read_token_table, emb.path)
                    self._model = await asyncio.to_thread(
                        DomainModel, emb.model.tokenize, table, self.settings
                    )
                    log.info("domain detection ready: %s", ", ".join(self._model.centroids.names))
        return self._model

    async def detect(self, prompt: str, allowed: Collection[str] | None = None) -> Detection | None:
        """The domain of ``prompt`` (``general`` when none is confident), or None when detection
        is off or this shard has no embedding model."""
        m = await self.model()
        if m is None:
            return None
        t0 = time.perf_counter()
        out = m.classify(prompt, None if allowed is None else frozenset(allowed))
        self.seconds.observe(time.perf_counter() - t0)
        self.detected.labels(domain=out.domain).inc()
        return out
