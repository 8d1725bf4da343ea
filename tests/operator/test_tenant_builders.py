"""Spec: tenants in Kubernetes — spec.auth.tenants (validated by the CRD schema) gives each tenant a
client key in the NAME-api-keys Secret and its limits line next to the digests the shards mount;
keys are kept on reconcile; a change of limits rolls the shards (a pod-template digest)."""

from __future__ import annotations

import base64

import pytest
from themis_core.access_policy import Role
from themis_core.api_keys import KeyRing, parse_entries
from themis_core.tenant_policy import TenantPolicy, parse_policies
from themis_operator.builders import ClusterContext
from themis_operator.builders.auth import build_api_keys_secret
from themis_operator.builders.statefulset import build_statefulset
from themis_shard.auth.settings import AuthSettings
from themis_testing.validation import custom_resource_errors, load_example, validate_manifest

TENANTS = [
    {"name": "acme", "requestsPerS": 5, "tokensPerMin": 6000, "concurrency": 4, "maxPriority": 0},
    {"name": "batch", "weight": 2},
]


def body(**spec) -> dict:
    b = load_example("themiscluster.yaml")
    b["spec"].update(spec)
    b["metadata"].update(namespace="prod", uid="uid-1")
    return b


def ctx(**spec) -> ClusterContext:
    return ClusterContext.from_body(body(**spec))


def decoded(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_each_tenant_gets_a_client_key_and_its_limits_in_the_mounted_digests(tmp_path) -> None:
    secret = build_api_keys_secret(ctx(auth={"tenants": TENANTS}), None)
    validate_manifest(secret)
    data = decoded(secret)
    assert parse_policies(data["keys"]) == {
        "acme": TenantPolicy("acme", requests_per_s=5, tokens_per_min=6000, concurrency=4, max_priority=0),
        "batch": TenantPolicy("batch", weight=2),
    }
    ring = KeyRing(parse_entries(data["keys"]))
    acme = ring.entry_of(data["tenant-acme.key"].strip())
    assert acme is not None and acme.role is Role.client and acme.tenant == "acme"
    assert ring.entry_of(data["client.key"].strip()).tenant == "default"
    mounted = tmp_path / "keys"  # what a shard reads from the Secret's mount
    mounted.write_text(data["keys"])
    assert set(AuthSettings(enabled=True, keys_file=mounted).tenant_policies()) == {"acme", "batch"}


def test_reconciling_keeps_tenant_keys_and_a_removed_tenant_loses_its_key() -> None:
    first = build_api_keys_secret(ctx(auth={"tenants": TENANTS}), None)
    again = build_api_keys_secret(ctx(auth={"tenants": TENANTS}), first)
    assert again["data"] == first["data"]
    fewer = decoded(build_api_keys_secret(ctx(auth={"tenants": TENANTS[:1]}), first))
    assert "tenant-batch.key" not in fewer and "batch" not in parse_policies(fewer["keys"])
    assert fewer["tenant-acme.key"] == decoded(first)["tenant-acme.key"]


def test_changing_the_limits_changes_the_pod_template_so_shards_reread_them() -> None:
    def annotations(tenants: list[dict]) -> dict:
        sts = build_statefulset(ctx(auth={"tenants": tenants}), 3)
        return sts["spec"]["template"]["metadata"]["annotations"]

    assert "themisdb.io/tenants" not in annotations([])
    tighter = [{**TENANTS[0], "requestsPerS": 1}, TENANTS[1]]
    assert annotations(TENANTS)["themisdb.io/tenants"] != annotations(tighter)["themisdb.io/tenants"]


@pytest.mark.parametrize(
    ("tenants", "named"),
    [
        ([{"name": "Acme"}], "should match pattern"),
        ([{"name": "acme", "requestsPerS": 0}], "greater than 0"),
        ([{"name": "acme", "maxPriority": 5000}], "less than or equal to 1000"),
        ([{"name": "acme"}, {"name": "acme"}], "each tenant name once"),
    ],
)
def test_a_bad_tenant_is_refused(tenants: list[dict], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        ctx(auth={"tenants": tenants})


def test_the_crd_schema_accepts_tenants_and_refuses_a_bad_name() -> None:
    assert custom_resource_errors(body(auth={"tenants": TENANTS})) == []
    (bad,) = custom_resource_errors(body(auth={"tenants": [{"name": "Not A Name"}]}))
    assert "'Not A Name' does not match" in bad
