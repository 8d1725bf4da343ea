"""Operator tests: importable packages from a plain checkout, the emulator, kopf in a thread."""

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for sub in ("shard", "operator", "testing"):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))


def eventually(check, timeout: float = 45.0, interval: float = 0.2):
    """Poll ``check`` until it returns a truthy value (returned) or fails past ``timeout``.
    The default is patience for a loaded 2-core CI machine: a check that holds returns at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if result:
                return result
        except (AssertionError, KeyError, IndexError, TypeError):
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            code = getattr(check, "__code__", None)
            where = f"{Path(code.co_filename).name}:{code.co_firstlineno}" if code else repr(check)
            raise AssertionError(f"not true within {timeout}s: {check.__doc__ or where}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def emulator():
    from themis_testing.emulator import running_emulator

    with running_emulator() as server:
        yield server


@pytest.fixture(scope="module")
def kubeconfig(emulator, tmp_path_factory):
    return emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture(scope="module")
def kube_node(kubeconfig, tmp_path_factory):
    """The process node on the emulator: the operator's StatefulSets become real shard processes
    (each pod on its own loopback address, named in /etc/hosts), which the operator probes."""
    from themis_testing.kube_node.stack import Stack

    env = {
        "THEMIS_KUBE_NODE_BACKOFF_INITIAL_S": "1",
        "THEMIS_KUBE_NODE_BACKOFF_MAX_S": "10",
        "THEMIS_KUBE_NODE_PROBE_PERIOD_MAX_S": "1",
    }
    directory = tmp_path_factory.mktemp("node")
    with Stack(directory, kubeconfig=kubeconfig, operator=False, node_env=env) as stack:
        yield stack
    print((directory / "node.log").read_text()[-3000:])


@pytest.fixture(scope="module")
def crds(emulator):
    import httpx
    import yaml

    for path in sorted((ROOT / "crds").glob("*.yaml")):
        response = httpx.post(
            f"{emulator.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            json=yaml.safe_load(path.read_text()),
        )
        assert response.status_code == 201, response.text
    # The Prometheus Operator's CRD, so ServiceMonitors can be created.
    from themis_testing.emulator import Kind

    emulator.call(
        lambda e: e.register(Kind("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor"))
    )


@pytest.fixture(scope="module")
def operator_env(kubeconfig):
    """Settings the in-process operator reads (the timer interval is fixed at import time)."""
    env = {
        "KUBECONFIG": str(kubeconfig),
        "THEMIS_OPERATOR_STATUS_INTERVAL_S": "1",
        "THEMIS_OPERATOR_PROBE_TIMEOUT_S": "1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from kubernetes.config import kube_config

    saved_default = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(kubeconfig)  # read at import by the client
    yield env
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = saved_default
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def kopf_runner(extra_args=()):
    import themis_operator.handlers.cluster as cluster_handlers
    from kopf.testing import KopfRunner

    assert cluster_handlers._INTERVAL == 1, "handlers were imported before the test settings were applied"
    return KopfRunner(
        ["run", "--standalone", "-A", *extra_args, "-m", "themis_operator.handlers"], timeout=60
    )


@pytest.fixture(scope="module")
def running_operator(crds, operator_env):
    with kopf_runner() as runner:
        time.sleep(1.0)  # let the watchers start
        yield runner
    assert runner.exception is None, runner.output[-3000:]


# -- an in-memory API with the example ThemisCluster (reconcile specs) ------------------------------
NS = "default"


@pytest.fixture
def kube():
    from themis_testing.fakekube import FakeKube

    return FakeKube()


def cluster(kube, **spec) -> dict:
    """The example ThemisCluster with ``spec`` fields replaced, stored in ``kube``."""
    from themis_testing.validation import load_example

    body = load_example("themiscluster.yaml")
    body["spec"].update(spec)
    return kube.add(body)


def plan_of(kube, name: str = "demo"):
    """The plan the cluster's ConfigMap publishes."""
    from themis_core.plan import ClusterPlan

    return ClusterPlan.from_json(kube.get("v1", "ConfigMap", NS, f"{name}-plan")["data"]["plan.json"])
