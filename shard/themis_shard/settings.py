"""Shard settings, typed in one place (pydantic-settings, env prefix ``THEMIS_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .llm.settings import LLMSettings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_", extra="ignore")

    shard_id: str = Field("shard-0", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    data_dir: Path = Path("./data/shard-0")
    #: Cluster plan file (ConfigMap mount in Kubernetes, `.themis/plan.json` locally).
    plan_path: Path | None = None
    #: Largest accepted document (encoded JSON) and request body, in bytes.
    max_document_bytes: int = Field(1 << 20, ge=64)
    max_request_bytes: int = Field(64 << 20, ge=1024)
    max_batch_documents: int = Field(10_000, ge=1)
    max_transaction_operations: int = Field(1_000, ge=1)
    max_search_k: int = Field(1_000, ge=1)
    #: Persist vector indexes after this many changes (and always on clean shutdown).
    vector_persist_every: int = Field(10_000, ge=1)
    use_gpu: bool | None = Field(None, description="None = auto-detect (faiss GPUs / CUDA)")
    llm: LLMSettings = Field(default_factory=LLMSettings)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"
