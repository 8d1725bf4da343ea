"""The emulator's /scale subresource for CRDs that declare one (what `kubectl scale` and HPAs use)."""

import httpx
import pytest
from themis_testing.emulator import running_emulator

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.io"},
    "spec": {
        "group": "example.io",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.size",
                        "statusReplicasPath": ".status.size",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}
BASE = "/apis/example.io/v1/namespaces/default/widgets"


@pytest.fixture(scope="module")
def api():
    with running_emulator() as server, httpx.Client(base_url=server.url) as client:
        assert (
            client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=CRD).status_code
            == 201
        )
        body = {
            "apiVersion": "example.io/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 3},
        }
        assert client.post(BASE, json=body).status_code == 201
        client.patch(
            f"{BASE}/w/status",
            json={"status": {"size": 2, "selector": "app=w"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        yield client


def test_discovery_names_the_scale_subresource(api):
    resources = {r["name"]: r for r in api.get("/apis/example.io/v1").json()["resources"]}
    assert (
        resources["widgets/scale"]["kind"] == "Scale" and resources["widgets/scale"]["group"] == "autoscaling"
    )


def test_get_maps_the_crd_paths(api):
    scale = api.get(f"{BASE}/w/scale").json()
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 3} and scale["status"] == {"replicas": 2, "selector": "app=w"}


def test_patch_and_put_write_the_spec_path(api):
    patched = api.patch(
        f"{BASE}/w/scale",
        json={"spec": {"replicas": 5}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200 and patched.json()["spec"]["replicas"] == 5
    assert api.get(f"{BASE}/w").json()["spec"]["size"] == 5
    scale = api.get(f"{BASE}/w/scale").json()
    scale["spec"]["replicas"] = 4
    assert api.put(f"{BASE}/w/scale", json=scale).json()["spec"]["replicas"] == 4
    assert api.get(f"{BASE}/w").json()["spec"]["size"] == 4
    scale["spec"]["replicas"] = 1  # stale resourceVersion
    assert api.put(f"{BASE}/w/scale", json=scale).status_code == 409


def test_bad_replicas_are_invalid(api):
    bad = api.patch(
        f"{BASE}/w/scale",
        json={"spec": {"replicas": -1}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert bad.status_code == 422 and bad.json()["reason"] == "Invalid"
