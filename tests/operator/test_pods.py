"""A shard pod that cannot start makes its ThemisCluster Degraded with the pod's own reason."""

import dataclasses

from themis_operator.pods import pod_problem, pod_problems
from themis_operator.reconcile.decide import decide
from themis_operator.reconcile.report import report
from themis_testing.fakekube import FakeKube

from .worlds import after, context, empty

NOW = "2026-01-01T00:00:00Z"
FETCH_FAILED = "source_unavailable: model https://models.example/m.gguf could not be fetched: HTTP 404"


def pod(name: str, **container) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app.kubernetes.io/name": "themis", "app.kubernetes.io/instance": "demo"},
        },
        "status": {"phase": "Running", "containerStatuses": [{"name": "shard", **container}]},
    }


CRASHING = {
    "ready": False,
    "restartCount": 4,
    "state": {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}
    },
    "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "message": FETCH_FAILED + "\n"}},
}


def test_a_crash_looping_pod_is_reported_with_its_termination_message():
    problem = pod_problem(pod("demo-1", **CRASHING))
    assert problem is not None and problem.reason == "CrashLoopBackOff" and problem.bad_source
    assert problem.line() == f"demo-1: CrashLoopBackOff: {FETCH_FAILED}"
    assert pod_problem(pod("demo-0", ready=True, restartCount=0, state={"running": {}})) is None
    starting = pod("demo-2", ready=False, restartCount=0, state={"waiting": {"reason": "ContainerCreating"}})
    assert pod_problem(starting) is None  # still simply starting


def test_a_pod_that_cannot_pull_its_image_is_a_problem_without_a_bad_source():
    pulling = pod(
        "demo-0", ready=False, state={"waiting": {"reason": "ImagePullBackOff", "message": "not found: x:1"}}
    )
    (problem,) = pod_problems([pulling])
    assert (problem.reason, problem.message, problem.bad_source) == (
        "ImagePullBackOff",
        "not found: x:1",
        False,
    )


def test_an_unfetchable_model_source_makes_the_cluster_degraded_with_the_reason():
    ctx = context()
    snapshot = after(empty(), decide(ctx, empty()), ready=2)
    snapshot = dataclasses.replace(snapshot, pod_problems=pod_problems([pod("demo-1", **CRASHING)]))
    outcome = report(ctx, snapshot, decide(ctx, snapshot), (), now=NOW)
    assert outcome.status["phase"] == "Degraded"
    degraded = next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ModelUnavailable")
    assert degraded["message"] == f"demo-1: CrashLoopBackOff: {FETCH_FAILED}"
    assert [(e.type, e.reason) for e in outcome.events] == [("Warning", "ModelUnavailable")]


def test_observe_reads_the_shard_pods_of_this_cluster_only():
    from themis_operator.reconcile import reconcile_cluster
    from themis_testing.validation import load_example

    kube = FakeKube()
    body = load_example("themiscluster.yaml")
    kube.add(body)
    kube.add(pod("demo-1", **CRASHING))
    other = pod("other-0", **CRASHING)
    other["metadata"]["labels"]["app.kubernetes.io/instance"] = "other"
    kube.add(other)
    outcome = reconcile_cluster(kube, body)
    assert outcome.status["message"] == f"demo-1: CrashLoopBackOff: {FETCH_FAILED}"
