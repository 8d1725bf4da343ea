"""Domain detection settings (``THEMIS_DOMAINS_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DomainSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_DOMAINS_", extra="ignore")

    detect: bool = Field(True, description="classify requests that name no domain")
    min_similarity: float = Field(
        0.25, ge=-1, le=1, description="below this cosine similarity to its centroid a prompt is 'general'"
    )
    min_margin: float = Field(
        0.05, ge=0, le=2, description="below this lead over the runner-up centroid a prompt is 'general'"
    )
    max_tokens: int = Field(64, ge=1, le=4096, description="prompt tokens looked at (its head)")
