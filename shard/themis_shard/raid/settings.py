"""Typed RAID settings (env prefix ``THEMIS_RAID_``); off by default."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Units must be a whole number of 64-byte lines: SIMD XOR and Reed–Solomon (even lengths) need it.
UNIT_ALIGN = 64


class RaidSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_RAID_", extra="ignore")

    #: On: the shard keeps its units of the model, assembles + verifies the model file before the
    #: LLM engine loads it, and repairs missing/corrupt units from its peers.
    enabled: bool = False
    #: The weights volume; None = ``<data_dir>/weights``.
    weights_dir: Path | None = None
    #: Stripe unit size in bytes. 4 MiB: one HTTP request per unit costs more than the XOR, so
    #: bigger units rebuild faster over loopback (measured: 1 MiB ≈ 65 MB/s, 4 MiB ≈ 100 MB/s on
    #: 2 cores); the XOR itself works in 1 MiB blocks whatever the unit size. Must stay below
    #: THEMIS_MAX_REQUEST_BYTES (64 MiB), the largest unit a peer accepts.
    unit_size: int = Field(4 << 20, ge=UNIT_ALIGN, le=1 << 30)
    #: RAID6 geometry k data + m parity units per stripe; 0 = k = shards − m.
    data_units: int = Field(0, ge=0, le=1024)
    parity_units: int = Field(2, ge=1, le=64)
    #: RAID1 copies of every unit; 0 = the plan's copies.
    mirrors: int = Field(0, ge=0, le=16)
    #: What to ingest when the cluster holds no model yet: "bundled", a GGUF path or an http(s) URL;
    #: "" = the LLM's ``model_path``.
    source: str = ""
    #: Rebuild/assembly bandwidth cap in MB/s (0 = unlimited) so repairs leave room for serving.
    rebuild_rate_limit_mb_s: float = Field(0.0, ge=0)
    #: Stripes fetched/repaired concurrently.
    parallel_stripes: int = Field(4, ge=1, le=64)
    #: Background crc scrub + repair interval (0 = only at start and on demand).
    scrub_interval_s: float = Field(300.0, ge=0)
    #: Where parity (XOR, Reed–Solomon) is computed: "auto" = on the GPU with cupy when a CUDA
    #: device is usable, else the CPU; "cpu" = always the CPU. The bytes are the same either way.
    parity_device: Literal["auto", "cpu"] = "auto"
    #: How long start-up waits for enough peers to rebuild from before giving up.
    startup_timeout_s: float = Field(600.0, gt=0)

    @field_validator("unit_size")
    @classmethod
    def _aligned(cls, v: int) -> int:
        if v % UNIT_ALIGN:
            raise ValueError(f"unit_size {v} is not a multiple of {UNIT_ALIGN} bytes")
        return v

    def weights_path(self, data_dir: Path) -> Path:
        return self.weights_dir if self.weights_dir is not None else data_dir / "weights"
