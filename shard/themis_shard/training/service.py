"""Train a domain's LoRA on documents this shard holds and load it (``POST /v1/adapters:train``).

The texts are the ``text_field`` of the collection's documents in this shard's store — never
fetched from peers (federated rounds exchange only the LoRA factors). The adapter is written to
``<weights>/trained/<name>.gguf`` and loaded with the domain's held-out set inside the file, so its
evaluation and gossip announcement say what it is worth on that domain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from ..domains.sets import validation_set
from ..errors import BadRequest, Conflict
from ..llm.artifacts import cache_root
from ..llm.settings import LLMSettings
from ..storage.documents import DocumentStore, StoredDocument
from ..storage.names import COLLECTION_PATTERN
from .forward import GemmaWeights
from .lora import LoraWeights, encode, read_lora_gguf, train, write_lora_gguf
from .persisted import TrainedAdapters

if TYPE_CHECKING:
    from ..llm.runtime import LLMRuntime


def train_cache_dir(llm: LLMSettings) -> Path:
    """Dequantised weights, shared by the shards of one machine (as the converted embedding model is)."""
    base = Path(llm.embedding_cache_dir).expanduser() if llm.embedding_cache_dir else cache_root()
    return base / "train"


class TrainBody(BaseModel):
    """``POST /v1/adapters:train``: any other field is refused by name."""

    model_config = ConfigDict(strict=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    domain: str = Field(min_length=1, max_length=64)
    collection: str = Field(..., json_schema_extra={"pattern": COLLECTION_PATTERN})
    text_field: str = "text"
    steps: int = Field(20, ge=1, le=2000)
    rank: int = Field(8, ge=1, le=64)
    learning_rate: float = Field(3e-3, gt=0, le=1)
    batch: int = Field(4, ge=1, le=64)
    max_tokens: int = Field(48, ge=2, le=512, description="tokens per document trained on (its head)")
    max_documents: int = Field(256, ge=1, le=10_000)
    #: continue from this adapter file (a federated round's average) instead of a fresh LoRA
    start_from: str | None = None
    federation_round: int = Field(0, ge=0)
    load: bool = True
    evaluate: bool | None = None


@dataclass
class Trained:
    path: Path
    samples: int
    losses: list[float]
    lora: LoraWeights


def texts_of(docs: list[StoredDocument], field: str) -> list[str]:
    out = [d.document.get(field) for d in docs]
    return [t for t in out if isinstance(t, str) and t.strip()]


class TrainingService:
    """``runtime()`` is the ready engine (its tokenizer and model file); one training at a time."""

    def __init__(
        self, store: DocumentStore, runtime: Callable[[], LLMRuntime], out_dir: Path, cache_dir: Path
    ) -> None:
        self.store = store
        self._runtime = runtime
        self.out_dir = out_dir
        self.cache_dir = cache_dir
        #: Which trained adapters are loaded, reloaded after a restart.
        self.loaded = TrainedAdapters(out_dir)
        self._weights: GemmaWeights | None = None
        self._busy = asyncio.Lock()

    def weights(self, model_path: Path) -> GemmaWeights:
        if self._weights is None or self._weights_path != model_path:
            self._weights, self._weights_path = GemmaWeights(model_path, self.cache_dir), model_path
        return self._weights

    def local_texts(self, collection: str, field: str, limit: int) -> list[str]:
        self.store.collection(collection)  # 404 collection_not_found
        docs = [d for d in self.store.scan(collection) if isinstance(d, StoredDocument)][:limit]
        return texts_of(docs, field)

    async def train(self, body: TrainBody) -> Trained:
        if self._busy.locked():
            raise Conflict("a training run is already in progress on this shard", code="training_busy")
        async with self._busy:
            texts = self.local_texts(body.collection, body.text_field, body.max_documents)
            if not texts:
                raise BadRequest(
                    f"no document of {body.collection!r} on this shard has a text field {body.text_field!r}",
                    code="no_training_data",
                )
            rt = self._runtime()
            m = rt.model(None)
            start = read_lora_gguf(Path(body.start_from))[0] if body.start_from else None
            return await asyncio.to_thread(self._train_sync, m.native, body, texts, start)

    def _train_sync(self, native, body: TrainBody, texts: list[str], start: LoraWeights | None) -> Trained:
        lora, samples, losses = self._fit(
            native, texts, body.steps, start, body.rank, body.learning_rate, body.batch, body.max_tokens
        )
        path = self.write(body.name, body.domain, lora, samples, body.federation_round)
        return Trained(path, samples, losses, lora)

    def _fit(
        self,
        native,
        texts: list[str],
        steps: int,
        start: LoraWeights | None,
        rank: int,
        lr: float,
        batch: int,
        max_tokens: int,
    ) -> tuple[LoraWeights, int, list[float]]:
        w = self.weights(Path(native.path))
        prefixes = encode(w, native.tokenize, texts, max_tokens)
        res = train(w, prefixes, steps=steps, start=start, rank=rank, alpha=float(rank), lr=lr, batch=batch)
        return res.lora, res.samples, res.losses

    def write(self, name: str, domain: str, lora: LoraWeights, samples: int, federation_round: int) -> Path:
        """``<weights>/trained/<name>.gguf`` with the domain's held-out set inside (its evaluation)."""
        try:
            held_out = validation_set(domain.strip().lower())
        except KeyError:
            held_out = ()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return write_lora_gguf(
            self.out_dir / f"{name}.gguf",
            self.architecture(),
            lora,
            name=name,
            domain=domain,
            training_samples=samples,
            federation_round=federation_round,
            validation=held_out,
        )

    def architecture(self) -> str:
        return self._runtime().model(None).adapters.architecture

    # -- a federated round's participant (training/federation.py) -----------------------------
    async def local_update(
        self,
        texts: list[str],
        steps: int,
        start: LoraWeights | None,
        rank: int,
        lr: float,
        batch: int,
        max_tokens: int,
    ) -> tuple[LoraWeights, int, list[float]]:
        """E local steps from the round's global adapter, nothing written: the factors go to the
        aggregator, the texts never leave."""
        if self._busy.locked():
            raise Conflict("a training run is already in progress on this shard", code="training_busy")
        async with self._busy:
            native = self._runtime().model(None).native
            return await asyncio.to_thread(
                self._fit, native, texts, steps, start, rank, lr, batch, max_tokens
            )
