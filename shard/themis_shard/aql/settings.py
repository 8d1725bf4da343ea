"""AQL limits, typed in one place (env prefix ``THEMIS_AQL_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AqlSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_AQL_", extra="ignore")

    #: Wall-clock budget of one query (checked between rows and around remote calls).
    timeout_s: float = Field(30.0, gt=0)
    #: Most rows a query may return.
    max_result_rows: int = Field(100_000, ge=1)
    #: Most rows any intermediate step (a join, a scan) may hold.
    max_rows: int = Field(1_000_000, ge=1)
    #: Items per /v1/infer:batch call (the API's own limit is 256).
    infer_batch: int = Field(256, ge=1, le=256)
    #: Documents RAG retrieves when the query gives no TOP.
    rag_top: int = Field(5, ge=1)
    #: Characters of each retrieved document that go into the RAG prompt.
    rag_context_chars: int = Field(1000, ge=16)
    #: RAG answers (``/v1/rag``, AQL RAG) that do not say decode with speculation from the
    #: shard's draft source: with prompt lookup the answer's quotes of its passages come several
    #: tokens per step, and the answer is the same on every run (see llm/speculative/).
    rag_speculative: bool = True
