"""What a StatefulSet wants: pods and PVCs by ordinal, ordered or parallel, and its status."""

from themis_testing.kube_node.statefulset import (
    POD_NAME_LABEL,
    REVISION_LABEL,
    decide,
    pod_manifest,
    problems,
    revision,
    status,
)


def sts(replicas=3, policy="Parallel", image="shard:1"):
    return {
        "metadata": {"name": "demo", "namespace": "ns", "uid": "sts-uid", "generation": 2},
        "spec": {
            "replicas": replicas,
            "serviceName": "demo-headless",
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": "themis"}},
            "template": {
                "metadata": {"labels": {"app": "themis"}},
                "spec": {
                    "containers": [{"name": "shard", "image": image}],
                    "volumes": [{"name": "plan", "configMap": {"name": "demo-plan"}}],
                },
            },
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
            ],
        },
    }


def pod(i, s, ready=True):
    p = pod_manifest(s, i)
    p["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return p


def test_a_pod_has_a_stable_identity_its_claims_and_an_owner():
    p = pod_manifest(sts(), 1)
    assert p["metadata"]["name"] == "demo-1"
    assert p["metadata"]["labels"] == {
        "app": "themis",
        POD_NAME_LABEL: "demo-1",
        REVISION_LABEL: revision(sts()),
    }
    assert p["metadata"]["ownerReferences"][0]["uid"] == "sts-uid"
    assert (p["spec"]["hostname"], p["spec"]["subdomain"]) == ("demo-1", "demo-headless")
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-demo-1"}} in p["spec"]["volumes"]


def test_parallel_creates_every_missing_pod_with_its_claims_first():
    step = decide(sts(), [], claims=["data-demo-0"])
    assert [c["metadata"]["name"] for c in step.create_claims] == ["data-demo-1", "data-demo-2"]
    assert [p["metadata"]["name"] for p in step.create_pods] == ["demo-0", "demo-1", "demo-2"]


def test_ordered_ready_creates_one_at_a_time_and_removes_the_highest_first():
    s = sts(policy="OrderedReady")
    assert [p["metadata"]["name"] for p in decide(s, [], []).create_pods] == ["demo-0"]
    assert decide(s, [pod(0, s, ready=False)], []).create_pods == []
    assert [p["metadata"]["name"] for p in decide(s, [pod(0, s)], []).create_pods] == ["demo-1"]
    shrunk = sts(replicas=1, policy="OrderedReady")
    assert decide(shrunk, [pod(i, shrunk) for i in range(3)], []).delete_pods == ["demo-2"]
    assert decide(sts(replicas=1), [pod(i, shrunk) for i in range(3)], []).delete_pods == ["demo-2", "demo-1"]


def test_a_deleted_pod_is_recreated_and_claims_are_never_deleted():
    s = sts()
    step = decide(s, [pod(0, s), pod(2, s)], claims=["data-demo-0", "data-demo-2"])
    assert [p["metadata"]["name"] for p in step.create_pods] == ["demo-1"]
    assert [c["metadata"]["name"] for c in step.create_claims] == ["data-demo-1"]
    assert step.delete_pods == []


def test_a_changed_template_rolls_the_highest_outdated_pod_once_all_are_ready():
    old, new = sts(image="shard:1"), sts(image="shard:2")
    pods = [pod(i, old) for i in range(3)]
    assert decide(new, pods, []).delete_pods == ["demo-2"]
    pods[0]["status"]["conditions"][0]["status"] = "False"
    assert decide(new, pods, []).delete_pods == []


def test_status_counts_ready_and_updated_pods():
    s = sts()
    got = status(s, [pod(0, s), pod(1, s, ready=False)])
    assert (got["replicas"], got["readyReplicas"], got["updatedReplicas"], got["observedGeneration"]) == (
        2,
        1,
        2,
        2,
    )


def test_policies_the_node_cannot_honour_are_named():
    s = sts()
    s["spec"]["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Delete"}
    assert problems(s) == ["persistentVolumeClaimRetentionPolicy.whenDeleted=Delete is not supported"]
    assert problems(sts()) == []


def test_rolling_update_replaces_only_pods_at_or_above_the_partition_and_reports_both_revisions():
    from themis_testing.kube_node.statefulset import REVISION_LABEL, decide, pod_manifest, revision, status

    old = sts_with_partition(0)
    pods = [ready_pod(pod_manifest(old, i)) for i in range(3)]
    new = sts_with_partition(2, image="themis:2")
    assert decide(new, pods, []).delete_pods == ["demo-2"]
    pods[2] = ready_pod(pod_manifest(new, 2))
    assert decide(new, pods, []).delete_pods == []  # demo-0 and demo-1 are below the partition
    s = status(new, pods)
    assert (s["currentRevision"], s["updateRevision"]) == (revision(old), revision(new))
    assert (s["currentReplicas"], s["updatedReplicas"]) == (2, 1)
    assert pods[2]["metadata"]["labels"][REVISION_LABEL] == revision(new)
    done = [ready_pod(pod_manifest(new, i)) for i in range(3)]
    assert status(new, done)["currentRevision"] == revision(new)


def sts_with_partition(partition: int, image: str = "themis:1") -> dict:
    return {
        "metadata": {"name": "demo", "namespace": "default", "uid": "u", "generation": 1},
        "spec": {
            "replicas": 3,
            "serviceName": "demo-headless",
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {
                "metadata": {"labels": {"app": "demo"}},
                "spec": {"containers": [{"name": "s", "image": image}]},
            },
        },
    }


def ready_pod(pod: dict) -> dict:
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod
