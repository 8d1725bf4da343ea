"""Collection declarations: how a collection's documents are embedded and indexed."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

IndexKind = Literal["flat", "ivf", "hnsw"]
Metric = Literal["cosine", "l2", "ip"]


class CollectionSettings(BaseModel):
    """How a collection is embedded and indexed (the body of ``PUT /v1/collections/{c}``).
    ``dimension`` None: no vector index (documents only)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    dimension: int | None = Field(None, ge=1, le=65536)
    index: IndexKind = "flat"
    metric: Metric = "cosine"
    #: Document field whose text is embedded on write (needs the shard's embedding model).
    embed_field: str | None = Field(None, min_length=1, max_length=256)
    #: IVF: lists (None = chosen from the size at training time) and lists probed per query.
    nlist: int | None = Field(None, ge=1, le=65536)
    nprobe: int = Field(16, ge=1, le=65536)
    #: HNSW: graph degree and search breadth.
    hnsw_m: int = Field(32, ge=4, le=256)
    hnsw_ef_search: int = Field(64, ge=1, le=4096)


class CollectionConfig(CollectionSettings):
    """A named collection's settings, as stored and replicated."""

    name: str

    @property
    def indexed(self) -> bool:
        return self.dimension is not None
