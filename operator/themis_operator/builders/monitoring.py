"""Prometheus Operator ServiceMonitor for the shards' /metrics (only when enabled)."""

from __future__ import annotations

from .. import names
from .context import ClusterContext


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
            # Select the client Service only: one target per shard pod, not two.
            "selector": {
                "matchLabels": {**names.selector_labels(ctx.name), "app.kubernetes.io/component": "client"}
            },
            "namespaceSelector": {"matchNames": [ctx.namespace]},
            "endpoints": [endpoint],
        },
    }
