"""charts/themis as a specification: what it renders for each value set, and that it is valid.

Rendering and linting go through helm-python-sdk (Helm's own Go code, no binary); built-in
manifests are validated with kubernetes-validate (strict) for Kubernetes 1.29 and 1.37, the
ThemisCluster against the CRD's openAPIV3Schema.
"""

from __future__ import annotations

import json

import pytest
import yaml

from .conftest import CHART, NAMESPACE, ROOT, VALUE_SETS, by_kind, one

KUBERNETES_VERSIONS = ("1.29", "1.37")
CUSTOM_GROUPS = ("themisdb.io/", "monitoring.coreos.com/")


# ---- lint & schema ----------------------------------------------------------------------------
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
@pytest.mark.parametrize("kube_version", ["v1.29.0", "v1.37.0"])
def test_helm_lint_strict_is_clean(helm, values, kube_version):
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=kube_version)
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize(
    "bad",
    [
        {"operator": {"watch": "everywhere"}},
        {"operatr": {}},
        {"cluster": {"enabled": True, "name": "Bad_Name", "spec": {"shards": 1}}},
        {"cluster": {"spec": {"shards": 0}}},
        {"serviceMonitor": {"interval": "30 seconds"}},
        {
            "prometheusRule": {
                "rules": {"routingFallbackSpike": {"ratio": 2, "for": "5m", "severity": "warning"}}
            }
        },
        {"prometheusRule": {"rules": {"shardDown": {"for": "2m", "severity": "page-everyone"}}}},
    ],
)
def test_values_schema_rejects_mistakes(helm, chart, bad):
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)


def test_values_schema_documents_every_default(chart):
    chart.validate_schema({})  # the defaults themselves are valid
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) == set(schema["properties"])


# ---- every manifest is valid ------------------------------------------------------------------
@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_rendered_manifest_is_valid(render, name):
    import kubernetes_validate
    from themis_testing.validation import validate_custom_resource

    docs = render(VALUE_SETS[name], name)
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith(CUSTOM_GROUPS):
            if doc["apiVersion"].startswith("themisdb.io/"):
                validate_custom_resource(doc)
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "themis"
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE


def test_defaults_render_operator_rbac_and_dashboards_only(render):
    kinds = sorted({d["kind"] for d in render({}, "defaults")})
    # (the Service is the operator's /metrics)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceAccount",
    ]


# ---- CRDs: one source ---------------------------------------------------------------------------
def test_chart_crds_are_crds_dir_byte_for_byte(chart):
    assert (CHART / "crds").resolve() == (ROOT / "crds").resolve(), "charts/themis/crds must link to crds/"
    shipped = {c["name"].removeprefix("crds/"): c["data"] for c in chart.crds}
    source = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    assert set(shipped) == set(source) and source
    for name, data in shipped.items():
        assert data.encode() == source[name], f"{name} differs from crds/{name}"


def test_packaged_chart_carries_the_linked_crds_and_dashboards(helm, tmp_path):
    """`helm package` resolves the links: the archive is self-contained."""
    import tarfile

    archive = helm.package(CHART, destination=tmp_path)
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for path in (ROOT / "crds").glob("*.yaml"):
            assert tar.extractfile(members[f"themis/crds/{path.name}"]).read() == path.read_bytes()
        for path in (ROOT / "dashboards").glob("*.json"):
            packed = tar.extractfile(members[f"themis/files/dashboards/{path.name}"]).read()
            assert packed == path.read_bytes()


# ---- RBAC: exactly the operator's needs ---------------------------------------------------------
def _rules(docs: list[dict], kind: str) -> set[tuple]:
    return {
        (group, resource, verb)
        for doc in by_kind(docs, kind)
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _operator_needs() -> set[tuple]:
    example = [d for d in yaml.safe_load_all((ROOT / "examples" / "operator.yaml").read_text()) if d]
    return _rules(example, "ClusterRole")


CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces"}


def test_cluster_wide_rbac_equals_the_operators_permissions(render):
    docs = render({}, "defaults")
    assert _rules(docs, "ClusterRole") == _operator_needs()
    assert not by_kind(docs, "Role")
    binding = one(docs, "ClusterRoleBinding")
    sa = one(docs, "ServiceAccount")
    assert binding["roleRef"]["name"] == one(docs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
    ]


def test_namespaced_rbac_keeps_only_discovery_cluster_wide(render):
    docs = render(VALUE_SETS["namespaced"], "namespaced")
    cluster, namespaced = _rules(docs, "ClusterRole"), _rules(docs, "Role")
    assert cluster | namespaced == _operator_needs()
    assert {r for _, r, _ in cluster} == CLUSTER_SCOPED
    assert {v for *_, v in cluster} == {"get", "list", "watch"}
    assert not {r for _, r, _ in namespaced} & CLUSTER_SCOPED
    assert one(docs, "RoleBinding")["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": one(docs, "Role")["metadata"]["name"],
    }


def test_no_wildcards_no_rbac_access_and_pods_read_only(render):
    """Pods are read (why a shard cannot start), never written, exec'd into or deleted."""
    for name in VALUE_SETS:
        for group, resource, verb in _rules(render(VALUE_SETS[name], name), "ClusterRole"):
            assert "*" not in (group, resource, verb)
            assert resource not in ("pods/exec", "pods/log", "roles", "clusterroles", "rolebindings")
            assert resource != "pods" or verb in ("get", "list", "watch")


def test_rbac_and_service_account_can_be_left_to_the_user(render):
    docs = render(VALUE_SETS["minimal"], "minimal")
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ServiceAccount")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"


# ---- the operator Deployment -------------------------------------------------------------------
def test_operator_runs_non_root_with_resources_and_probes(render):
    deploy = one(render({}, "defaults"), "Deployment")
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
    assert container["resources"]["limits"]["memory"] == "256Mi"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["image"] == "ghcr.io/themisdb/themis-operator:0.1.0"  # appVersion
    assert container["command"] == [
        "themis-operator",
        "--all-namespaces",
        "--liveness",
        "http://0.0.0.0:8081/healthz",
    ]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "THEMIS_OPERATOR_STATUS_INTERVAL_S": "30",
        "THEMIS_OPERATOR_PROBE_TIMEOUT_S": "3",
        "THEMIS_OPERATOR_METRICS_PORT": "8082",
    }
    assert pod["serviceAccountName"] == "themis-operator"


