"""Batch API limits and pacing, typed in one place (env prefix ``THEMIS_BATCH_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BatchSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_BATCH_", extra="ignore")

    #: Largest file ``POST /v1/files`` takes (413 above it).
    max_file_bytes: int = Field(16 << 20, ge=1024)
    #: Most request lines one input file may hold (OpenAI's limit).
    max_lines: int = Field(50_000, ge=1)
    #: Lines of one batch in flight at once across the cluster: a batch never takes more of the
    #: engines than this, whatever its size.
    concurrency: int = Field(4, ge=1, le=256)
    #: How often each shard looks for batches it coordinates (new, resumed after a restart).
    poll_interval_s: float = Field(1.0, gt=0)
    #: Budget of one wave of lines (a line still running then is retried in the next wave).
    line_timeout_s: float = Field(600.0, gt=0)
    #: Tries of a line whose shard failed (unreachable, timed out) before it is an error line.
    max_attempts: int = Field(3, ge=1)
