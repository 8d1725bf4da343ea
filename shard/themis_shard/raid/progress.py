"""Progress of RAID's long operations and their metrics (what /v1/raid/status and /metrics show)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class Progress:
    """The current (or last) long operation, as ``/v1/raid/status`` reports it."""

    op: str = "idle"
    state: str = "idle"  # running, done, failed
    stripes_total: int = 0
    stripes_done: int = 0
    bytes_transferred: int = 0
    units_repaired: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        end = self.finished_at or time.time()
        elapsed = max(end - self.started_at, 1e-9) if self.started_at else 0.0
        d["elapsed_s"] = round(elapsed, 3)
        d["progress"] = round(self.stripes_done / self.stripes_total, 4) if self.stripes_total else 0.0
        d["rate_bytes_per_s"] = round(self.bytes_transferred / elapsed) if elapsed else 0
        return d


class RaidMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.units = Gauge(
            "themis_raid_units", "This shard's model units by state at the last scan", ["state"], registry=r
        )
        self.repaired = Counter(
            "themis_raid_units_repaired_total", "Units rebuilt from parity and written back", registry=r
        )
        self.corrupt = Counter(
            "themis_raid_corrupt_units_total", "Units found with a crc32 or length mismatch", registry=r
        )
        self.transferred = Counter(
            "themis_raid_transfer_bytes_total", "Unit bytes fetched from or sent to peers", ["op"], registry=r
        )
        self.progress = Gauge(
            "themis_raid_operation_progress_ratio",
            "Stripes done / total of the running operation",
            ["op"],
            registry=r,
        )
        self.rate = Gauge(
            "themis_raid_transfer_rate_bytes_per_second",
            "Throughput of the last or running rebuild/assembly",
            ["op"],
            registry=r,
        )
        self.duration = Histogram(
            "themis_raid_operation_seconds",
            "Ingest/rebuild/assembly/scrub durations",
            ["op"],
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600),
            registry=r,
        )
        self.lost = Gauge(
            "themis_raid_unrecoverable_stripes",
            "Stripes with more lost units than the layout tolerates",
            registry=r,
        )


class RateLimit:
    """Sleeps so that transferred bytes stay under ``mb_s`` (0 = unlimited)."""

    def __init__(self, mb_s: float) -> None:
        self.rate = mb_s * 1e6
        self.start = time.monotonic()
        self.bytes = 0

    async def account(self, n: int) -> None:
        self.bytes += n
        if self.rate:
            ahead = self.bytes / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                await asyncio.sleep(ahead)
