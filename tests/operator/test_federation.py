"""LoRAAdapter ``spec.federated``: the schema and the model accept it without a source, the
operator asks shard 0 for the rounds once per spec generation, reports the outcome in
``status.federation``, and never places a federated adapter through the plan."""

from __future__ import annotations

import copy

import pytest
from themis_operator import API_VERSION, federation
from themis_operator.reconcile.observe import cluster_adapters
from themis_operator.spec import LoRAAdapterSpec
from themis_testing.fakekube import FakeKube
from themis_testing.validation import (
    custom_resource_errors,
    load_crds,
    load_example,
    validate_custom_resource,
)

FEDERATED = load_example("loraadapter-federated.yaml")


def spec(**federated) -> LoRAAdapterSpec:
    body = copy.deepcopy(FEDERATED["spec"])
    body["federated"].update(federated)
    return LoRAAdapterSpec.model_validate(body)


def test_a_federated_adapter_needs_no_source_but_an_adapter_needs_one_or_the_other():
    validate_custom_resource(FEDERATED)
    assert spec().federated.local_steps == 10 and spec().source is None
    neither = copy.deepcopy(FEDERATED)
    del neither["spec"]["federated"]
    # the API server's CEL rule (x-kubernetes-validations) and the operator's model say the same
    (rule,) = load_crds()["LoRAAdapter"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]["x-kubernetes-validations"]
    assert rule["rule"] == "has(self.source) || has(self.federated)"
    with pytest.raises(ValueError, match="needs a source, or federated rounds"):
        LoRAAdapterSpec.model_validate(neither["spec"])


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"rounds": 0}, "less than the minimum"),
        ({"localSteps": 0}, "less than the minimum"),
        ({"collection": "Not A Collection"}, "does not match"),
    ],
)
def test_schema_rejects_malformed_federated_specs(change, fragment):
    body = copy.deepcopy(FEDERATED)
    body["spec"]["federated"].update(change)
    assert any(fragment in e for e in custom_resource_errors(body))


def test_rounds_are_due_once_per_spec_generation():
    s = spec()
    assert federation.due(s, None, 1)
    assert not federation.due(s, {"federation": {"observedGeneration": 1, "phase": "Failed"}}, 1)
    assert federation.due(s, {"federation": {"observedGeneration": 1}}, 2)  # the spec changed
    plain = LoRAAdapterSpec.model_validate(load_example("loraadapter.yaml")["spec"])
    assert not federation.due(plain, None, 1)


def test_the_request_is_the_shards_federate_body():
    assert federation.request_body(spec(rounds=3)) == {
        "domain": "legal",
        "collection": "law",
        "text_field": "text",
        "rounds": 3,
        "local_steps": 10,
        "rank": 8,
    }


def test_status_reports_the_last_round_or_why_it_failed():
    answer = {
        "rounds": [
            {
                "round": 2,
                "training_samples": 16,
                "updates": [{"shard_id": "demo-0", "samples": 9}, {"shard_id": "demo-1", "samples": 7}],
                "published": [
                    {"shard_id": "demo-0", "accuracy_delta": 0.012},
                    {"shard_id": "demo-1", "accuracy_delta": 0.011},
                ],
            }
        ]
    }
    ok = federation.status_of(200, answer, 4)
    assert ok["phase"] == "Succeeded" and ok["observedGeneration"] == 4 and ok["round"] == 2
    assert ok["trainingSamples"] == 16 and ok["participants"] == ["demo-0", "demo-1"]
    assert ok["accuracyDelta"] == pytest.approx(0.011)
    failed = federation.status_of(400, {"error": {"code": "no_training_data", "message": "none"}}, 4)
    assert failed["phase"] == "Failed" and "no_training_data" in failed["message"]


def test_a_federated_adapter_is_not_placed_through_the_plan():
    kube = FakeKube()
    for body in (load_example("loraadapter.yaml"), FEDERATED):
        kube.create({**copy.deepcopy(body), "metadata": {**body["metadata"], "namespace": "ns"}})
    assert kube.get(API_VERSION, "LoRAAdapter", "ns", "legal-fed") is not None
    placed, invalid = cluster_adapters(kube, "ns", "demo")
    assert [a.name for a in placed] == ["legal"] and invalid == {}
