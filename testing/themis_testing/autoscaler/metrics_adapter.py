"""The custom metrics API (``custom.metrics.k8s.io/v1beta2``) for pods, from Prometheus Adapter rules.

It reads the same rules file the Prometheus Adapter takes as ``--config`` (the chart renders it),
and answers the HPA controller's one question — the value of a metric for the pods a selector
matches — the way the adapter does: the metric is found through a rule's ``name`` (``matches`` /
``as``) among the series its ``seriesQuery`` finds; the pods come from the API server; the
rule's ``metricsQuery`` is rendered with ``<<.Series>>``, ``<<.LabelMatchers>>``
(``namespace="NS",pod=~"a|b"``) and ``<<.GroupBy>>`` (``pod``) and run against Prometheus; each
sample becomes a ``MetricValue`` with the value as a Kubernetes quantity.

Only what an HPA's ``Pods`` metrics need is served: pod resources, by name or ``*`` with a label
selector. A metric no rule names is a 404 ``NotFound`` as from the adapter.
"""

from __future__ import annotations

import argparse
import datetime
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp.web
import httpx
import yaml

GROUP_VERSION = "custom.metrics.k8s.io/v1beta2"
_FIELD = re.compile(r"<<\s*\.(\w+)\s*>>")


@dataclass(frozen=True)
class Rule:
    series_query: str
    metrics_query: str
    resource_labels: Mapping[str, str]  # Kubernetes resource -> Prometheus label
    matches: str
    as_: str

    def metric_name(self, series: str) -> str | None:
        """The metric name this rule serves ``series`` as, or None when ``matches`` does not match."""
        if not re.search(self.matches, series):
            return None
        return re.sub(self.matches, self.as_, series) if self.as_ else series


def parse_rules(text: str) -> list[Rule]:
    """The ``rules`` of a Prometheus Adapter config (``resources.overrides`` form)."""
    rules = []
    for raw in (yaml.safe_load(text) or {}).get("rules") or []:
        overrides = (raw.get("resources") or {}).get("overrides") or {}
        name = raw.get("name") or {}
        rules.append(
            Rule(
                series_query=raw["seriesQuery"],
                metrics_query=raw["metricsQuery"],
                resource_labels={v["resource"]: label for label, v in overrides.items()},
                matches=name.get("matches", "^(.*)$"),
                as_=name.get("as", ""),
            )
        )
    return rules


def render_query(template: str, series: str, matchers: str, group_by: str) -> str:
    """A metricsQuery with the adapter's three fields filled in; any other field is refused."""
    fields = {"Series": series, "LabelMatchers": matchers, "GroupBy": group_by}

    def fill(m: re.Match) -> str:
        if m.group(1) not in fields:
            raise ValueError(f"metricsQuery field .{m.group(1)} is not supported")
        return fields[m.group(1)]

    return _FIELD.sub(fill, template)


def pod_matchers(rule: Rule, namespace: str, pods: Sequence[str]) -> str:
    ns_label = rule.resource_labels.get("namespace", "namespace")
    pod_label = rule.resource_labels.get("pod", "pod")
    names = "|".join(sorted(pods))  # DNS-1123 names: no PromQL string escapes needed
    return f'{ns_label}="{namespace}",{pod_label}=~"{names}"'


