"""Every dashboard panel shows data: a real Prometheus scraping a real local cluster.

``themis up --shards 2 --auth`` (LLM on, RAID on, the bundled Gemma 3 270M model, API keys with
one rate-limited tenant) runs on loopback; a short workload touches documents, transactions,
vector search, inference (with a domain hint), embeddings and a tenant over its limit;
Prometheus (the Debian package's binary, launched here with a generated config and a 1 s scrape
interval) scrapes both shards and also loads the chart's alert rules. Then
every panel's PromQL, with Grafana's variables substituted ($namespace = $pod = All), is evaluated over
the test's time range through Prometheus' HTTP API: an error or "No data" (no series, or only
NaN) fails the panel. Panels whose metrics the shard code does not export yet (grep of shard/)
are skipped with the missing names — they start counting the moment the code emits them.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from themis_client import Operation, RateLimited, ThemisClient
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_core.tenant_policy import TenantPolicy
from themis_testing.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None, reason="prometheus is not installed (apt-get install -y prometheus)"
    ),
]


# ---- what the dashboards ask -------------------------------------------------------------------
def dashboard_panels() -> list[tuple[str, str, list[str]]]:
    """(dashboard uid, panel title, [PromQL]) for every non-row panel of dashboards/*.json."""
    found = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            if panel["type"] != "row":
                found.append((board["uid"], panel["title"], [t["expr"] for t in panel["targets"]]))
    return found


def metric_names(expr: str) -> set[str]:
    return {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\bthemis_[a-z0-9_]+", expr)}


def exported_by_shard_code() -> set[str]:
    """Metric names the shard source registers (the quoted ``"themis_..."`` literals)."""
    names: set[str] = set()
    for path in (ROOT / "shard").rglob("*.py"):
        names |= set(re.findall(r"[\"'](themis_[a-z0-9_]+)[\"']", path.read_text()))
    return names


def substitute(expr: str, range_s: int) -> str:
    """Grafana's variables as a dashboard with $namespace = $pod = All over the test's range sends them."""
    return (
        expr.replace("$namespace", ".*")
        .replace("$pod", ".*")
        .replace("$__rate_interval", "30s")
        .replace("$__range", f"{range_s}s")
    )


PANELS = dashboard_panels()

#: Registered by the shard code but not yet on any request path (no series until it is): these
#: panels xfail while empty and pass as soon as the code feeds them.
NOT_WIRED = {
    "themis_domain_routing_decisions_total": "AdaptiveShardRouter.route() is not called by /v1/infer yet",
}


# ---- the cluster, the workload, Prometheus ---------------------------------------------------------
def themis(state_dir: Path, *args: str, env: dict | None = None, timeout: float = 240) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=state_dir.parent,
    )
    assert done.returncode == 0, f"themis {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


LONG_PREFIX = "You are a careful legal assistant. " * 40
TENANT_KEY = new_key()
#: A tenant allowed one request, then one per 100 s: its second request is throttled.
TENANT_KEYS = "; ".join(
    [
        TenantPolicy("acme", requests_per_s=0.01).line(),
        entry_for(TENANT_KEY, Role.client, "acme-app", "acme").line(),
    ]
)


def workload(urls: list[str], admin_key: str) -> None:
    """Small, but through every feature the dashboards show."""
    with ThemisClient(urls[0], api_key=TENANT_KEY, timeout=120) as tenant:
        tenant.infer("Hello", max_tokens=2)
        with pytest.raises(RateLimited):
            tenant.infer("Hello", max_tokens=2)
    shards = [ThemisClient(u, api_key=admin_key, timeout=120) for u in urls]
    a, b = shards[0], shards[-1]
    try:
        a.declare_collection("notes", dimension=2)
        for i in range(12):
            shards[i % len(shards)].put("notes", f"n{i}", {"embedding": [1.0, i / 10], "i": i})
        a.transaction([Operation.put("notes", "tx", {"embedding": [0.5, 0.5]})])
        for shard in shards:
            shard.get("notes", "n1")
            shard.search("notes", vector=[1.0, 0.0], k=3)
        for shard, prompt, params in (
            (a, "The capital of France is", {"max_tokens": 8, "temperature": 0}),
            (b, "Contract law says", {"max_tokens": 6, "domain": "legal"}),
            # The same prompt again: a KV-prefix cache has something to hit.
            (a, "The capital of France is", {"max_tokens": 4, "temperature": 0}),
            # A long shared prefix (several KV blocks), twice: a miss, then a hit.
            (a, LONG_PREFIX + " Question one:", {"max_tokens": 2, "temperature": 0}),
            (a, LONG_PREFIX + " Question two:", {"max_tokens": 2, "temperature": 0}),
            # Repetitive text with speculation on: prompt-lookup drafts to verify.
            (
                b,
                "1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2,",
                {"max_tokens": 12, "temperature": 0, "speculative": True},
            ),
        ):
            shard.infer(prompt, **params)
        a.infer_batch([{"prompt": "One, two,", "max_tokens": 4}, {"prompt": "Red, green,", "max_tokens": 4}])
        b.embed(["a short text to embed"])
    finally:
        for shard in shards:
            shard.close()


def prometheus_config(targets: list[str], rule_file: Path) -> dict:
    """Each target labelled as a ServiceMonitor labels a shard pod (namespace, pod), so the
    dashboards' variables and legends see what they see in Kubernetes."""
    static = [
        {"targets": [t], "labels": {"namespace": "e2e", "pod": f"themis-{i}"}} for i, t in enumerate(targets)
    ]
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [{"job_name": "themis", "static_configs": static}],
    }


def chart_alert_rules() -> dict:
    """The PrometheusRule the chart renders (default thresholds), as a Prometheus rule file."""
    helm_python = pytest.importorskip("helm_python", reason="pip install helm-python-sdk==0.2.2")
    helm_python.disable_logging()
    out = helm_python.Chart.load(ROOT / "charts" / "themis").render(
        {"prometheusRule": {"enabled": True}}, name="themis", namespace="themis"
    )
    return {"groups": yaml.safe_load(out["themis/templates/prometheusrule.yaml"])["spec"]["groups"]}


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{what} not within {timeout}s")


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """Cluster up, Prometheus scraping it, workload done: yields a PromQL range evaluator."""
    tmp = tmp_path_factory.mktemp("dashboards")
    state_dir = tmp / ".themis"
    started = time.time()
    # One llama.cpp thread per shard: two shards on a shared 2-core machine.
    env = {
        **os.environ,
        "THEMIS_RAID_ENABLED": "true",
        "THEMIS_LLM_N_THREADS": os.environ.get("THEMIS_LLM_N_THREADS", "1"),
        "THEMIS_AUTH_KEYS": TENANT_KEYS,
    }
    prometheus = None
    try:
        themis(
            state_dir,
            "up",
            "--shards",
            "2",
            "--base-port",
            "0",
            "--auth",
            "--data-root",
            str(tmp / "data"),
            env=env,
        )
        urls = [s["url"] for s in json.loads((state_dir / "cluster.json").read_text())["shards"]]
        rules = tmp / "themis-alerts.yaml"
        rules.write_text(yaml.safe_dump(chart_alert_rules()))
        config = tmp / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config([u.removeprefix("http://") for u in urls], rules)))
        port = free_port()
        log = (tmp / "prometheus.log").open("wb")
        prometheus = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        api = f"http://127.0.0.1:{port}/api/v1"  # raw httpx from here on: Prometheus' API, not Themis
        wait_for(
            lambda: (
                httpx.get(f"{api}/targets", timeout=2).json()["data"]["activeTargets"]
                and all(
                    t["health"] == "up"
                    for t in httpx.get(f"{api}/targets", timeout=2).json()["data"]["activeTargets"]
                )
            ),
            30,
            "both shards scraped",
        )
        workload(urls, (state_dir / "auth" / "admin.key").read_text().strip())
        time.sleep(3)  # a few more scrapes after the last request

        def evaluate(expr: str) -> dict:
            end = time.time()
            r = httpx.get(
                f"{api}/query_range",
                timeout=30,
                params={
                    "query": substitute(expr, int(end - started) + 1),
                    "start": started,
                    "end": end,
                    "step": "1s",
                },
            )
            body = r.json()
            assert r.status_code == 200 and body["status"] == "success", f"{expr}\n→ {body}"
            return body["data"]

        yield {"evaluate": evaluate, "api": api, "urls": urls}
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(15)
        if (state_dir / "cluster.json").exists():
            themis(state_dir, "down", "--grace", "5", timeout=60)


def has_data(data: dict) -> bool:
    return any(not math.isnan(float(v)) for series in data["result"] for _, v in series["values"])


def evaluated_until_data(evaluate, queries: list[str], timeout: float) -> list[dict]:
    """Every query's result (each must run without error), re-evaluated every second until one
    shows data or ``timeout`` passes: scrapes keep arriving after the workload."""
    deadline = time.monotonic() + timeout
    while True:
        results = [evaluate(q) for q in queries]
        if any(has_data(r) for r in results) or time.monotonic() > deadline:
            return results
        time.sleep(1)


# ---- the tests ------------------------------------------------------------------------------------
def test_every_dashboard_has_panels():
    assert {uid for uid, *_ in PANELS} == {
        "themis-overview",
        "themis-engine",
        "themis-cluster",
        "themis-raid",
    }
    assert len(PANELS) >= 30


@pytest.mark.parametrize(("uid", "title", "queries"), PANELS, ids=[f"{u}:{t}" for u, t, _ in PANELS])
def test_panel_shows_data(observed, uid, title, queries):
    missing = sorted(set().union(*map(metric_names, queries)) - exported_by_shard_code())
    if missing:
        pytest.skip(f"not exported by the shard code yet: {', '.join(missing)}")
    waiting = sorted(set().union(*map(metric_names, queries)) & set(NOT_WIRED))
    # A rate over a 30 s window needs two samples of the series: wait for them, never assume.
    results = evaluated_until_data(observed["evaluate"], queries, timeout=5 if waiting else 90)
    if waiting and not any(has_data(r) for r in results):
        pytest.xfail("; ".join(f"{m}: {NOT_WIRED[m]}" for m in waiting))
    assert any(has_data(r) for r in results), f"{uid} / {title}: No data\n" + "\n".join(queries)


def test_the_charts_alert_rules_load_in_prometheus(observed):
    groups = httpx.get(f"{observed['api']}/rules", timeout=10).json()["data"]["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert set(rules) >= {
        "ThemisShardDown",
        "ThemisRaidDegraded",
        "ThemisRoutingFallbackSpike",
        "ThemisSpeculationFallbackSpike",
        "ThemisLLMQueueSaturated",
    }
    assert all(r["health"] != "err" for r in rules.values()), {
        n: r.get("lastError") for n, r in rules.items()
    }
    firing = {n for n, r in rules.items() if r["state"] == "firing"}
    assert not firing & {
        "ThemisShardDown",
        "ThemisShardDeclaredDead",
        "ThemisRaidDegraded",
        "ThemisRaidUnrecoverable",
    }, firing
