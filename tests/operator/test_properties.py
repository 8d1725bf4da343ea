"""Properties over generated specs: whatever the schema and the semantic checks accept builds
valid manifests, and the plan's ring version tracks membership only."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from themis_core.certificates import generate_ca
from themis_operator.builders import ClusterContext, build_children
from themis_operator.builders.plan import next_plan
from themis_operator.reconcile import reconcile_cluster
from themis_operator.spec import ThemisClusterSpec
from themis_testing.fakekube import FakeKube
from themis_testing.validation import custom_resource_errors, validate_manifest

CA = generate_ca("prop")
MIN = {"raid0": 1, "raid1": 2, "raid5": 3, "raid6": 4}

sources = st.sampled_from(["bundled", "pvc://models/a.gguf", "https://example.com/m.gguf"])
specs = st.fixed_dictionaries(
    {"raidMode": st.sampled_from(sorted(MIN)), "extra": st.integers(0, 5)},
    optional={
        "vnodes": st.integers(1, 4096),
        "tls": st.fixed_dictionaries({"enabled": st.booleans()}),
        "monitoring": st.fixed_dictionaries({"serviceMonitor": st.booleans()}),
        "model": st.fixed_dictionaries({"source": sources}),
        "draftModel": st.fixed_dictionaries({"source": sources}),
        "resources": st.fixed_dictionaries(
            {
                "gpus": st.integers(0, 8),
                "cpu": st.sampled_from(["1", "0.5", "250m"]),
                "memory": st.sampled_from(["512Mi", "8Gi", "1G"]),
            }
        ),
        "storage": st.fixed_dictionaries(
            {"dataSize": st.sampled_from(["1Gi", "100Gi"])},
            optional={"storageClassName": st.sampled_from(["fast", "standard"])},
        ),
        "engine": st.fixed_dictionaries({"nDraft": st.integers(0, 64), "maxBatchSize": st.integers(1, 512)}),
    },
)


def body_for(spec: dict) -> dict:
    spec = dict(spec)
    spec["shards"] = MIN[spec["raidMode"]] + spec.pop("extra")
    return {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "prop", "namespace": "ns", "uid": "u"},
        "spec": spec,
    }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_every_accepted_spec_builds_manifests_valid_for_all_supported_versions(spec):
    body = body_for(spec)
    assert custom_resource_errors(body) == []
    ctx = ClusterContext.from_body(body)
    assert ctx.spec.problems() == []
    plan, _ = next_plan(ctx, [], None)
    for manifest in build_children(ctx, replicas=ctx.spec.shards, plan=plan, ca=CA, existing_tls=None).apply:
        if manifest["apiVersion"] != "monitoring.coreos.com/v1":
            validate_manifest(manifest)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(3, 8), min_size=1, max_size=6))
def test_ring_version_counts_membership_changes_only(shard_counts):
    previous, version, last = None, 1, shard_counts[0]
    for n in shard_counts:
        ctx = ClusterContext("prop", "ns", "u", ThemisClusterSpec(shards=n, raid_mode="raid5"))
        plan, _ = next_plan(ctx, [], previous)
        if previous is not None and n != last:
            version += 1
        assert plan.ring_version == version
        previous, last = plan, n


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs)
def test_reconcile_is_idempotent_for_any_accepted_spec(spec):
    kube = FakeKube()
    body = kube.add(body_for(spec))
    reconcile_cluster(kube, body)
    writes = len(kube.writes)
    reconcile_cluster(kube, body)
    assert kube.writes[writes:] == []
