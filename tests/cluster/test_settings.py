"""ClusterSettings: the paper's defaults by name, env overrides, consistency checks, plan precedence."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from themis_core.plan import RouterSettings
from themis_shard.cluster.membership.gossip_state import GossipState
from themis_shard.cluster.membership.gossip_wire import GossipCodec
from themis_shard.cluster.settings import ClusterSettings


def test_defaults_are_the_papers_numbers():
    s = ClusterSettings()
    assert s.thresholds == (0.8, 0.6, 0.4) and s.gamma == 0.1 and s.announcement_ttl_s == 7200
    assert (s.breaker_failure_threshold, s.breaker_recovery_s) == (5, 60)
    assert (s.max_retries, s.connect_timeout_s, s.request_timeout_s) == (3, 5, 30)
    assert (s.gossip_interval_s, s.gossip_fanout) == (1, 3)
    assert s.suspect_timeout_s < s.dead_timeout_s
    assert s.routing_iteration_timeout_s == 2.0 and not s.tls_enabled


def test_environment_overrides_with_the_cluster_prefix(monkeypatch):
    monkeypatch.setenv("THEMIS_CLUSTER_GOSSIP_FANOUT", "4")
    monkeypatch.setenv("THEMIS_CLUSTER_THRESHOLDS", "[0.9, 0.7, 0.5]")
    monkeypatch.setenv("THEMIS_CLUSTER_GOSSIP_SECRET", "s3cret")
    s = ClusterSettings()
    assert s.gossip_fanout == 4 and s.thresholds == (0.9, 0.7, 0.5)
    assert "s3cret" not in repr(s)  # a SecretStr
    assert (
        GossipCodec.from_settings("themis", s)
        .decode(GossipCodec("themis", b"s3cret").encode("s1", "push_ack", 5.0), 5.0)
        .kind
        == "push_ack"
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"thresholds": (0.4, 0.6, 0.8)},
        {"suspect_timeout_s": 10, "dead_timeout_s": 5},
        {"tls_ca_path": "/ca.pem"},
        {"gossip_fanout": 0},
        {"gamma": -1},
    ],
)
def test_inconsistent_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        ClusterSettings(**bad)


def test_the_plan_router_settings_take_precedence():
    plan_router = RouterSettings(thresholds=(0.9, 0.5, 0.2), gamma=0.3, announcement_ttl_s=60)
    s = ClusterSettings().with_router(plan_router)
    assert s.thresholds == (0.9, 0.5, 0.2) and s.gamma == 0.3 and s.announcement_ttl_s == 60


def test_gossip_needs_a_secret_and_the_state_takes_its_timeouts_from_settings():
    with pytest.raises(ValueError):
        GossipCodec.from_settings("themis", ClusterSettings())
    st = GossipState.create(
        "s0", settings=ClusterSettings(suspect_timeout_s=2, dead_timeout_s=9, announcement_ttl_s=100)
    )
    assert (st.suspect_timeout_s, st.dead_timeout_s, st.announcement_ttl_s) == (2, 9, 100)
