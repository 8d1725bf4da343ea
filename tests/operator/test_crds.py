"""CRDs: the schema accepts the examples, rejects malformed CRs, and agrees with the models."""

import copy

import pytest
import yaml
from themis_operator.spec import LoRAAdapterSpec, ThemisClusterSpec
from themis_testing.validation import (
    CRD_DIR,
    custom_resource_errors,
    load_crds,
    load_example,
    schema_defaults,
    validate_custom_resource,
)


def test_crds_declare_group_version_names_and_status_subresource():
    crds = load_crds()
    assert set(crds) == {"ThemisCluster", "LoRAAdapter", "ThemisBackup", "ThemisScheduledBackup"}
    for kind, short, plural in (
        ("ThemisCluster", "tc", "themisclusters"),
        ("LoRAAdapter", "lora", "loraadapters"),
        ("ThemisBackup", "tbk", "themisbackups"),
        ("ThemisScheduledBackup", "tsbk", "themisscheduledbackups"),
    ):
        crd = crds[kind]
        assert crd["metadata"]["name"] == f"{plural}.themisdb.io"
        assert crd["spec"]["group"] == "themisdb.io"
        assert crd["spec"]["names"]["shortNames"] == [short]
        alpha, beta = crd["spec"]["versions"]
        assert alpha["name"] == "v1alpha1" and alpha["served"] and alpha["storage"]
        assert alpha["subresources"]["status"] == {}
        # v1beta1: served with the identical schema, conversion None, v1alpha1 stays the storage
        assert beta["name"] == "v1beta1" and beta["served"] and not beta["storage"]
        assert {k: v for k, v in beta.items() if k not in ("name", "storage")} == {
            k: v for k, v in alpha.items() if k not in ("name", "storage")
        }
        assert crd["spec"]["conversion"] == {"strategy": "None"}
    scale = crds["ThemisCluster"]["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {  # kubectl scale and HPAs drive spec.shards
        "specReplicasPath": ".spec.shards",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert "scale" not in crds["LoRAAdapter"]["spec"]["versions"][0]["subresources"]


def test_themiscluster_printer_columns_show_ready_raid_phase_age():
    version = load_crds()["ThemisCluster"]["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == ".status.ready"
    assert columns["RAID"] == ".spec.raidMode"
    assert columns["Phase"] == ".status.phase"
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_status_schema_has_conditions_observed_generation_ring_version_and_shards():
    status = load_crds()["ThemisCluster"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"
    ]
    props = status["properties"]
    assert props["conditions"]["items"]["properties"]["type"]["enum"] == ["Ready", "Progressing", "Degraded"]
    for field in ("observedGeneration", "ringVersion", "shards", "phase"):
        assert field in props


@pytest.mark.parametrize("example", ["themiscluster.yaml", "themiscluster-minimal.yaml", "loraadapter.yaml"])
def test_examples_validate_against_the_crd_schema(example):
    validate_custom_resource(load_example(example))


def test_crd_files_are_single_documents_kubectl_can_apply():
    for path in CRD_DIR.glob("*.yaml"):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert len(docs) == 1 and docs[0]["apiVersion"] == "apiextensions.k8s.io/v1"


def _cluster(**spec):
    body = copy.deepcopy(load_example("themiscluster.yaml"))
    body["spec"].update(spec)
    return body


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"shards": 0}, "less than the minimum"),
        ({"shards": "three"}, "is not of type 'integer'"),
        ({"raidMode": "raid10"}, "is not one of"),
        ({"vnodes": 0}, "less than the minimum"),
        ({"router": {"thresholds": [0.8, 0.6]}}, "is too short"),
        ({"router": {"gamma": -1}}, "less than the minimum"),
        ({"router": {"ttlSeconds": 0}}, "less than or equal to the minimum"),
        ({"engine": {"nDraft": -1}}, "less than the minimum"),
        ({"resources": {"gpus": -1}}, "less than the minimum"),
        ({"resources": {"memory": "lots"}}, "does not match"),
        ({"model": {"sha256": "xyz"}}, "does not match"),
        ({"tls": {"enabled": "yes"}}, "is not of type 'boolean'"),
        ({"replicas": 3}, "Additional properties are not allowed"),
    ],
)
def test_schema_rejects_malformed_themisclusters(change, fragment):
    errors = custom_resource_errors(_cluster(**change))
    assert any(fragment in e for e in errors), errors


