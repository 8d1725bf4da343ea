"""The API emulator's shims: what kopf and kubectl rely on, stated as behaviour."""

import json

import httpx
import pytest
import yaml
from themis_testing.validation import CRD_DIR

CM = "/api/v1/namespaces/default/configmaps"
TC = "/apis/themisdb.io/v1alpha1/namespaces/default/themisclusters"


@pytest.fixture(scope="module")
def api(emulator):
    with httpx.Client(base_url=emulator.url, timeout=10) as client:
        for path in sorted(CRD_DIR.glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            client.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd
            ).raise_for_status()
        yield client


def configmap(name, **labels):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"a": "1"},
    }


def test_namespaces_can_be_listed_and_fetched(api):
    names = [n["metadata"]["name"] for n in api.get("/api/v1/namespaces").json()["items"]]
    assert "default" in names
    assert api.get("/api/v1/namespaces/default").json()["status"]["phase"] == "Active"
    assert api.get("/api/v1/namespaces/nope").json()["reason"] == "NotFound"


def test_core_discovery_names_group_version_v1(api):
    assert api.get("/api/v1").json()["groupVersion"] == "v1"


def test_posted_crds_are_discoverable_with_short_names_and_status(api):
    resources = {r["name"]: r for r in api.get("/apis/themisdb.io/v1alpha1").json()["resources"]}
    assert resources["themisclusters"]["shortNames"] == ["tc"]
    assert resources["themisclusters"]["kind"] == "ThemisCluster"
    assert resources["loraadapters"]["shortNames"] == ["lora"]
    assert "themisclusters/status" in resources
    crd = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/themisclusters.themisdb.io").json()
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"


def test_created_objects_get_server_fields_and_duplicates_conflict(api):
    created = api.post(CM, json=configmap("ids"))
    assert created.status_code == 201
    meta = created.json()["metadata"]
    assert meta["uid"] and meta["resourceVersion"] and meta["generation"] == 1 and meta["creationTimestamp"]
    again = api.post(CM, json=configmap("ids"))
    assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"
    missing = api.get(f"{CM}/nothing-here")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"


def test_lists_carry_kind_resource_version_and_honour_label_selectors(api):
    api.post(CM, json=configmap("sel-a", tier="x"))
    api.post(CM, json=configmap("sel-b", tier="y"))
    listing = api.get(CM, params={"labelSelector": "tier=x"}).json()
    assert listing["kind"] == "ConfigMapList" and listing["metadata"]["resourceVersion"]
    assert [i["metadata"]["name"] for i in listing["items"]] == ["sel-a"]


def test_stale_resource_versions_conflict_on_patch_put_and_json_patch_tests(api):
    obj = api.post(CM, json=configmap("rv")).json()
    rv = obj["metadata"]["resourceVersion"]
    merge = {"Content-Type": "application/merge-patch+json"}
    assert api.patch(f"{CM}/rv", json={"data": {"a": "2"}}, headers=merge).status_code == 200
    stale = api.patch(
        f"{CM}/rv", json={"metadata": {"resourceVersion": rv}, "data": {"a": "3"}}, headers=merge
    )
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    assert api.put(f"{CM}/rv", json={**obj, "data": {"a": "4"}}).status_code == 409
    test_op = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "remove", "path": "/data"},
    ]
    assert (
        api.patch(
            f"{CM}/rv", json=test_op, headers={"Content-Type": "application/json-patch+json"}
        ).status_code
        == 422
    )
    assert api.get(f"{CM}/rv").json()["data"] == {"a": "2"}


def test_status_subresource_is_isolated_and_generation_tracks_spec(api):
    body = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "gen"},
        "spec": {"shards": 3},
    }
    api.post(TC, json=body)
    merge = {"Content-Type": "application/merge-patch+json"}
    after_main = api.patch(
        f"{TC}/gen", json={"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}}, headers=merge
    ).json()
    assert "status" not in after_main and after_main["metadata"]["generation"] == 1
    after_status = api.patch(
        f"{TC}/gen/status", json={"status": {"phase": "Running"}, "spec": {"shards": 9}}, headers=merge
    ).json()
    assert after_status["status"] == {"phase": "Running"} and after_status["spec"]["shards"] == 3
    assert after_status["metadata"]["generation"] == 1
    after_spec = api.patch(f"{TC}/gen", json={"spec": {"shards": 4}}, headers=merge).json()
    assert after_spec["metadata"]["generation"] == 2 and after_spec["status"] == {"phase": "Running"}


def test_finalizers_hold_deletion_until_removed(api):
    cm = configmap("fin")
    cm["metadata"]["finalizers"] = ["example.com/hold"]
    api.post(CM, json=cm)
    held = api.delete(f"{CM}/fin").json()
    assert held["metadata"]["deletionTimestamp"]
    assert api.get(f"{CM}/fin").status_code == 200
    api.patch(
        f"{CM}/fin",
        json={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert api.get(f"{CM}/fin").status_code == 404


def test_watch_streams_json_lines_resumable_from_a_resource_version(api):
    start = api.get(CM).json()["metadata"]["resourceVersion"]
    api.post(CM, json=configmap("watched"))
    params = {"watch": "true", "resourceVersion": start, "timeoutSeconds": "1", "allowWatchBookmarks": "true"}
    with api.stream("GET", CM, params=params) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert ("ADDED", "watched") in [(e["type"], e["object"]["metadata"].get("name")) for e in events]
    bookmark = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmark[0]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"


def test_unknown_resources_are_not_found(api):
    response = api.get("/apis/example.com/v1/namespaces/default/widgets")
    assert response.status_code == 404 and response.json()["reason"] == "NotFound"


def test_custom_resources_are_defaulted_and_validated_against_the_crd_schema(api):
    body = {
        "apiVersion": "themisdb.io/v1alpha1",
        "kind": "ThemisCluster",
        "metadata": {"name": "defaults"},
        "spec": {"shards": 2},
    }
    created = api.post(TC, json=body).json()
    assert created["spec"]["raidMode"] == "raid1" and created["spec"]["tls"] == {"enabled": True}
    assert created["spec"]["router"]["thresholds"] == [0.8, 0.6, 0.4]
    bad = {**body, "metadata": {"name": "bad"}, "spec": {"shards": 0, "raidMode": "raid10", "colour": "red"}}
    rejected = api.post(TC, json=bad)
    assert rejected.status_code == 422 and rejected.json()["reason"] == "Invalid"
    fields = {c["field"] for c in rejected.json()["details"]["causes"]}
    assert fields == {"spec", "spec.shards", "spec.raidMode"}  # "spec": the unknown field
    assert api.get(f"{TC}/bad").status_code == 404
    merge = {"Content-Type": "application/merge-patch+json"}
    assert api.patch(f"{TC}/defaults", json={"spec": {"vnodes": 0}}, headers=merge).status_code == 422
