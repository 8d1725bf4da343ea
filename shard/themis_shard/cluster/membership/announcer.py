"""What this shard tells the cluster through gossip: its LLM load (the paper's ShardStats
additions) and an AdapterCapabilityAnnouncement per evaluated LoRA adapter (§IV-A).

``announcements_to_publish`` is pure: from the adapters resident now and the announcements
already published, it returns the new records — a fresh one when an adapter's evaluation
changed or its last announcement is half-way to the TTL, and a withdrawal (``active=False``)
for an adapter that was unloaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from .gossip_state import AdapterCapabilityAnnouncement, ShardLoad


@dataclass(frozen=True)
class ResidentAdapter:
    name: str
    domain: str | None
    accuracy_delta: float | None
    p99_delta_ms: float | None
    evaluated_at: float | None
    training_samples: int = 0
    federation_round: int = 0


def announcements_to_publish(
    shard_id: str,
    resident: Iterable[ResidentAdapter],
    published: Mapping[str, AdapterCapabilityAnnouncement],
    now_wall: float,
    ttl_s: float,
) -> list[AdapterCapabilityAnnouncement]:
    out: list[AdapterCapabilityAnnouncement] = []
    live: set[str] = set()
    for a in resident:
        if not a.domain or a.accuracy_delta is None or a.evaluated_at is None:
            continue  # nothing to announce until the evaluation hook has measured it
        live.add(a.name)
        old = published.get(a.name)
        fresh = (
            old is None
            or not old.active
            or old.domain != a.domain
            or old.federation_round != a.federation_round
            or abs(old.accuracy_delta - a.accuracy_delta) > 1e-9
            or now_wall - old.announced_at > ttl_s / 2
        )
        if fresh:
            out.append(
                AdapterCapabilityAnnouncement(
                    shard_id=shard_id,
                    adapter_id=a.name,
                    domain=a.domain,
                    accuracy_delta=max(-1.0, min(1.0, a.accuracy_delta)),
                    performance_delta_p99_ms=float(a.p99_delta_ms or 0.0),
                    training_samples=a.training_samples,
                    federation_round=a.federation_round,
                    announced_at=max(now_wall, (old.announced_at + 1e-3) if old else 0.0),
                )
            )
    for name, old in published.items():
        if name not in live and old.active:
            out.append(
                old.model_copy(
                    update={"active": False, "announced_at": max(now_wall, old.announced_at + 1e-3)}
                )
            )
    return out


def resident_adapters(runtime) -> list[ResidentAdapter]:
    """The LoRA adapters loaded in an ``LLMRuntime`` (any model), with their evaluations."""
    found: list[ResidentAdapter] = []
    for model in getattr(runtime, "models", {}).values():
        manager = getattr(model, "adapters", None)
        if manager is None:
            continue
        for info in manager.list():
            ev = info.evaluation or {}
            meta = info.extra.get("meta", {}) if isinstance(getattr(info, "extra", None), dict) else {}
            found.append(
                ResidentAdapter(
                    name=info.name,
                    domain=info.domain,
                    accuracy_delta=ev.get("accuracy_delta"),
                    p99_delta_ms=ev.get("performance_delta_p99_ms"),
                    evaluated_at=ev.get("evaluated_at"),
                    # what a trained adapter's file says it was trained on (0: not trained here)
                    training_samples=int(meta.get("themis.training_samples", 0)),
                    federation_round=int(meta.get("themis.federation_round", 0)),
                )
            )
    return found


class LoadSampler:
    """ShardLoad from the engine's own metrics: pending requests now, and the mean queue time
    over the last sampling interval (delta of the queue-time histogram's sum and count)."""

    NAMES = (
        "themis_pending_llm_requests",
        "themis_llm_queue_seconds_sum",
        "themis_llm_queue_seconds_count",
        "themis_active_lora_adapters",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        # Only the collectors of these four series: collecting the whole registry every gossip
        # round (HTTP and peer-call histograms included) was a third of a busy shard's CPU.
        self.registry = registry.restricted_registry(self.NAMES)
        self._last = (0.0, 0.0)
        self._avg_ms = 0.0

    def _totals(self) -> dict[str, float]:
        totals = dict.fromkeys(self.NAMES, 0.0)
        for metric in self.registry.collect():
            for sample in metric.samples:
                if sample.name in totals:
                    totals[sample.name] += sample.value
        return totals

    def sample(self) -> ShardLoad:
        totals = self._totals()
        pending = totals["themis_pending_llm_requests"]
        s, c = totals["themis_llm_queue_seconds_sum"], totals["themis_llm_queue_seconds_count"]
        ds, dc = s - self._last[0], c - self._last[1]
        self._last = (s, c)
        if dc > 0:
            self._avg_ms = 1000 * ds / dc
        adapters = totals["themis_active_lora_adapters"]
        return ShardLoad(
            pending_llm_requests=int(pending),
            avg_llm_queue_ms=max(0.0, self._avg_ms),
            active_lora_adapters=int(adapters),
        )
