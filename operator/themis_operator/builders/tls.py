"""mTLS Secrets: the cluster CA (operator-only) and the shards' certificates (mounted).

Two Secrets so that pods never see the CA key: ``{cluster}-ca`` holds it, ``{cluster}-tls``
holds ``ca.crt`` plus ``{shard}.crt``/``{shard}.key`` for every shard. Existing material is
reused so reconciling is idempotent and running shards keep their identity; only new shards,
certificates from a replaced CA, and certificates past two thirds of their lifetime get fresh
ones. Renewal needs no restart: the kubelet updates the mounted Secret and shards reload the
files into their live TLS contexts (``themis_shard.cluster.security.cert_reload``).
"""

from __future__ import annotations

import base64
import datetime

from cryptography import x509
from themis_core.certificates import SHARD_VALIDITY, generate_ca, issue_shard_cert

from .. import names
from .context import ClusterContext


def _decode(secret: dict | None) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}


def _encode(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in sorted(data.items())}


def ca_material(existing_ca_secret: dict | None, cluster: str) -> tuple[bytes, bytes]:
    data = _decode(existing_ca_secret)
    if data.get("tls.crt") and data.get("tls.key"):
        return data["tls.crt"], data["tls.key"]
    return generate_ca(cluster)


def build_ca_secret(ctx: ClusterContext, ca: tuple[bytes, bytes]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": ctx.metadata(names.ca_secret(ctx.name), "tls"),
        "data": _encode({"tls.crt": ca[0], "tls.key": ca[1]}),
    }


def _issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    try:
        x509.load_pem_x509_certificate(cert_pem).verify_directly_issued_by(
            x509.load_pem_x509_certificate(ca_pem)
        )
        return True
    except Exception:  # malformed or foreign: re-issue
        return False


#: A leaf certificate is renewed once this fraction of its lifetime has passed.
RENEW_AT = 2 / 3


def renewal_due(cert_pem: bytes, now: datetime.datetime) -> bool:
    """True once ``now`` is past two thirds of the certificate's validity (or it is unreadable)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return True
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= start + (end - start) * RENEW_AT


def build_tls_secret(
    ctx: ClusterContext,
    ca: tuple[bytes, bytes],
    shard_count: int,
    existing_tls_secret: dict | None,
    *,
    now: datetime.datetime | None = None,
    validity: datetime.timedelta = SHARD_VALIDITY,
) -> dict:
    """Certificates for shards ``0..shard_count-1`` (leaving shards included until they go)."""
    now = now or datetime.datetime.now(datetime.UTC)
    old = _decode(existing_tls_secret)
    data: dict[str, bytes] = {"ca.crt": ca[0]}
    for i in range(shard_count):
        sid = names.shard_id(ctx.name, i)
        cert, key = old.get(f"{sid}.crt"), old.get(f"{sid}.key")
        if not (cert and key and _issued_by(cert, ca[0])) or renewal_due(cert, now):
            cert, key = issue_shard_cert(
                ca[0],
                ca[1],
                sid,
                names.shard_dns_names(ctx.name, ctx.namespace, i),
                ["127.0.0.1"],
                validity=validity,
            )
        data[f"{sid}.crt"], data[f"{sid}.key"] = cert, key
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": ctx.metadata(names.tls_secret(ctx.name), "tls"),
        "data": _encode(data),
    }