def test_operator_command_line_follows_values(render):
    ns = one(render(VALUE_SETS["namespaced"], "namespaced"), "Deployment")
    assert ns["spec"]["template"]["spec"]["containers"][0]["command"][1:3] == ["--namespace", NAMESPACE]
    everything = one(render(VALUE_SETS["everything"], "everything"), "Deployment")
    container = everything["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == "--verbose"
    assert {"name": "EXTRA", "value": "1"} in container["env"]


def test_the_operator_cli_accepts_the_rendered_command(render):
    """The Deployment's arguments are ones themis-operator's argparse accepts."""
    import argparse
    from unittest import mock

    from themis_operator import __main__ as cli

    for name in ("defaults", "namespaced", "everything"):
        command = one(render(VALUE_SETS[name], name), "Deployment")["spec"]["template"]["spec"]["containers"][
            0
        ]["command"]
        assert command[0] == "themis-operator"
        with (
            mock.patch.object(argparse.ArgumentParser, "error", side_effect=AssertionError),
            mock.patch.dict("sys.modules", {"kopf": mock.MagicMock()}),
            mock.patch("themis_operator.__main__.logging.basicConfig"),
        ):
            import kopf  # the mock: nothing runs

            cli.main(command[1:])
            kopf.run.assert_called_once()


# ---- optional ThemisCluster ------------------------------------------------------------------------
def test_cluster_from_values_is_a_valid_themiscluster(render):
    tc = one(render(VALUE_SETS["everything"], "everything"), "ThemisCluster")
    assert tc["apiVersion"] == "themisdb.io/v1alpha1"
    assert tc["metadata"] == {**tc["metadata"], "name": "demo", "namespace": NAMESPACE}
    assert tc["spec"] == {"shards": 3, "raidMode": "raid5", "auth": {"enabled": True}}  # keys on in the chart


# ---- dashboards for the Grafana sidecar -------------------------------------------------------------
def test_one_configmap_per_dashboard_labelled_for_the_sidecar(render):
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert files, "dashboards/*.json missing"
    maps = [d for d in render({}, "defaults") if d["kind"] == "ConfigMap"]
    assert len(maps) == len(files)
    by_key = {key: (cm, text) for cm in maps for key, text in cm["data"].items()}
    for path in files:
        cm, text = by_key[path.name]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["grafana_folder"] == "Themis"
        assert text == path.read_text().rstrip("\n")
        json.loads(text)


def test_dashboards_can_be_switched_off(render):
    assert not by_kind(render(VALUE_SETS["minimal"], "minimal"), "ConfigMap")


# ---- ServiceMonitor ------------------------------------------------------------------------------
def shards_monitor(docs: list[dict]) -> dict:
    """The shards' ServiceMonitor (the other one scrapes the operator's own /metrics)."""
    (sm,) = [d for d in by_kind(docs, "ServiceMonitor") if d["metadata"]["name"].endswith("-shards")]
    return sm


def test_service_monitor_scrapes_the_shards_client_services(render):
    sm = shards_monitor(render(VALUE_SETS["namespaced"], "namespaced"))
    assert sm["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "themis",
        "app.kubernetes.io/component": "client",
        "app.kubernetes.io/managed-by": "themis-operator",
    }
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["themis-system", "tenants"]}
    assert sm["spec"]["jobLabel"] == "app.kubernetes.io/name"  # job="themis", as the alerts expect
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics" and endpoint["scheme"] == "http"


def test_service_monitor_uses_the_clusters_ca_when_tls_is_on(render):
    sm = shards_monitor(render(VALUE_SETS["everything"], "everything"))
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "demo-tls", "key": "ca.crt"}},
        "serverName": f"demo.{NAMESPACE}.svc",
    }


def test_the_shards_client_service_matches_the_service_monitor(render):
    """The operator's client Service carries the labels and port name the ServiceMonitor selects."""
    from themis_operator.builders.context import ClusterContext  # noqa: F401 (import check)
    from themis_operator.names import labels

    sm = shards_monitor(render(VALUE_SETS["namespaced"], "namespaced"))
    service_labels = labels("mini", "client")
    assert sm["spec"]["selector"]["matchLabels"].items() <= service_labels.items()


def test_monitoring_objects_only_when_enabled(render):
    docs = render({}, "defaults")
    assert not by_kind(docs, "ServiceMonitor") and not by_kind(docs, "PrometheusRule")


# ---- NOTES.txt -------------------------------------------------------------------------------------
def test_notes_tell_how_to_watch_the_operator_and_the_cluster(chart):
    notes = chart.render(VALUE_SETS["everything"], name="themis", namespace=NAMESPACE)[
        "themis/templates/NOTES.txt"
    ]
    assert "kubectl -n themis-system rollout status deployment/themis-operator" in notes
    assert "kubectl -n themis-system get tc demo -w" in notes
    assert "PrometheusRule themis-alerts" in notes
