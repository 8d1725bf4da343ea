"""Status shapes: conditions, phases and the per-shard summary (Kubernetes conventions)."""

from __future__ import annotations

import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict
from themis_core.status_model import AdapterCapability

ConditionType = Literal["Ready", "Progressing", "Degraded"]
Phase = Literal["Pending", "Creating", "Running", "Scaling", "Degraded"]


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class Condition(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    lastTransitionTime: str = ""
    observedGeneration: int | None = None


def merge_conditions(
    previous: list[dict] | None, updates: list[Condition], *, now: str | None = None
) -> list[dict]:
    """New conditions, keeping ``lastTransitionTime`` when a condition's status did not change."""
    now = now or now_iso()
    old = {c.get("type"): c for c in previous or []}
    merged = {k: v for k, v in old.items()}
    for cond in updates:
        prior = old.get(cond.type)
        since = prior.get("lastTransitionTime") if prior and prior.get("status") == cond.status else None
        merged[cond.type] = cond.model_copy(update={"lastTransitionTime": since or now}).model_dump(
            exclude_none=True
        )
    order = {"Ready": 0, "Progressing": 1, "Degraded": 2}
    return sorted(merged.values(), key=lambda c: (order.get(c["type"], 9), c["type"]))


def condition_status(conditions: list[dict] | None, type_: str) -> str | None:
    for c in conditions or []:
        if c.get("type") == type_:
            return c.get("status")
    return None


class AdapterReport(BaseModel):
    """One adapter on one shard: what the shard says of the plan's placement (``plan_adapters``),
    with the quality it announced through gossip (``capabilities``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    state: Literal["pending", "loading", "loaded", "failed", "unknown"] = "unknown"
    #: Why a load failed (the shard's own words: sha256 mismatch, download error, ...).
    message: str = ""
    accuracy_delta: float | None = None
    p99_delta_ms: float | None = None


class ShardReport(BaseModel):
    """One shard's answer to ``GET /v1/cluster/status`` (or its absence)."""

    model_config = ConfigDict(frozen=True)

    id: str
    url: str
    role: Literal["member", "leaving"] = "member"
    reachable: bool = False
    state: str = "unknown"
    ringVersion: int | None = None
    migration: str = "unknown"
    #: The ring version the migration state refers to (a stale "drained" must not count).
    migrationRingVersion: int | None = None
    #: The plan's adapters as this shard reports them (loaded, or failed with the reason). Kept
    #: in the stored status, so a reconcile between probes still knows them.
    adapters: tuple[AdapterReport, ...] = ()
    #: Gossiped adapter announcements (cluster-wide), as /v1/cluster/status returns them.
    capabilities: tuple[AdapterCapability, ...] = ()
    #: Hinted writes this shard still holds for its peers (a rolling upgrade waits for 0).
    hintsPending: int = 0

    def summary(self) -> dict:
        return self.model_dump(exclude={"capabilities"}, exclude_none=True)
