"""The shard ↔ operator status contract: a real shard's ``/v1/cluster/status`` is ClusterStatus."""

from themis_core.status_model import (
    AdapterCapability,
    ClusterStatus,
    MemberLoad,
    MemberStatus,
    MigrationStatus,
)
from themis_operator.probe import parse_status
from themis_shard.cluster.membership.gossip_state import AdapterCapabilityAnnouncement, ShardLoad


def test_a_shards_answer_has_exactly_the_fields_of_the_shared_model(client):
    body = client.get("/v1/cluster/status").json()
    assert set(body) == set(ClusterStatus.model_fields)
    assert set(body["migration"]) == set(MigrationStatus.model_fields)
    assert body["members"] and all(set(m) == set(MemberStatus.model_fields) for m in body["members"])
    assert ClusterStatus.model_validate(body).model_dump(mode="json") == body


def test_the_shared_model_follows_the_shards_own_gossip_records():
    assert set(MemberLoad.model_fields) == set(ShardLoad.model_fields)
    assert set(AdapterCapability.model_fields) == set(AdapterCapabilityAnnouncement.model_fields) | {"age_s"}


def test_the_probe_reads_a_real_shards_answer(client):
    body = client.get("/v1/cluster/status").json()
    me = body["shard_id"]
    report = parse_status(me, "http://x", "member", body)
    own = next(m for m in body["members"] if m["shard_id"] == me)
    assert report.reachable and report.ringVersion == body["ring_version"]
    assert report.migration == body["migration"]["state"] and report.state == own["state"]


def test_a_shard_reports_the_plans_adapters_in_plan_adapters_which_the_probe_reads(client):
    """``plan_adapters`` (loaded, failed with the reason) is the only adapter state the probe reads."""
    body = client.get("/v1/cluster/status").json()
    assert "adapters" not in body and "plan_adapters" in body