def quantity(value: float) -> str:
    """A Kubernetes quantity for ``value``, in milli-units as the adapter writes them."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def metric_value_list(namespace: str, metric: str, values: Mapping[str, float], now: str) -> dict:
    return {
        "kind": "MetricValueList",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": [
            {
                "describedObject": {"kind": "Pod", "namespace": namespace, "name": pod, "apiVersion": "/v1"},
                "metric": {"name": metric, "selector": None},
                "timestamp": now,
                "value": quantity(v),
            }
            for pod, v in sorted(values.items())
        ],
    }


class Adapter:
    """Serves the custom metrics API from ``rules`` over ``prometheus``, pods from ``kube``."""

    def __init__(self, rules: list[Rule], prometheus: str, kube: str) -> None:
        self.rules = rules
        self.prometheus = httpx.AsyncClient(base_url=prometheus, timeout=10)
        self.kube = httpx.AsyncClient(base_url=kube, timeout=10)

    async def close(self) -> None:
        await self.prometheus.aclose()
        await self.kube.aclose()

    async def _series(self, query: str) -> set[str]:
        r = await self.prometheus.get("/api/v1/series", params={"match[]": query})
        r.raise_for_status()
        return {s["__name__"] for s in r.json()["data"]}

    async def find(self, metric: str) -> tuple[Rule, str] | None:
        """The rule and series that serve ``metric``."""
        for rule in self.rules:
            for series in sorted(await self._series(rule.series_query)):
                if rule.metric_name(series) == metric:
                    return rule, series
        return None

    async def names(self) -> list[str]:
        found = set()
        for rule in self.rules:
            for series in await self._series(rule.series_query):
                if name := rule.metric_name(series):
                    found.add(name)
        return sorted(found)

    async def pods(self, namespace: str, name: str, selector: str | None) -> list[str]:
        if name != "*":
            return [name]
        params = {"labelSelector": selector} if selector else {}
        r = await self.kube.get(f"/api/v1/namespaces/{namespace}/pods", params=params)
        r.raise_for_status()
        return [p["metadata"]["name"] for p in r.json()["items"]]

    async def values(self, namespace: str, metric: str, pods: list[str]) -> dict[str, float] | None:
        found = await self.find(metric)
        if found is None:
            return None
        rule, series = found
        if not pods:
            return {}
        pod_label = rule.resource_labels.get("pod", "pod")
        query = render_query(rule.metrics_query, series, pod_matchers(rule, namespace, pods), pod_label)
        r = await self.prometheus.get("/api/v1/query", params={"query": query})
        r.raise_for_status()
        out = {}
        for sample in r.json()["data"]["result"]:
            value = float(sample["value"][1])
            pod = sample["metric"].get(pod_label)
            if pod in pods and math.isfinite(value):
                out[pod] = value
        return out

    # ---- HTTP ----------------------------------------------------------------------------------
    def app(self) -> aiohttp.web.Application:
        app = aiohttp.web.Application()
        base = f"/apis/{GROUP_VERSION}"
        app.router.add_get(base, self._discovery)
        app.router.add_get(base + "/namespaces/{namespace}/pods/{name}/{metric}", self._pods)
        app.router.add_get("/healthz", lambda _: aiohttp.web.Response(text="ok"))
        return app

    async def _discovery(self, _request: aiohttp.web.Request) -> aiohttp.web.Response:
        resources = [
            {
                "name": f"pods/{n}",
                "singularName": "",
                "namespaced": True,
                "kind": "MetricValueList",
                "verbs": ["get"],
            }
            for n in await self.names()
        ]
        return aiohttp.web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": GROUP_VERSION,
                "resources": resources,
            }
        )

    async def _pods(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        ns, name, metric = (request.match_info[k] for k in ("namespace", "name", "metric"))
        try:
            pods = await self.pods(ns, name, request.query.get("labelSelector"))
            values = await self.values(ns, metric, pods)
        except httpx.HTTPError as e:
            return aiohttp.web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "ServiceUnavailable",
                    "code": 503,
                    "message": f"unable to fetch metric {metric}: {type(e).__name__}: {e}",
                },
                status=503,
            )
        if values is None:
            return aiohttp.web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": f"the server could not find the metric {metric} for pods",
                },
                status=404,
            )
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return aiohttp.web.json_response(metric_value_list(ns, metric, values, now))


def main(argv: list[str] | None = None) -> None:
    from ..kube_node.client import server_of

    ap = argparse.ArgumentParser(prog="themis-metrics-adapter")
    ap.add_argument("--config", type=Path, required=True, help="Prometheus Adapter rules (config.yaml)")
    ap.add_argument("--prometheus-url", required=True)
    ap.add_argument("--kubeconfig", type=Path, required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    adapter = Adapter(parse_rules(args.config.read_text()), args.prometheus_url, server_of(args.kubeconfig))
    app = adapter.app()
    app.on_cleanup.append(lambda _: adapter.close())
    aiohttp.web.run_app(app, host="127.0.0.1", port=args.port, print=None)
