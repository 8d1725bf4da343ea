"""The HorizontalPodAutoscaler controller loop: HPA objects in, ``/scale`` and HPA status out.

Every ``sync_s`` seconds (kube-controller-manager's ``--horizontal-pod-autoscaler-sync-period``,
15 s by default) each autoscaling/v2 HPA is read; its target's ``/scale`` subresource gives the
current replicas and the pod selector; each ``Pods`` metric is asked of the custom metrics API
for those pods; ``algorithm`` turns the answers into a replica count; a change is written to the
target's ``/scale`` (for a ThemisCluster: ``spec.shards``, which the operator reshards to) and the
decision to the HPA's status. Metric kinds other than ``Pods`` count as missing, so they can
never cause a scale-in.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import httpx

from . import algorithm
from .metrics_adapter import quantity

log = logging.getLogger("themis.hpa")
_SUFFIX = {"m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9)}
_SUFFIX |= {"Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30)}


def parse_quantity(text: str | int | float) -> float:
    """A Kubernetes quantity ("16", "0.8", "800m", "2k", "1Gi") as a float."""
    s = str(text).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if s.endswith(suffix):
            return float(Decimal(s[: -len(suffix)]) * _SUFFIX[suffix])
    return float(Decimal(s))


class Controller:
    def __init__(
        self,
        kube: str,
        metrics: str,
        *,
        namespace: str | None = None,
        sync_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = httpx.AsyncClient(base_url=kube, timeout=10)
        self.metrics = httpx.AsyncClient(base_url=metrics, timeout=10)
        self.namespace, self.sync_s, self.clock = namespace, sync_s, clock
        self.histories: dict[str, algorithm.History] = {}
        self._plurals: dict[tuple[str, str], str] = {}

    async def close(self) -> None:
        await self.kube.aclose()
        await self.metrics.aclose()

    async def run(self) -> None:
        while True:
            try:
                await self.sync_all()
            except (httpx.HTTPError, OSError) as e:
                log.warning("sync failed: %s", e)
            await asyncio.sleep(self.sync_s)

    async def sync_all(self) -> None:
        path = "/apis/autoscaling/v2"
        path += f"/namespaces/{self.namespace}" if self.namespace else ""
        r = await self.kube.get(path + "/horizontalpodautoscalers")
        r.raise_for_status()
        for hpa in r.json()["items"]:
            await self.sync(hpa)

    async def _target_path(self, namespace: str, ref: dict) -> str:
        api_version, kind = ref["apiVersion"], ref["kind"]
        key = (api_version, kind)
        if key not in self._plurals:
            base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            r = await self.kube.get(base)
            r.raise_for_status()
            self._plurals[key] = next(
                res["name"] for res in r.json()["resources"] if res["kind"] == kind and "/" not in res["name"]
            )
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        return f"{base}/namespaces/{namespace}/{self._plurals[key]}/{ref['name']}/scale"

    async def _pods(self, namespace: str, selector: str) -> list[str]:
        r = await self.kube.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": selector})
        r.raise_for_status()
        return [
            p["metadata"]["name"] for p in r.json()["items"] if not p["metadata"].get("deletionTimestamp")
        ]

    async def _metric(self, namespace: str, name: str, selector: str) -> dict[str, float]:
        r = await self.metrics.get(
            f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{name}",
            params={"labelSelector": selector},
        )
        r.raise_for_status()
        return {i["describedObject"]["name"]: parse_quantity(i["value"]) for i in r.json()["items"]}

    async def sync(self, hpa: dict) -> None:
        meta, spec = hpa["metadata"], hpa["spec"]
        ns, name = meta["namespace"], meta["name"]
        scale_path = await self._target_path(ns, spec["scaleTargetRef"])
        r = await self.kube.get(scale_path)
        r.raise_for_status()
        scale = r.json()
        current = int(scale["spec"].get("replicas") or 0)
        selector = (scale.get("status") or {}).get("selector") or ""
        if current == 0:
            return  # scaled to zero by hand: autoscaling is off, as in Kubernetes
        pods = await self._pods(ns, selector) if selector else []
        recommendations: list[int | None] = []
        observed = []
        for metric in spec.get("metrics") or []:
            if metric.get("type") != "Pods":
                recommendations.append(None)
                continue
            metric_name = metric["pods"]["metric"]["name"]
            target = parse_quantity(metric["pods"]["target"]["averageValue"])
            try:
                values = await self._metric(ns, metric_name, selector)
                recommendations.append(algorithm.replicas_for_metric(current, values, pods, target))
                average = sum(values.values()) / len(values)
                observed.append(
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": metric_name},
                            "current": {"averageValue": quantity(average)},
                        },
                    }
                )
            except (httpx.HTTPError, ValueError) as e:
                log.info("%s/%s: metric %s missing: %s", ns, name, metric_name, e)
                recommendations.append(None)
        now = self.clock()
        history = self.histories.setdefault(f"{ns}/{name}", algorithm.History())
        recommendation = algorithm.combine(current, recommendations)
        status: dict = {"currentReplicas": current, "currentMetrics": observed}
        if recommendation is None:
            status["desiredReplicas"] = current
            status["conditions"] = [_condition("ScalingActive", "False", "FailedGetPodsMetric")]
        else:
            desired = algorithm.desired_replicas(
                history,
                now,
                current,
                recommendation,
                int(spec.get("minReplicas") or 1),
                int(spec["maxReplicas"]),
                algorithm.behavior_from_spec(spec.get("behavior")),
            )
            algorithm.record(history, now, desired - current)
            status["desiredReplicas"] = desired
            status["conditions"] = [_condition("ScalingActive", "True", "ValidMetricFound")]
            if desired != current:
                log.info(
                    "%s/%s: %d -> %d replicas (metrics %s, recommendation %d)",
                    ns,
                    name,
                    current,
                    desired,
                    observed,
                    recommendation,
                )
                r = await self.kube.patch(
                    scale_path,
                    json={"spec": {"replicas": desired}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                r.raise_for_status()
                status["lastScaleTime"] = _now()
        await self.kube.patch(
            f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{name}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: str, reason: str) -> dict:
    return {"type": kind, "status": status, "reason": reason, "lastTransitionTime": _now()}


def main(argv: list[str] | None = None) -> None:
    from ..kube_node.client import server_of

    ap = argparse.ArgumentParser(prog="themis-hpa-controller")
    ap.add_argument("--kubeconfig", type=Path, required=True)
    ap.add_argument("--metrics-url", required=True, help="the custom metrics API (the adapter)")
    ap.add_argument("--namespace", default=None)
    ap.add_argument("--sync-period", type=float, default=15.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    controller = Controller(
        server_of(args.kubeconfig), args.metrics_url, namespace=args.namespace, sync_s=args.sync_period
    )
    asyncio.run(controller.run())
