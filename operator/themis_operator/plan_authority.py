"""The operator as the plan authority of a ThemisCluster with ``spec.failover.enabled``.

It runs ``themis_core.plan_authority.PlanAuthority`` (probes, leases, the in-sync set) over the
plan ConfigMap: every write carries the ``resourceVersion`` it read, so a reconcile that
rewrote the plan meanwhile (a ring change) makes the authority read again instead of
overwriting it, and a reconcile working from a plan older than the authority's is refused the
same way (``reconcile.decide``). Probes go to every shard's internal listener, signed with the
cluster's gossip secret, or with a client certificate from the cluster CA when TLS is on. The
shards' leases are anchored on their own clocks (``in_sync``), so this process need not share a
machine or a clock with them. Kubernetes restarts dead pods itself: the authority never does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import os
import ssl
import tempfile
from collections.abc import Callable

import httpx
from themis_core.certificates import issue_shard_cert
from themis_core.peer_signing import PeerAuth
from themis_core.plan import ClusterPlan
from themis_core.plan_authority.authority import PlanAuthority, StalePlan

from . import names
from .builders.plan import PLAN_KEY, RING_VERSION_ANNOTATION
from .kube import Conflict, Kube

log = logging.getLogger("themis.operator.authority")

#: The authority re-reads the cluster's secrets (a CA or gossip key rotated, TLS turned on)
#: this often; what it knows of the members carries over.
CLIENT_REFRESH_S = 60.0
#: The identity the operator's probes present (the certificate's common name, the signer).
AUTHORITY_ID = "plan-authority"


class ConfigMapPlan:
    """The plan ConfigMap as the authority's ``PlanStore`` (optimistic concurrency)."""

    def __init__(self, kube: Kube, namespace: str, cluster: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, names.plan_configmap(cluster)
        self._version: str | None = None

    def read(self) -> ClusterPlan:
        cm = self.kube.get("v1", "ConfigMap", self.namespace, self.name)
        text = ((cm or {}).get("data") or {}).get(PLAN_KEY)
        if not text:
            raise LookupError(f"ConfigMap {self.name} holds no plan yet")
        self._version = cm["metadata"]["resourceVersion"]
        return ClusterPlan.from_json(text)

    def write(self, plan: ClusterPlan) -> None:
        patch = {
            "metadata": {
                "resourceVersion": self._version,
                "annotations": {RING_VERSION_ANNOTATION: str(plan.ring_version)},
            },
            "data": {PLAN_KEY: plan.to_json()},
        }
        try:
            done = self.kube.patch("v1", "ConfigMap", self.namespace, self.name, patch)
        except Conflict as e:
            raise StalePlan(str(e)) from e
        self._version = (done or {}).get("metadata", {}).get("resourceVersion")


def _secret_data(kube: Kube, namespace: str, name: str) -> dict[str, bytes]:
    secret = kube.get("v1", "Secret", namespace, name) or {}
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def mtls_context(ca_cert: bytes, ca_key: bytes) -> ssl.SSLContext:
    """Trust the cluster CA and present a client certificate it signs (minted in memory)."""
    cert, key = issue_shard_cert(ca_cert, ca_key, AUTHORITY_ID, [])
    context = ssl.create_default_context(cadata=ca_cert.decode())
    with tempfile.TemporaryDirectory() as tmp:  # load_cert_chain reads files only
        cert_path, key_path = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
        with open(cert_path, "wb") as f:
            f.write(cert)
        with open(key_path, "wb") as f:
            f.write(key)
        context.load_cert_chain(cert_path, key_path)
    return context


def probe_client(kube: Kube, namespace: str, cluster: str, tls: bool) -> Callable[[], httpx.AsyncClient]:
    """What the probes go through: mTLS with the cluster CA, else signed with the gossip secret."""
    if tls:
        ca = _secret_data(kube, namespace, names.ca_secret(cluster))
        if ca.get("tls.crt") and ca.get("tls.key"):
            return functools.partial(httpx.AsyncClient, verify=mtls_context(ca["tls.crt"], ca["tls.key"]))
    secret = _secret_data(kube, namespace, names.gossip_secret(cluster)).get("secret")
    auth = PeerAuth(secret.decode(), AUTHORITY_ID) if secret else None
    return functools.partial(httpx.AsyncClient, auth=auth)


class ClusterAuthority:
    """One ThemisCluster's authority: ``run`` until ``stopped`` is set (the kopf daemon)."""

    def __init__(self, kube: Kube, namespace: str, cluster: str) -> None:
        self.kube, self.namespace, self.cluster = kube, namespace, cluster
        self.store = ConfigMapPlan(kube, namespace, cluster)
        self.authority = PlanAuthority(self.store)

    async def run(self, stopped: asyncio.Event) -> None:
        while not stopped.is_set():
            try:
                plan = await asyncio.to_thread(self.store.read)
                self.authority.client = await asyncio.to_thread(
                    probe_client, self.kube, self.namespace, self.cluster, plan.tls
                )
            except Exception as e:  # no plan yet, the API away: try again shortly
                log.info("plan authority of %s/%s waits: %s", self.namespace, self.cluster, e)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopped.wait(), 2.0)
                continue
            refresh = asyncio.Event()
            timer = asyncio.get_running_loop().call_later(CLIENT_REFRESH_S, refresh.set)
            relay = asyncio.create_task(_relay(stopped, refresh))
            try:
                await self.authority.run(refresh)
            finally:
                timer.cancel()
                relay.cancel()


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
