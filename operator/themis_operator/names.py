"""Names, labels and addresses of everything a ThemisCluster owns (one place, no guessing)."""

from __future__ import annotations

PORT = 8080
#: Shard-to-shard listener (``/internal/...``); with TLS it demands a cluster client certificate.
INTERNAL_PORT = 8443
MANAGED_BY = "themis-operator"
#: Pod names are ``{cluster}-{i}`` and must stay DNS labels together with the StatefulSet's
#: controller-revision-hash label (``{cluster}-{10 chars}``), hence the margin below 63.
MAX_CLUSTER_NAME = 40


def selector_labels(cluster: str) -> dict[str, str]:
    """The immutable subset used by the StatefulSet selector, Services and the PDB."""
    return {"app.kubernetes.io/name": "themis", "app.kubernetes.io/instance": cluster}


def labels(cluster: str, component: str = "shard") -> dict[str, str]:
    return {
        **selector_labels(cluster),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "themis",
        "themisdb.io/cluster": cluster,
    }


def children_selector(cluster: str) -> str:
    """Label selector matching every child the operator created for ``cluster``."""
    return f"themisdb.io/cluster={cluster},app.kubernetes.io/managed-by={MANAGED_BY}"


def statefulset(cluster: str) -> str:
    return cluster


def headless_service(cluster: str) -> str:
    return f"{cluster}-headless"


def client_service(cluster: str) -> str:
    return cluster


def plan_configmap(cluster: str) -> str:
    return f"{cluster}-plan"


def tls_secret(cluster: str) -> str:
    return f"{cluster}-tls"


def ca_secret(cluster: str) -> str:
    return f"{cluster}-ca"


def gossip_secret(cluster: str) -> str:
    return f"{cluster}-gossip"


def api_keys_secret(cluster: str) -> str:
    return f"{cluster}-api-keys"


def pdb(cluster: str) -> str:
    return cluster


def service_monitor(cluster: str) -> str:
    return cluster


def shard_id(cluster: str, index: int) -> str:
    return f"{cluster}-{index}"


def shard_ids(cluster: str, count: int) -> list[str]:
    return [shard_id(cluster, i) for i in range(count)]


def shard_host(cluster: str, namespace: str, index: int) -> str:
    return f"{shard_id(cluster, index)}.{headless_service(cluster)}.{namespace}.svc"


def shard_url(cluster: str, namespace: str, index: int, tls: bool) -> str:
    scheme = "https" if tls else "http"
    return f"{scheme}://{shard_host(cluster, namespace, index)}:{PORT}"


def shard_internal_url(cluster: str, namespace: str, index: int) -> str:
    """The mTLS peer listener (TLS clusters only; without TLS peers use the public URL)."""
    return f"https://{shard_host(cluster, namespace, index)}:{INTERNAL_PORT}"


def shard_dns_names(cluster: str, namespace: str, index: int) -> list[str]:
    """Every name a peer or client may dial for this shard (the certificate's SANs)."""
    sid, svc = shard_id(cluster, index), headless_service(cluster)
    return [
        sid,
        f"{sid}.{svc}",
        f"{sid}.{svc}.{namespace}",
        f"{sid}.{svc}.{namespace}.svc",
        f"{sid}.{svc}.{namespace}.svc.cluster.local",
        client_service(cluster),
        f"{client_service(cluster)}.{namespace}",
        f"{client_service(cluster)}.{namespace}.svc",
        f"{client_service(cluster)}.{namespace}.svc.cluster.local",
        "localhost",
    ]
