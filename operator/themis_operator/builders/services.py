"""Two Services: a headless one for stable per-shard DNS (peers, plan URLs) and a client one."""

from __future__ import annotations

from .. import names
from .context import ClusterContext

_PORTS = [{"name": "http", "port": names.PORT, "targetPort": "http", "protocol": "TCP"}]
_INTERNAL = {"name": "internal", "port": names.INTERNAL_PORT, "targetPort": "internal", "protocol": "TCP"}


def build_headless_service(ctx: ClusterContext) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": ctx.metadata(names.headless_service(ctx.name), "shard"),
        "spec": {
            "clusterIP": "None",
            # Shards must resolve each other before they are ready (ring join, data hand-off).
            "publishNotReadyAddresses": True,
            "selector": names.selector_labels(ctx.name),
            # Peers dial the mTLS listener by pod DNS name; clients never need it.
            "ports": _PORTS + ([_INTERNAL] if ctx.spec.tls.enabled else []),
        },
    }


def build_client_service(ctx: ClusterContext) -> dict:
    """Any shard serves the whole API, so clients load-balance over ready shards."""
    meta = ctx.metadata(names.client_service(ctx.name), "client")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"type": "ClusterIP", "selector": names.selector_labels(ctx.name), "ports": _PORTS},
    }
