"""Shard settings, typed in one place (pydantic-settings, env prefix ``THEMIS_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from themis_core.logs import AccessLogSettings

from .auth.settings import AuthSettings
from .batches.settings import BatchSettings
from .domains.settings import DomainSettings
from .gc_policy import GcSettings
from .llm.settings import LLMSettings
from .otel import OtelSettings
from .sched_policy import SchedSettings
from .tenants.settings import TenantSettings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_", extra="ignore")

    shard_id: str = Field("shard-0", pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    data_dir: Path = Path("./data/shard-0")
    #: Model and adapter files fetched from http(s) sources live here (the weights PVC in
    #: Kubernetes); None = ``<data_dir>/weights``.
    weights_dir: Path | None = None
    #: Where a shard that cannot start writes why (Kubernetes: /dev/termination-log, shown in
    #: the pod's lastState and read by the operator); None = only the log says it.
    termination_message_path: Path | None = None
    #: Cluster plan file (ConfigMap mount in Kubernetes, `.themis/plan.json` locally).
    plan_path: Path | None = None
    #: Port of the shard-to-shard listener (``/internal/...``). With TLS it demands a client
    #: certificate from the cluster CA; without TLS it may be None (internal routes on ``port``).
    internal_port: int | None = Field(None, ge=0, le=65535)
    #: TLS material (PEM files, e.g. the cluster Secret's mount). All three or none.
    tls_ca_path: Path | None = None
    tls_cert_path: Path | None = None
    tls_key_path: Path | None = None
    #: How often renewed certificate files are looked for (and reloaded without a restart).
    tls_reload_interval_s: float = Field(30.0, gt=0)
    #: Largest accepted document (encoded JSON) and request body, in bytes.
    max_document_bytes: int = Field(1 << 20, ge=64)
    #: Deepest accepted document nesting: below what the API can serialise back (pydantic ~250).
    max_document_depth: int = Field(128, ge=1, le=200)
    max_request_bytes: int = Field(64 << 20, ge=1024)
    max_batch_documents: int = Field(10_000, ge=1)
    max_transaction_operations: int = Field(1_000, ge=1)
    max_search_k: int = Field(1_000, ge=1)
    #: Superseded versions kept per document (``storage/history.py``) so an answer tied to
    #: document versions can be replayed (``POST /v1/rag:replay``); older ones are compacted in
    #: the write that supersedes them. 0 keeps none (replay then answers 410 version_compacted).
    document_history_versions: int = Field(8, ge=0, le=1_000)
    #: Largest scatter-gather inference batch (split into engine calls of at most 256).
    max_batch_requests: int = Field(1_024, ge=1)
    #: Persist vector indexes after this many changes (and always on clean shutdown).
    vector_persist_every: int = Field(10_000, ge=1)
    use_gpu: bool | None = Field(None, description="None = auto-detect (faiss GPUs / CUDA)")
    #: ``DEST/ID`` (a directory or ``s3://bucket/prefix``, then the backup id): on first start,
    #: restore this shard's part of that backup into the empty data directory (``backup/restore.py``).
    restore_from: str | None = None
    llm: LLMSettings = Field(default_factory=LLMSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    tenants: TenantSettings = Field(default_factory=TenantSettings)
    domains: DomainSettings = Field(default_factory=DomainSettings)
    otel: OtelSettings = Field(default_factory=OtelSettings)
    access_log: AccessLogSettings = Field(default_factory=AccessLogSettings)
    batches: BatchSettings = Field(default_factory=BatchSettings)
    gc: GcSettings = Field(default_factory=GcSettings)
    sched: SchedSettings = Field(default_factory=SchedSettings)

    @model_validator(mode="after")
    def _tls_consistent(self) -> Settings:
        tls = (self.tls_ca_path, self.tls_cert_path, self.tls_key_path)
        if any(tls) and not all(tls):
            raise ValueError("set THEMIS_TLS_CA_PATH, THEMIS_TLS_CERT_PATH and THEMIS_TLS_KEY_PATH together")
        if self.tls and self.internal_port is None:
            raise ValueError("with TLS, THEMIS_INTERNAL_PORT must name the mTLS shard-to-shard port")
        return self

    @property
    def weights_path(self) -> Path:
        return self.weights_dir if self.weights_dir is not None else self.data_dir / "weights"

    @property
    def tls(self) -> bool:
        return self.tls_ca_path is not None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"
