"""Prometheus Operator ServiceMonitor for the shards' /metrics (only when enabled)."""

from __future__ import annotations

from .. import names
from .context import ClusterContext

#: The client Service's label whose value becomes the scrape job (``themis``).
JOB_LABEL = "app.kubernetes.io/name"


def build_service_monitor(ctx: ClusterContext) -> dict:
    endpoint: dict = {"port": "http", "path": "/metrics", "interval": ctx.spec.monitoring.interval}
    if ctx.spec.tls.enabled:
        endpoint["scheme"] = "https"
        endpoint["tlsConfig"] = {
            "ca": {"secret": {"name": names.tls_secret(ctx.name), "key": "ca.crt"}},
            "serverName": f"{names.client_service(ctx.name)}.{ctx.namespace}.svc",
        }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": ctx.metadata(names.service_monitor(ctx.name), "monitoring"),
        "spec": {
            # Prometheus names the job after this label's value ("themis"), as the chart's
            # ServiceMonitor does: the dashboards and alerts select job="themis".
            "jobLabel": JOB_LABEL,
            # Select the client Service only: one target per shard pod, not two.
            "selector": {
                "matchLabels": {**names.selector_labels(ctx.name), "app.kubernetes.io/component": "client"}
            },
            "namespaceSelector": {"matchNames": [ctx.namespace]},
            "endpoints": [endpoint],
        },
    }
