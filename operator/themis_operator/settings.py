"""Operator settings (env prefix ``THEMIS_OPERATOR_``), typed in one place."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .images import default_shard_image


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_OPERATOR_", extra="ignore")

    #: How often the status timer asks every shard for ``/v1/cluster/status``.
    status_interval_s: float = Field(30.0, gt=0)
    #: Per-shard probe timeout; unreachable shards cost at most this much per timer tick.
    probe_timeout_s: float = Field(3.0, gt=0)
    #: Redirect probes (operator outside the cluster, port-forwards, tests):
    #: e.g. ``http://127.0.0.1:9000/{shard_id}``; fields: shard_id, cluster, namespace, index.
    shard_url_template: str | None = None
    #: How long a LoRAAdapter's federated rounds may take on shard 0 (CPU training: minutes).
    federation_timeout_s: float = Field(3600.0, gt=0)
    #: Port of the operator's own /metrics (reconcile counts, errors, durations); 0 = off
    #: (the chart and examples/operator.yaml turn it on).
    metrics_port: int = Field(0, ge=0, le=65535)
    #: The shard image of clusters whose spec sets no ``image`` (a registry mirror, say);
    #: unset: ``ghcr.io/themisdb/themis-shard:<this operator's version>``.
    shard_image: str | None = None

    @property
    def default_shard_image(self) -> str:
        return self.shard_image or default_shard_image()
