"""Node-wide tenant sharing settings (env prefix ``THEMIS_TENANTS_``); the tenants themselves and
their limits are lines of the keys file (``policy``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class TenantSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_TENANTS_", extra="ignore")

    #: Inference requests this node runs at once across tenants; more wait their tenant's fair
    #: turn (weighted fair queueing). 0: no cap here, the engine's queue orders them (priority, FIFO).
    max_inflight: int = Field(0, ge=0)
    #: Requests one tenant may have waiting for a slot; more are 429 (limit ``max_waiting``).
    max_waiting: int = Field(1024, ge=1)
