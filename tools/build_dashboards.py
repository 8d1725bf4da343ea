"""Build the Grafana dashboards in dashboards/ from one pure description (no Grafana needed).

    python tools/build_dashboards.py          # write dashboards/*.json
    python tools/build_dashboards.py --check  # fail when the committed JSON is stale

Every panel queries Prometheus through the ``$datasource`` variable and filters shards with
``$namespace`` and ``$pod`` (the target labels a ServiceMonitor gives every scraped pod, listed
from ``themis_shard_info``); series are grouped and named by pod, never by ``instance`` (a pod
IP, which changes on every restart). Metric names
follow ARCHITECTURE.md §4; histograms become quantiles in PromQL (``histogram_quantile``).

Why one ~680-line file: it is data — four dashboards' panels, each a few declarative lines — and
reads best as one list next to the builder helpers it uses.
tests/dashboards checks the JSON's shape; e2e/test_dashboards.py evaluates every query against a
real Prometheus scraping a real local cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dashboards"
SCHEMA_VERSION = 39  # Grafana 11.x
SHARD = 'namespace=~"$namespace", pod=~"$pod"'
BY_POD = "namespace, pod"
RATE = "$__rate_interval"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"  # timeseries | stat | gauge | state-timeline
    width: int = 8
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = ("themis",)


# ---- PromQL helpers ---------------------------------------------------------------------------
def sel(metric: str, extra: str = "") -> str:
    return f"{metric}{{{SHARD}{', ' + extra if extra else ''}}}"


def rate(metric: str, by: str = "", extra: str = "") -> str:
    grouping = f" by ({by}) " if by else ""
    return f"sum{grouping}(rate({sel(metric, extra)}[{RATE}]))"


def quantile(q: float, histogram: str, by: str = "") -> str:
    return f"histogram_quantile({q}, {rate(histogram + '_bucket', ', '.join(filter(None, [by, 'le'])))})"


def quantiles(histogram: str, qs=(0.5, 0.99), by: str = "") -> tuple[Query, ...]:
    suffix = f" {{{{{by}}}}}" if by else ""
    return tuple(Query(quantile(q, histogram, by), f"p{round(q * 100)}{suffix}") for q in qs)


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


# ---- the dashboards --------------------------------------------------------------------------------
PAPER = Dashboard(
    uid="themis-overview",
    title="Themis / Overview (paper panels)",
    description="The design paper's panels (§VII-B): domain routing fallbacks, batch fan-out latency, "
    "speculative decoding and KV-prefix reuse.",
    rows=(
        Row(
            "Routing",
            (
                Panel(
                    "Domain routing fallbacks",
                    (Query(rate("themis_domain_routing_fallback_total"), "fallbacks/s"),),
                    "reqps",
                    "Domain-hinted requests served by consistent-hash routing (no adapter above θ3, or "
                    "every candidate failed). themis_domain_routing_fallback_total",
                ),
                Panel(
                    "Routing decisions by tier",
                    (Query(rate("themis_domain_routing_decisions_total", "tier"), "tier {{tier}}"),),
                    "reqps",
                    "Tiers 1-3 (adapter score above θ1/θ2/θ3), fallback, none (no domain hint).",
                ),
                Panel(
                    "Batch fan-out latency p99",
                    quantiles("themis_batch_fan_out_latency_seconds", (0.99,)),
                    "s",
                    "Scatter-gather /v1/infer:batch latency across shards, p99.",
                ),
            ),
        ),
        Row(
            "Speculative decoding & KV-prefix cache",
            (
                Panel(
                    "Speculation accept rate",
                    (
                        Query(
                            ratio(
                                rate("themis_speculation_accepted_tokens_total"),
                                rate("themis_speculation_draft_tokens_total"),
                            ),
                            "accepted / drafted",
                        ),
                    ),
                    "percentunit",
                    "Accepted draft tokens per drafted token "
                    "(themis_speculation_{accepted,draft}_tokens_total).",
                    width=6,
                ),
                Panel(
                    "Speculation fallbacks",
                    (Query(rate("themis_speculation_fallback_total"), "fallbacks/s"),),
                    "reqps",
                    "Requests decoded without speculation after a draft failure.",
                    width=6,
                ),
                Panel(
                    "Draft round-trip",
                    quantiles("themis_draft_roundtrip_seconds"),
                    "s",
                    "Draft-shard round trip per speculation step.",
                    width=6,
                ),
                Panel(
                    "KV-prefix hit rate",
                    (
                        Query(
                            ratio(
                                rate("themis_kv_prefix_hits_total"),
                                f"({rate('themis_kv_prefix_hits_total')}"
                                f" + {rate('themis_kv_prefix_misses_total')})",
                            ),
                            "hit rate",
                        ),
                    ),
                    "percentunit",
                    "Prompts whose KV prefix was restored instead of recomputed.",
                    width=6,
                ),
            ),
        ),
    ),
)

ENGINE = Dashboard(
    uid="themis-engine",
    title="Themis / LLM engine",
    description="Continuous-batching llama.cpp engine per shard: latency, throughput, queue, KV cache.",
    rows=(
        Row(
            "Latency",
            (
                Panel("Time to first token", quantiles("themis_llm_ttft_seconds"), "s", width=8),
                Panel("Inter-token latency", quantiles("themis_llm_inter_token_seconds"), "s", width=8),
                Panel("Request latency", quantiles("themis_llm_request_seconds"), "s", width=8),
            ),
        ),
        Row(
            "Throughput",
            (
                Panel(
                    "Tokens/s",
                    (
                        Query(rate("themis_llm_tokens_generated_total", BY_POD), "generated {{pod}}"),
                        Query(rate("themis_llm_prompt_tokens_total", BY_POD), "prompt {{pod}}"),
                    ),
                    "short",
                ),
                Panel(
                    "Finished requests",
                    (Query(rate("themis_llm_requests_total", "finish_reason"), "{{finish_reason}}"),),
                    "reqps",
                ),
                Panel(
                    "Batch size",
                    (
                        *quantiles("themis_llm_batch_size"),
                        Query(quantile(0.99, "themis_llm_batch_tokens"), "tokens/iteration p99"),
                    ),
                    "short",
                    "Sequences (and tokens) per engine iteration.",
                ),
            ),
        ),
        Row(
            "Queue",
            (
                Panel(
                    "Queue",
                    (
                        Query(
                            f"sum by (namespace, pod) ({sel('themis_llm_queued_requests')})", "queued {{pod}}"
                        ),
                        Query(
                            f"sum by (namespace, pod) ({sel('themis_pending_llm_requests')})",
                            "pending {{pod}}",
                        ),
                        Query(
                            f"sum by (namespace, pod) ({sel('themis_llm_running_sequences')})",
                            "running {{pod}}",
                        ),
                    ),
                    "short",
                    "Waiting for admission, not finished, holding a KV slot.",
                ),
                Panel("Queue wait", quantiles("themis_llm_queue_seconds"), "s", "Arrival to admission."),
                Panel(
                    "Rejected requests",
                    (Query(rate("themis_llm_rejected_requests_total", BY_POD), "{{pod}}"),),
                    "reqps",
                    "Refused because the queue is full.",
                ),
            ),
        ),
        Row(
            "KV cache",
            (
                Panel(
                    "KV pages",
                    (
                        Query(f"sum by (namespace, pod) ({sel('themis_llm_kv_pages_used')})", "used {{pod}}"),
                        Query(f"sum by (namespace, pod) ({sel('themis_llm_kv_pages_free')})", "free {{pod}}"),
                    ),
                    "short",
                ),
                Panel(
                    "Preemptions",
                    (Query(rate("themis_llm_preemptions_total", BY_POD), "{{pod}}"),),
                    "ops",
                    "Sequences preempted for recompute when KV pages run out.",
                ),
                Panel(
                    "LoRA adapters",
                    (
                        Query(
                            f"sum by (namespace, pod) ({sel('themis_active_lora_adapters')})",
                            "resident {{pod}}",
                        ),
                        Query(rate("themis_llm_adapter_switches_total", BY_POD), "switches/s {{pod}}"),
                    ),
                    "short",
                ),
            ),
        ),
        Row(
            "Embeddings",
            (
                Panel(
                    "Embedded texts",
                    (Query(rate("themis_llm_embedded_texts_total", BY_POD), "{{pod}}"),),
                    "ops",
                    width=12,
                ),
                Panel("Embedding latency", quantiles("themis_llm_embed_seconds"), "s", width=12),
            ),
        ),
        Row(
            "Tenants",
            (
                Panel(
                    "Requests by tenant and outcome",
                    (
                        Query(
                            rate("themis_tenant_requests_total", "tenant, outcome"), "{{tenant}} {{outcome}}"
                        ),
                    ),
                    "reqps",
                    "Inference requests at admission: admitted, throttled (429) or refused (403/400).",
                    width=6,
                ),
                Panel(
                    "Throttled by limit",
                    (Query(rate("themis_tenant_throttled_total", "tenant, limit"), "{{tenant}} {{limit}}"),),
                    "reqps",
                    "429s by the limit hit: requests_per_s, tokens_per_min, concurrency, max_waiting.",
                    width=6,
                ),
                Panel(
                    "Tokens charged",
                    (Query(rate("themis_tenant_tokens_total", "tenant"), "{{tenant}}"),),
                    "short",
                    "Tokens per second charged to tokens_per_min (max_tokens × n at admission).",
                    width=6,
                ),
                Panel(
                    "In flight and waiting",
                    (
                        Query(f"sum by (tenant) ({sel('themis_tenant_inflight')})", "{{tenant}} in flight"),
                        Query(f"sum by (tenant) ({sel('themis_tenant_waiting')})", "{{tenant}} waiting"),
                    ),
                    "short",
                    "Admitted requests running, and waiting for a fair turn (THEMIS_TENANTS_MAX_INFLIGHT).",
                    width=6,
                ),
            ),
        ),
    ),
)

BREAKER_MAPPINGS = [
    {
        "type": "value",
        "options": {
            "0": {"text": "closed", "color": "green"},
            "1": {"text": "half-open", "color": "yellow"},
            "2": {"text": "open", "color": "red"},
        },
    }
]

CLUSTER = Dashboard(
    uid="themis-cluster",
    title="Themis / Cluster",
    description="Membership, gossip, circuit breakers, replication and hinted handoff, requests and storage.",
    rows=(
        Row(
            "Membership & gossip",
            (
                Panel(
                    "Members by status",
                    (Query(f"max by (status) ({sel('themis_gossip_members')})", "{{status}}"),),
                    "short",
                    "Cluster members as gossip sees them (alive, suspect, dead).",
                ),
                Panel(
                    "Gossip exchanges",
                    (
                        Query(rate("themis_gossip_exchanges_total", "outcome"), "{{outcome}}"),
                        Query(rate("themis_gossip_messages_dropped_total", "reason"), "dropped: {{reason}}"),
                    ),
                    "ops",
                ),
                Panel("Gossip round", quantiles("themis_gossip_round_seconds"), "s"),
            ),
        ),
        Row(
            "Shard-to-shard calls",
            (
                Panel(
                    "Circuit breakers",
                    (
                        Query(
                            f"max by (namespace, pod, peer) ({sel('themis_circuit_breaker_state')})",
                            "{{pod}} → {{peer}}",
                        ),
                    ),
                    "short",
                    "Per peer: 0 closed, 1 half-open, 2 open.",
                    kind="state-timeline",
                    options={"mappings": BREAKER_MAPPINGS},
                ),
                Panel(
                    "Remote calls",
                    (
                        Query(rate("themis_remote_requests_total", "outcome"), "{{outcome}}"),
                        Query(rate("themis_remote_retries_total", "peer"), "retries → {{peer}}"),
                    ),
                    "reqps",
                ),
                Panel("Remote call latency", quantiles("themis_remote_request_duration_seconds"), "s"),
            ),
        ),
        Row(
            "Replication & ring",
            (
                Panel(
                    "Replication & hints",
                    (
                        Query(rate("themis_replication_items_total", "outcome"), "replicated: {{outcome}}"),
                        Query(f"sum by (peer) ({sel('themis_hints_pending')})", "hints pending → {{peer}}"),
                        Query(rate("themis_catch_up_items_total"), "caught up"),
                    ),
                    "short",
                    "Replica versions sent synchronously or kept as hints for an unreachable peer.",
                ),
                Panel(
                    "Ring version & handoff",
                    (
                        Query(f"max by (namespace, pod) ({sel('themis_ring_version')})", "ring {{pod}}"),
                        Query(
                            f"max by (namespace, pod) ({sel('themis_migration_state')})", "handoff {{pod}}"
                        ),
                    ),
                    "short",
                    "Handoff state: 0 idle, 1 migrating, 2 done, 3 purged, 4 drained.",
                ),
                Panel(
                    "Migration",
                    (
                        Query(rate("themis_migration_keys_total"), "keys/s"),
                        Query(rate("themis_migration_bytes_total"), "bytes/s"),
                    ),
                    "short",
                ),
            ),
        ),
        Row(
            "Requests & storage",
            (
                Panel(
                    "HTTP requests",
                    (Query(rate("themis_http_requests_total", "status"), "{{status}}"),),
                    "reqps",
                ),
                Panel(
                    "HTTP latency p99 by route",
                    quantiles("themis_http_request_duration_seconds", (0.99,), "route"),
                    "s",
                ),
                Panel(
                    "Vector search",
                    (
                        *quantiles("themis_vector_search_seconds", (0.99,)),
                        Query(quantile(0.99, "themis_search_fan_out_seconds"), "cluster fan-out p99"),
                    ),
                    "s",
                    "Local search and cluster-wide scatter-gather.",
                ),
                Panel(
                    "Documents & vectors",
                    (
                        Query(f"sum by (collection) ({sel('themis_documents')})", "documents {{collection}}"),
                        Query(f"sum by (collection) ({sel('themis_vectors')})", "vectors {{collection}}"),
                    ),
                    "short",
                ),
                Panel(
                    "Document operations",
                    (Query(rate("themis_document_operations_total", "op"), "{{op}}"),),
                    "ops",
                ),
                Panel(
                    "Transactions & commits",
                    (
                        Query(rate("themis_transactions_total", "outcome"), "{{outcome}}"),
                        Query(quantile(0.99, "themis_storage_commit_seconds"), "commit p99 (s)"),
                    ),
                    "short",
                ),
            ),
        ),
    ),
)

RAID = Dashboard(
    uid="themis-raid",
    title="Themis / RAID model weights",
    description="Model-weight striping (RAID0/1/5/6): unit health, rebuild and assembly progress, repairs.",
    rows=(
        Row(
            "Health",
            (
                Panel(
                    "Unit health",
                    (
                        Query(
                            f"sum by (namespace, pod, state) ({sel('themis_raid_units')})",
                            "{{pod}} {{state}}",
                        ),
                    ),
                    "short",
                    "This shard's units by state at the last crc scan (ok, missing, corrupt).",
                ),
                Panel(
                    "Unrecoverable stripes",
                    (Query(f"max({sel('themis_raid_unrecoverable_stripes')})", "stripes"),),
                    "short",
                    "More lost units than the layout tolerates: re-ingest the model.",
                    kind="stat",
                    options={"thresholds": [0, 1]},
                ),
                Panel(
                    "Corrupt and repaired units",
                    (
                        Query(
                            f"sum(increase({sel('themis_raid_corrupt_units_total')}[$__range]))",
                            "corrupt found",
                        ),
                        Query(
                            f"sum(increase({sel('themis_raid_units_repaired_total')}[$__range]))", "repaired"
                        ),
                    ),
                    "short",
                    kind="stat",
                ),
            ),
        ),
        Row(
            "Rebuild & assembly",
            (
                Panel(
                    "Rebuild progress",
                    (
                        Query(
                            f"max by (namespace, pod, op) ({sel('themis_raid_operation_progress_ratio')})",
                            "{{pod}} {{op}}",
                        ),
                    ),
                    "percentunit",
                    "Stripes done / total of the running (or last) ingest, rebuild or assembly.",
                    kind="gauge",
                ),
                Panel(
                    "Transfer rate",
                    (
                        Query(
                            f"max by ({BY_POD}, op) ({sel('themis_raid_transfer_rate_bytes_per_second')})",
                            "{{pod}} {{op}}",
                        ),
                        Query(rate("themis_raid_transfer_bytes_total", "op"), "moved {{op}}"),
                    ),
                    "Bps",
                ),
                Panel(
                    "Operations",
                    (
                        Query(
                            f"sum by (op) ({sel('themis_raid_operation_seconds_sum')})\n/\n"
                            f"sum by (op) ({sel('themis_raid_operation_seconds_count')})",
                            "mean duration {{op}}",
                        ),
                        Query(f"sum by (op) ({sel('themis_raid_operation_seconds_count')})", "runs {{op}}"),
                    ),
                    "s",
                    "Ingest/verify/rebuild/assembly/scrub runs and their mean duration since the shards "
                    "started (these are rare events: a range-based rate would mostly show nothing).",
                    options={
                        "overrides": [
                            {
                                "matcher": {"id": "byRegexp", "options": "^runs .*"},
                                "properties": [{"id": "unit", "value": "short"}],
                            }
                        ]
                    },
                ),
            ),
        ),
    ),
)

DASHBOARDS = (PAPER, ENGINE, CLUSTER, RAID)


# ---- Grafana JSON ----------------------------------------------------------------------------------
def _query_variable(name: str, label: str, query: str) -> dict:
    """A multi-value variable listed from Prometheus; All is ``.*``, which also matches a series
    without the label (a local cluster scraped without Kubernetes' target labels)."""
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1},
        "current": {},
        "hide": 0,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "options": [],
    }


