"""Chart tests: render charts/themis offline with helm-python-sdk (no helm binary, no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "themis"
RELEASE, NAMESPACE = "themis", "themis-system"

#: Value sets every structural test runs against: defaults, everything on, namespaced, trimmed.
VALUE_SETS: dict[str, dict] = {
    "defaults": {},
    "everything": {
        "cluster": {"enabled": True, "name": "demo", "spec": {"shards": 3, "raidMode": "raid5"}},
        "autoscaling": {"enabled": True, "minShards": 3, "maxShards": 6},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "operator": {
            "verbose": True,
            "serviceMonitor": {"enabled": True},
            "podAnnotations": {"a": "b"},
            "nodeSelector": {"pool": "system"},
            "extraEnv": [{"name": "EXTRA", "value": "1"}],
        },
    },
    "namespaced": {
        "operator": {"watch": "namespace"},
        "cluster": {"enabled": True, "name": "mini", "spec": {"shards": 2, "tls": {"enabled": False}}},
        "serviceMonitor": {"enabled": True, "namespaces": ["themis-system", "tenants"]},
    },
    "minimal": {
        "dashboards": {"enabled": False},
        "serviceAccount": {"create": False, "name": "existing"},
        "rbac": {"create": False},
        "fullnameOverride": "tdb",
    },
}


@pytest.fixture(scope="session")
def helm():
    helm_python = pytest.importorskip("helm_python", reason="pip install helm-python-sdk==0.2.2")
    helm_python.disable_logging()  # the loader logs every followed symlink (crds/, files/dashboards)
    return helm_python


@pytest.fixture(scope="session")
def chart(helm):
    return helm.Chart.load(CHART)


@pytest.fixture(scope="session")
def render(chart):
    """values → list of rendered manifests (dicts), in template order; NOTES.txt excluded."""
    cache: dict[str, list[dict]] = {}

    def _render(values: dict, key: str | None = None) -> list[dict]:
        if key is None or key not in cache:
            out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
            docs = [
                doc
                for path, text in sorted(out.items())
                if not path.endswith("NOTES.txt")
                for doc in yaml.safe_load_all(text)
                if doc
            ]
            if key is None:
                return docs
            cache[key] = docs
        return cache[key]

    return _render


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]
