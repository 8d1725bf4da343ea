"""Spec: the operator as the plan authority of a cluster with ``spec.failover.enabled``.

Off by default (the operator's downtime would pause writes). On, the plan carries the failover
settings and the floor; the authority writes the plan ConfigMap only over the version it read,
and a reconcile does the same, so neither undoes the other's plan (a conflict is read again,
never overwritten); the in-sync set the authority chose survives reconciles and ring changes;
probes are signed with the gossip secret or, with TLS, present a certificate the cluster CA
issued."""

from __future__ import annotations

import base64
import ssl

import pytest
from themis_core.plan import with_in_sync
from themis_core.plan_authority.authority import StalePlan
from themis_operator.kube import Conflict
from themis_operator.plan_authority import AUTHORITY_ID, ConfigMapPlan, probe_client
from themis_operator.reconcile import reconcile_cluster

from .conftest import NS, cluster, plan_of


def test_failover_is_off_unless_the_spec_turns_it_on(kube):
    reconcile_cluster(kube, cluster(kube))
    assert plan_of(kube).failover is None


def test_the_spec_sets_the_plans_failover_settings_and_floor(kube):
    failover = {"enabled": True, "leaseSeconds": 4, "failoverAfterSeconds": 6, "minInsync": 2}
    reconcile_cluster(kube, cluster(kube, raidMode="raid1", shards=3, failover=failover))
    plan = plan_of(kube)
    assert (plan.failover.lease_s, plan.failover.failover_after_s, plan.min_insync) == (4, 6, 2)


@pytest.mark.parametrize(
    ("failover", "message"),
    [
        ({"enabled": True, "minInsync": 3}, "spec.failover.minInsync 3 exceeds the 2 copies of raid1"),
        ({"enabled": True, "leaseSeconds": 5, "failoverAfterSeconds": 2}, "at least failover.leaseSeconds"),
    ],
)
def test_failover_settings_that_cannot_work_are_refused_by_name(kube, failover, message):
    outcome = reconcile_cluster(kube, cluster(kube, raidMode="raid1", shards=3, failover=failover))
    degraded = next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")
    assert outcome.status["phase"] == "Degraded" and message in degraded["message"]


def test_the_authoritys_in_sync_set_survives_reconciles_and_a_scale_out(kube):
    body = cluster(kube, raidMode="raid1", shards=3, failover={"enabled": True})
    reconcile_cluster(kube, body)
    store = ConfigMapPlan(kube, NS, "demo")
    fenced = with_in_sync(store.read(), ("demo-1",), ())
    store.write(fenced)
    reconcile_cluster(kube, body)
    assert plan_of(kube) == fenced
    body = kube.patch("themisdb.io/v1alpha1", "ThemisCluster", NS, "demo", {"spec": {"shards": 4}})
    reconcile_cluster(kube, body)
    scaled = plan_of(kube)
    assert scaled.out_of_sync == ("demo-1",) and scaled.plan_epoch > fenced.plan_epoch


def test_the_authority_never_overwrites_a_plan_changed_since_it_read_it(kube):
    body = cluster(kube, raidMode="raid1", shards=3, failover={"enabled": True})
    reconcile_cluster(kube, body)
    store = ConfigMapPlan(kube, NS, "demo")
    plan = store.read()
    kube.patch("v1", "ConfigMap", NS, "demo-plan", {"metadata": {"annotations": {"touched": "yes"}}})
    with pytest.raises(StalePlan):
        store.write(with_in_sync(plan, ("demo-1",), ()))
    assert plan_of(kube) == plan
    store.read()
    store.write(with_in_sync(plan, ("demo-1",), ()))  # read again, then written
    assert plan_of(kube).out_of_sync == ("demo-1",)


def test_a_reconcile_built_from_an_older_plan_is_refused_not_applied(kube):
    """A reconcile reads the plan, the authority fences a shard, then the reconcile writes:
    its write must fail (and be decided again), not bring the fenced shard back."""
    from themis_operator.reconcile import act, decide, observe
    from themis_operator.reconcile.decide import admit

    body = cluster(kube, raidMode="raid1", shards=3, failover={"enabled": True})
    reconcile_cluster(kube, body)
    body = kube.patch("themisdb.io/v1alpha1", "ThemisCluster", NS, "demo", {"spec": {"shards": 4}})
    ctx = admit(body)
    snapshot = observe(kube, ctx, body)  # the reconcile reads ...
    store = ConfigMapPlan(kube, NS, "demo")
    fenced = with_in_sync(store.read(), ("demo-1",), ())
    store.write(fenced)  # ... the authority writes ...
    with pytest.raises(Conflict):
        act(kube, NS, decide(ctx, snapshot).actions)  # ... the reconcile's write is refused
    assert plan_of(kube) == fenced
    reconcile_cluster(kube, body)  # decided again from the current plan
    assert plan_of(kube).out_of_sync == ("demo-1",) and plan_of(kube).ring_version == 2


def test_probes_are_signed_with_the_gossip_secret_without_tls(kube):
    reconcile_cluster(kube, cluster(kube, tls={"enabled": False}, failover={"enabled": True}))
    client = probe_client(kube, NS, "demo", tls=False)()
    secret = base64.b64decode(kube.get("v1", "Secret", NS, "demo-gossip")["data"]["secret"]).decode()
    assert client.auth is not None and client.auth.sender == AUTHORITY_ID
    assert client.auth._secret == secret.encode()


def test_probes_present_a_certificate_of_the_cluster_ca_with_tls(kube):
    reconcile_cluster(kube, cluster(kube, failover={"enabled": True}))
    factory = probe_client(kube, NS, "demo", tls=True)
    context = factory.keywords["verify"]
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert len(context.get_ca_certs()) == 1  # the cluster CA, not the system's