def _variables() -> list[dict]:
    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
            "options": [],
        },
        _query_variable("namespace", "Namespace", "label_values(themis_shard_info, namespace)"),
        _query_variable("pod", "Pod", 'label_values(themis_shard_info{namespace=~"$namespace"}, pod)'),
    ]


def _panel_json(panel: Panel, pid: int, x: int, y: int, height: int) -> dict:
    defaults: dict = {"unit": panel.unit, "color": {"mode": "palette-classic"}}
    if "mappings" in panel.options:
        defaults["mappings"] = panel.options["mappings"]
    if "thresholds" in panel.options:
        _low, high = panel.options["thresholds"]
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "green", "value": None}, {"color": "red", "value": high}],
        }
    if panel.kind == "gauge":
        defaults.update(min=0, max=1)
    return {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": panel.options.get("overrides", [])},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": q.expr,
                "legendFormat": q.legend or "__auto",
                "range": True,
                "instant": False,
                "editorMode": "code",
            }
            for i, q in enumerate(panel.queries)
        ],
    }


def build(dashboard: Dashboard) -> dict:
    panels: list[dict] = []
    pid, y = 1, 0
    for row in dashboard.rows:
        panels.append(
            {
                "id": pid,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        pid, y, x = pid + 1, y + 1, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + 8
            panels.append(_panel_json(panel, pid, x, y, 8))
            pid, x = pid + 1, x + panel.width
        y += 8
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "templating": {"list": _variables()},
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "tags": ["themis"],
                "asDropdown": True,
                "title": "Themis",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "panels": panels,
    }


def render(dashboard: Dashboard) -> str:
    return json.dumps(build(dashboard), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when dashboards/ differs from the builder")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    stale = []
    for dashboard in DASHBOARDS:
        path = args.out / f"{dashboard.uid}.json"
        text = render(dashboard)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if stale:
        print(f"stale: {', '.join(stale)} (run python tools/build_dashboards.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
