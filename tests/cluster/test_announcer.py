"""Spec: what a shard announces about its LoRA adapters, and the load it publishes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Histogram
from themis_shard.cluster.membership.announcer import LoadSampler, ResidentAdapter, announcements_to_publish

LEGAL = ResidentAdapter("legal-qa", "legal", 0.85, 12.0, 1000.0)


def test_an_evaluated_adapter_is_announced_once_until_something_changes() -> None:
    first = announcements_to_publish("s0", [LEGAL], {}, now_wall=1000.0, ttl_s=7200)
    assert [
        (a.adapter_id, a.domain, a.accuracy_delta, a.performance_delta_p99_ms, a.active) for a in first
    ] == [("legal-qa", "legal", 0.85, 12.0, True)]
    published = {a.adapter_id: a for a in first}
    assert announcements_to_publish("s0", [LEGAL], published, now_wall=1100.0, ttl_s=7200) == []
    better = ResidentAdapter("legal-qa", "legal", 0.9, 12.0, 1200.0)
    again = announcements_to_publish("s0", [better], published, now_wall=1200.0, ttl_s=7200)
    assert again[0].accuracy_delta == 0.9 and again[0].version > first[0].version


def test_announcements_are_refreshed_before_the_ttl_expires() -> None:
    published = {a.adapter_id: a for a in announcements_to_publish("s0", [LEGAL], {}, 1000.0, 7200)}
    assert announcements_to_publish("s0", [LEGAL], published, now_wall=1000.0 + 3601, ttl_s=7200)


def test_unevaluated_or_domainless_adapters_are_not_announced() -> None:
    pending = ResidentAdapter("new", "legal", None, None, None)
    nodomain = ResidentAdapter("misc", None, 0.5, 1.0, 1.0)
    assert announcements_to_publish("s0", [pending, nodomain], {}, 10.0, 7200) == []


def test_an_unloaded_adapter_is_withdrawn_with_a_newer_version() -> None:
    published = {a.adapter_id: a for a in announcements_to_publish("s0", [LEGAL], {}, 1000.0, 7200)}
    withdrawn = announcements_to_publish("s0", [], published, now_wall=1001.0, ttl_s=7200)
    assert [(a.adapter_id, a.active) for a in withdrawn] == [("legal-qa", False)]
    assert withdrawn[0].version > published["legal-qa"].version


def test_load_comes_from_the_engine_metrics() -> None:
    r = CollectorRegistry()
    pending = Gauge("themis_pending_llm_requests", "", ["model"], registry=r)
    queue = Histogram("themis_llm_queue_seconds", "", registry=r)
    sampler = LoadSampler(r)
    pending.labels(model="m").set(7)
    queue.observe(0.2)
    queue.observe(0.4)
    load = sampler.sample()
    assert load.pending_llm_requests == 7 and round(load.avg_llm_queue_ms) == 300
    queue.observe(0.1)
    assert round(sampler.sample().avg_llm_queue_ms) == 100  # the last interval only
