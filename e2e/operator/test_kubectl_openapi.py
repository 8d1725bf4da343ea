"""The local Kubernetes answers kubectl like a real one: it serves ``/openapi/v3`` and
``/openapi/v2`` from the built-in kinds and the installed CRDs, so plain ``kubectl apply``
validates (custom resources on the server, built-in kinds in kubectl) and ``kubectl explain``
describes ThemisCluster fields. Only the API emulator runs here (no node, no operator)."""

from __future__ import annotations

import json

import httpx
import pytest
from themis_testing.emulator import running_emulator

from .conftest import ROOT, Kubectl

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with running_emulator() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def kubectl(api, kubectl_binary, tmp_path_factory):
    config = api.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    k = Kubectl(kubectl_binary, config)
    k.run("apply", "-f", str(ROOT / "crds"))  # no
    return k


def test_plain_kubectl_apply_creates_the_crds_and_a_cluster(kubectl):
    out = kubectl.run("apply", "-f", str(ROOT / "examples/themiscluster.yaml")).stdout
    assert "themiscluster.themisdb.io/demo" in out
    assert kubectl.json("tc", "demo")["spec"]["shards"] == 3


def test_an_unknown_field_in_a_custom_resource_is_refused_by_the_server_by_name(kubectl):
    bad = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "bad"},
        "spec": {"shards": 3, "shardz": 4},
    }
    done = kubectl.run("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert done.returncode != 0 and "shardz" in done.stderr


def test_built_in_kinds_are_validated_by_kubectl_against_the_served_schemas(kubectl):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "b"}}
    assert kubectl.run("apply", "-f", "-", input=json.dumps(cm)).returncode == 0
    done = kubectl.run("apply", "-f", "-", input=json.dumps({**cm, "datta": {}}), check=False)
    assert done.returncode != 0
    assert 'unknown field "datta" in io.k8s.api.core.v1.ConfigMap' in done.stderr


def test_kubectl_explain_describes_the_themiscluster_spec_from_the_crd(kubectl):
    out = kubectl.run("explain", "tc.spec", "--api-version=themisdb.io/v1alpha1").stdout
    assert "KIND:       ThemisCluster" in out and "VERSION:    v1alpha1" in out
    for field in ("shards", "raidMode", "storage", "env", "logging"):
        assert f"  {field}\t" in out
    image = kubectl.run("explain", "tc.spec.image").stdout
    assert "the operator's own version" in image  # the CRD's description
    assert "StatefulSetUpdateStrategy" in kubectl.run("explain", "statefulset.spec.updateStrategy").stdout


def test_the_openapi_documents_list_every_group_version_and_name_each_kind(api):
    root = httpx.get(f"{api.url}/openapi/v3").json()["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/themisdb.io/v1alpha1"} <= set(root)
    doc = httpx.get(api.url + root["apis/themisdb.io/v1alpha1"]["serverRelativeURL"]).json()
    schemas = doc["components"]["schemas"]
    tc = schemas["io.themisdb.v1alpha1.ThemisCluster"]
    assert tc["x-kubernetes-group-version-kind"] == [
        {"group": "themisdb.io", "kind": "ThemisCluster", "version": "v1alpha1"}
    ]
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas  # what metadata refers to
    v2 = httpx.get(
        f"{api.url}/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    assert v2.status_code == 200 and b"io.themisdb.v1alpha1.ThemisCluster" in v2.content
    assert httpx.get(f"{api.url}/openapi/v3/apis/nope.io/v1").status_code == 404


def test_v1beta1_is_served_and_shows_the_same_objects_as_v1alpha1(kubectl):
    kubectl.run("apply", "-f", str(ROOT / "examples/themiscluster.yaml"))
    beta = kubectl.json("themiscluster.v1beta1.themisdb.io", "demo")
    alpha = kubectl.json("themiscluster.v1alpha1.themisdb.io", "demo")
    assert beta["spec"] == alpha["spec"] and beta["metadata"]["uid"] == alpha["metadata"]["uid"]
    assert (
        "VERSION:    v1beta1" in kubectl.run("explain", "tc.spec", "--api-version=themisdb.io/v1beta1").stdout
    )
