"""dashboards/*.json as a specification (no Grafana here: shape, variables, PromQL that parses).

Whether each panel shows data is e2e/test_dashboards.py's job (real Prometheus, real cluster).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BOARDS = {p.stem: json.loads(p.read_text()) for p in sorted((ROOT / "dashboards").glob("*.json"))}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def builder():
    spec = importlib.util.spec_from_file_location("build_dashboards", ROOT / "tools" / "build_dashboards.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def panels(board: dict) -> list[dict]:
    return [p for p in board["panels"] if p["type"] != "row"]


def exprs(board: dict) -> list[str]:
    return [t["expr"] for p in panels(board) for t in p["targets"]]


def all_exprs() -> str:
    return "\n".join(e for b in BOARDS.values() for e in exprs(b))


def test_committed_json_is_what_the_builder_writes(tmp_path):
    assert builder().main(["--out", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.glob("*.json")} == {
        f"{name}.json": (ROOT / "dashboards" / f"{name}.json").read_text() for name in BOARDS
    }


def test_four_dashboards_with_stable_uids():
    assert set(BOARDS) == {"themis-overview", "themis-engine", "themis-cluster", "themis-raid"}
    for name, board in BOARDS.items():
        assert board["uid"] == name and board["title"].startswith("Themis / ")
        assert "themis" in board["tags"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_datasource_namespace_and_pod_variables(name):
    variables = {v["name"]: v for v in BOARDS[name]["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "pod"]
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    namespace, pod = variables["namespace"], variables["pod"]
    assert namespace["definition"] == "label_values(themis_shard_info, namespace)"
    assert pod["definition"] == 'label_values(themis_shard_info{namespace=~"$namespace"}, pod)'  # cascades
    for v in (namespace, pod):
        assert v["type"] == "query" and v["datasource"] == DATASOURCE
        assert v["includeAll"] and v["multi"] and v["allValue"] == ".*"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_no_panel_names_or_groups_shards_by_instance(name):
    """``instance`` is the pod IP under a ServiceMonitor: it changes on every restart."""
    for panel in panels(BOARDS[name]):
        for target in panel["targets"]:
            assert "instance" not in target["expr"] and "instance" not in target["legendFormat"], target


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_panel_uses_both_variables(name):
    for panel in panels(BOARDS[name]):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE
            for selector in re.findall(r"\bthemis_[a-z0-9_]+\{[^}]*\}", target["expr"]):
                assert 'namespace=~"$namespace", pod=~"$pod"' in selector, (panel["title"], target["expr"])
            assert not re.search(r"\bthemis_[a-z0-9_]+(?![a-z0-9_{])", target["expr"]), target["expr"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_layout_ids_and_refids(name):
    board = BOARDS[name]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
    for panel in panels(board):
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
    cells = set()  # no two panels overlap
    for panel in board["panels"]:
        g = panel["gridPos"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & area, panel["title"]
        cells |= area


def test_the_papers_panels_are_on_the_overview():
    overview = all_exprs_of("themis-overview")
    assert "themis_domain_routing_fallback_total" in overview
    assert (
        "histogram_quantile(0.99, sum by (le) (rate(themis_batch_fan_out_latency_seconds_bucket" in overview
    )
    assert re.search(
        r"themis_speculation_accepted_tokens_total.*\n/\n.*themis_speculation_draft_tokens_total", overview
    )
    assert re.search(
        r"themis_kv_prefix_hits_total.*\n/\n.*themis_kv_prefix_hits_total.*themis_kv_prefix_misses_total",
        overview,
    )
    assert "themis_speculation_fallback_total" in overview and "themis_draft_roundtrip_seconds" in overview


def all_exprs_of(name: str) -> str:
    return "\n".join(exprs(BOARDS[name]))


@pytest.mark.parametrize(
    ("name", "metrics"),
    [
        (
            "themis-engine",
            [
                "themis_llm_ttft_seconds_bucket",
                "themis_llm_inter_token_seconds_bucket",
                "themis_llm_tokens_generated_total",
                "themis_llm_queued_requests",
                "themis_pending_llm_requests",
                "themis_llm_queue_seconds_bucket",
                "themis_llm_kv_pages_used",
                "themis_llm_kv_pages_free",
                "themis_llm_preemptions_total",
                "themis_active_lora_adapters",
                "themis_tenant_requests_total",
                "themis_tenant_throttled_total",
                "themis_tenant_tokens_total",
                "themis_tenant_inflight",
                "themis_tenant_waiting",
            ],
        ),
        (
            "themis-cluster",
            [
                "themis_gossip_members",
                "themis_gossip_exchanges_total",
                "themis_circuit_breaker_state",
                "themis_replication_items_total",
                "themis_hints_pending",
                "themis_remote_requests_total",
            ],
        ),
        (
            "themis-raid",
            [
                "themis_raid_units",
                "themis_raid_operation_progress_ratio",
                "themis_raid_unrecoverable_stripes",
                "themis_raid_units_repaired_total",
            ],
        ),
    ],
)
def test_engine_cluster_and_raid_panels(name, metrics):
    text = all_exprs_of(name)
    for metric in metrics:
        assert metric in text, metric
    if name == "themis-engine":
        for q in ("0.5", "0.99"):
            assert f"histogram_quantile({q}, sum by (le) (rate(themis_llm_ttft_seconds_bucket" in text
            assert f"histogram_quantile({q}, sum by (le) (rate(themis_llm_inter_token_seconds_bucket" in text


def test_histograms_are_never_averaged_as_gauges():
    for expr in all_exprs().splitlines():
        for metric in re.findall(r"\b(themis_[a-z0-9_]+_bucket)\b", expr):
            assert "histogram_quantile(" in expr, (metric, expr)


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (apt-get install -y prometheus)"
)
def test_every_query_parses_in_promtool(tmp_path):
    """promtool parses each query as a recording rule (Grafana's variables substituted)."""
    rules = [
        {
            "record": f"themis:panel_{i}",
            "expr": e.replace("$namespace", ".*")
            .replace("$pod", ".*")
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h"),
        }
        for i, e in enumerate(e for b in BOARDS.values() for e in exprs(b))
    ]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def _lost(ours, theirs, path: str = "") -> list[str]:
    """Paths of ``ours`` that ``theirs`` lacks or holds differently."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return [path]
        return [
            p
            for k, v in ours.items()
            for p in ([f"{path}.{k}"] if k not in theirs else _lost(v, theirs[k], f"{path}.{k}"))
        ]
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return [path]
        return [
            p for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) for p in _lost(a, b, f"{path}[{i}]")
        ]
    return [] if ours == theirs else [f"{path}: {ours!r} != {theirs!r}"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_grafana_foundation_sdk_reads_every_field(name):
    """Decoded into the SDK's typed Grafana 11 models and encoded again, nothing is lost but the
    variable's display-only ``definition`` (which the SDK's model does not carry)."""
    sdk = pytest.importorskip(
        "grafana_foundation_sdk", reason="pip install 'grafana-foundation-sdk==1769699379!11.6.0'"
    )
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    assert sdk
    again = json.loads(JSONEncoder().encode(Dashboard.from_json(BOARDS[name])))
    lost = {re.sub(r"\[\d+\]", "[]", p) for p in _lost(BOARDS[name], again)}
    assert lost <= {".templating.list[].definition"}, sorted(lost)
    assert again["panels"][1]["targets"][0]["expr"] == BOARDS[name]["panels"][1]["targets"][0]["expr"]
