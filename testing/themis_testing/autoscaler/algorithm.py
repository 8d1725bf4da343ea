"""The HorizontalPodAutoscaler's arithmetic (autoscaling/v2), as kube-controller-manager does it.

Pure functions over plain values, so each rule can be checked alone:

* per metric (``Pods`` metrics with an ``AverageValue`` target): the usage ratio over the pods
  that report, the 10 % tolerance, and missing pods counted as 0 when scaling out and as the
  target when scaling in (replica_calculator.go ``calcPlainMetricReplicas``);
* across metrics: the largest recommendation, and no scale-in while any metric is missing;
* behavior: stabilisation windows (the lowest recommendation of the scale-up window, the highest
  of the scale-down window) and rate-limit policies per period (``selectPolicy`` Max/Min/Disabled),
  bounded by minReplicas and maxReplicas (horizontal.go ``normalizeDesiredReplicasWithBehaviors``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TOLERANCE = 0.1


@dataclass(frozen=True)
class Policy:
    kind: str  # "Pods" or "Percent"
    value: int
    period_s: int


@dataclass(frozen=True)
class Rules:
    window_s: int
    policies: tuple[Policy, ...] = ()
    select: str = "Max"  # "Max", "Min" or "Disabled"


# Kubernetes' defaults when an HPA gives no behavior.
DEFAULT_UP = Rules(0, (Policy("Percent", 100, 15), Policy("Pods", 4, 15)))
DEFAULT_DOWN = Rules(300, (Policy("Percent", 100, 15),))


@dataclass(frozen=True)
class Behavior:
    up: Rules = DEFAULT_UP
    down: Rules = DEFAULT_DOWN


@dataclass(frozen=True)
class Event:
    """A past scale change: when, and by how many replicas (positive: out, negative: in)."""

    at: float
    change: int


@dataclass
class History:
    """What the controller remembers per HPA between syncs."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def replicas_for_metric(current: int, values: Mapping[str, float], pods: Sequence[str], target: float) -> int:
    """Replicas one ``Pods``/``AverageValue`` metric asks for.

    ``values`` holds the metric per pod that reported it; ``pods`` are the pods the target's
    selector matches. Raises ``ValueError`` when no pod reports (the metric is missing)."""
    if target <= 0:
        raise ValueError(f"target {target} must be positive")
    reported = {p: v for p, v in values.items() if p in pods} or dict(values)
    if not reported:
        raise ValueError("no pod reports the metric")
    ratio = sum(reported.values()) / len(reported) / target
    missing = [p for p in pods if p not in reported]
    if not missing:
        if abs(1.0 - ratio) <= TOLERANCE:
            return current
        return math.ceil(ratio * len(reported))
    # Missing pods pull the ratio towards "no change": 0 load when scaling out, the target when in.
    filled = dict(reported)
    for p in missing:
        filled[p] = 0.0 if ratio > 1.0 else target
    new_ratio = sum(filled.values()) / len(filled) / target
    if abs(1.0 - new_ratio) <= TOLERANCE or (new_ratio > 1.0) != (ratio > 1.0):
        return current
    wanted = math.ceil(new_ratio * len(filled))
    if (new_ratio < 1.0 and wanted > current) or (new_ratio > 1.0 and wanted < current):
        return current
    return wanted


def combine(current: int, recommendations: Sequence[int | None]) -> int | None:
    """The largest recommendation; None (do not scale) when all are missing, or when some are
    missing and the rest would scale in."""
    known = [r for r in recommendations if r is not None]
    if not known:
        return None
    best = max(known)
    if len(known) < len(recommendations) and best < current:
        return None
    return best


def stabilize(history: History, now: float, current: int, recommendation: int, behavior: Behavior) -> int:
    """Records ``recommendation`` and returns it smoothed by both stabilisation windows."""
    history.recommendations.append((now, recommendation))
    keep = max(behavior.up.window_s, behavior.down.window_s)
    history.recommendations = [(t, r) for t, r in history.recommendations if t >= now - keep]
    up = min(r for t, r in history.recommendations if t >= now - behavior.up.window_s)
    down = max(r for t, r in history.recommendations if t >= now - behavior.down.window_s)
    wanted = max(current, up)
    return min(wanted, down)


def _changes(events: Sequence[Event], now: float, period_s: int) -> tuple[int, int]:
    added = sum(e.change for e in events if e.at > now - period_s and e.change > 0)
    removed = sum(-e.change for e in events if e.at > now - period_s and e.change < 0)
    return added, removed


def scale_up_limit(current: int, events: Sequence[Event], now: float, rules: Rules) -> int:
    if rules.select == "Disabled" or not rules.policies:
        return current
    limits = []
    for p in rules.policies:
        added, removed = _changes(events, now, p.period_s)
        start = current - added + removed
        limits.append(start + p.value if p.kind == "Pods" else math.ceil(start * (1 + p.value / 100)))
    return min(limits) if rules.select == "Min" else max(limits)


def scale_down_limit(current: int, events: Sequence[Event], now: float, rules: Rules) -> int:
    if rules.select == "Disabled" or not rules.policies:
        return current
    limits = []
    for p in rules.policies:
        added, removed = _changes(events, now, p.period_s)
        start = current + removed - added
        limits.append(start - p.value if p.kind == "Pods" else math.floor(start * (1 - p.value / 100)))
    return max(limits) if rules.select == "Min" else min(limits)


def desired_replicas(
    history: History,
    now: float,
    current: int,
    recommendation: int,
    minimum: int,
    maximum: int,
    behavior: Behavior,
) -> int:
    """The replica count to write now, after stabilisation, rate limits and bounds."""
    wanted = stabilize(history, now, current, recommendation, behavior)
    if wanted > current:
        wanted = min(wanted, max(current, scale_up_limit(current, history.events, now, behavior.up)), maximum)
    elif wanted < current:
        wanted = max(
            wanted, min(current, scale_down_limit(current, history.events, now, behavior.down)), minimum
        )
    return max(minimum, min(maximum, wanted))


def record(history: History, now: float, change: int, keep_s: int = 1800) -> None:
    """Remembers a scale change for the rate limits."""
    if change:
        history.events.append(Event(now, change))
    history.events = [e for e in history.events if e.at > now - keep_s]


def behavior_from_spec(spec: Mapping | None) -> Behavior:
    """``spec.behavior`` of an autoscaling/v2 HPA, with Kubernetes' defaults for what it omits."""
    spec = spec or {}

    def rules(key: str, default: Rules) -> Rules:
        given = spec.get(key)
        if not given:
            return default
        policies = tuple(
            Policy(p["type"], int(p["value"]), int(p["periodSeconds"])) for p in given.get("policies") or []
        )
        return Rules(
            int(given.get("stabilizationWindowSeconds", default.window_s)),
            policies or default.policies,
            given.get("selectPolicy", "Max"),
        )

    return Behavior(rules("scaleUp", DEFAULT_UP), rules("scaleDown", DEFAULT_DOWN))