def test_schema_requires_spec_and_shards():
    body = _cluster()
    del body["spec"]["shards"]
    assert any("'shards' is a required property" in e for e in custom_resource_errors(body))
    del body["spec"]
    assert any("'spec' is a required property" in e for e in custom_resource_errors(body))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"clusterRef": None}, "is not of type 'object'"),
        ({"rank": 0}, "less than the minimum"),
        ({"placement": {"replicas": 0}}, "less than the minimum"),
        ({"placement": {"shards": ["Not_A_Shard"]}}, "does not match"),
        ({"domain": "Legal Stuff"}, "does not match"),
    ],
)
def test_schema_rejects_malformed_loraadapters(change, fragment):
    body = load_example("loraadapter.yaml")
    body["spec"].update(change)
    errors = custom_resource_errors(body)
    assert any(fragment in e for e in errors), errors


def test_crd_defaults_equal_the_operator_model_defaults():
    """The emulator (and old API servers) skip schema defaulting: the models must agree."""
    crd = schema_defaults("ThemisCluster")
    model = ThemisClusterSpec(shards=3).model_dump(by_alias=True, mode="json")
    for section, values in crd.items():
        if isinstance(values, dict):
            for key, value in values.items():
                assert model[section][key] == value, f"{section}.{key}"
        else:
            assert model[section] == values, section
    lora = schema_defaults("LoRAAdapter")
    lmodel = LoRAAdapterSpec.model_validate({"clusterRef": {"name": "x"}, "domain": "d", "source": "s"})
    assert lmodel.rank == lora["rank"] and lmodel.scale == lora["scale"]
    assert lmodel.placement.replicas == lora["placement"]["replicas"]


def test_operator_install_example_is_valid_for_supported_kubernetes_versions():
    from themis_testing.validation import EXAMPLES_DIR, validate_manifest

    docs = [d for d in yaml.safe_load_all((EXAMPLES_DIR / "operator.yaml").read_text()) if d]
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"]
    for doc in docs:
        validate_manifest(doc)
    rules = docs[1]["rules"]
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    for needed in [
        ("themisdb.io", "themisclusters/status"),
        ("apps", "statefulsets"),
        ("policy", "poddisruptionbudgets"),
        ("", "secrets"),
        ("", "events"),
        ("monitoring.coreos.com", "servicemonitors"),
    ]:
        assert needed in granted


def test_crd_manifests_are_valid_apiextensions_objects_for_supported_versions():
    from themis_testing.validation import validate_manifest

    for crd in load_crds().values():
        validate_manifest(crd)


def _walk(node, path="spec"):
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")


def test_crd_schemas_are_structural():
    """Every node has a type (or preserves unknown fields): what the API server requires."""
    for kind, crd in load_crds().items():
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in _walk(root, kind):
            assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
            for forbidden in ("$ref", "allOf", "anyOf", "oneOf", "not"):
                assert forbidden not in node, f"{path}: {forbidden} breaks structural schemas here"


def test_the_api_server_refuses_scaling_below_the_raid_minimum_by_cel_rules():
    """One rule per RAID mode, with the minimums the plan module (and the operator) use."""
    import re

    from themis_core.plan import MIN_SHARDS_BY_RAID_MODE

    spec = load_crds()["ThemisCluster"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]
    found = {}
    for rule in spec["x-kubernetes-validations"]:
        m = re.fullmatch(r"self\.raidMode != '(raid\d)' \|\| self\.shards >= (\d+)", rule["rule"])
        assert m, rule
        found[m[1]] = int(m[2])
        assert f"scaling below {m[2]} is refused" in rule["message"]
    assert found == {mode: n for mode, n in MIN_SHARDS_BY_RAID_MODE.items() if n > 1}
