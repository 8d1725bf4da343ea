"""Asking shards how they are: ``GET /v1/cluster/status`` on each pod, tolerant of failure.

The operator never moves data or loads adapters itself; it only reads what shards report
(ring version, migration state, adapter states) and decides from that. An unreachable or
not-yet-implemented endpoint yields a report with ``reachable=False``, never an exception.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
from themis_core.status_model import ClusterStatus

from . import names
from .status import AdapterReport, ShardReport


def own_adapters(shard_id: str, status: ClusterStatus) -> tuple[AdapterReport, ...]:
    """The plan's adapters on this shard: ``plan_adapters`` says loaded or failed (and why);
    the shard's own gossip announcement adds the accuracy and latency it measured."""
    announced = {c.adapter_id: c for c in status.capabilities if c.shard_id == shard_id and c.active}
    entries = []
    for name in status.plan_adapters.loaded:
        cap = announced.get(name)
        entries.append(
            AdapterReport(
                name=name,
                state="loaded",
                accuracy_delta=cap.accuracy_delta if cap else None,
                p99_delta_ms=cap.performance_delta_p99_ms if cap else None,
            )
        )
    for name, reason in status.plan_adapters.failed.items():
        entries.append(AdapterReport(name=name, state="failed", message=reason))
    return tuple(sorted(entries, key=lambda a: a.name))


def parse_status(shard_id: str, url: str, role: str, payload: dict) -> ShardReport:
    """A shard's answer, read through the shared :class:`ClusterStatus` model only."""
    status = ClusterStatus.model_validate(payload)
    own = status.member(shard_id)
    return ShardReport(
        id=shard_id,
        url=url,
        role=role,  # type: ignore[arg-type]
        reachable=True,
        state=str((own and own.state) or "up"),
        ringVersion=status.ring_version,
        migration=status.migration.state or "idle",
        migrationRingVersion=status.migration.ring_version,
        adapters=own_adapters(shard_id, status),
        capabilities=tuple(status.capabilities),
        hintsPending=sum(status.hints_pending.values()),
    )


class ShardProber:
    """Fetches shard status concurrently; ``url_template`` redirects probes (port-forwards, tests).

    The template may use ``{shard_id}``, ``{cluster}``, ``{namespace}``, ``{index}``.
    """

    def __init__(self, timeout_s: float = 3.0, url_template: str | None = None) -> None:
        self.timeout_s = timeout_s
        self.url_template = url_template

    def url_for(self, cluster: str, namespace: str, index: int, tls: bool) -> str:
        if self.url_template:
            return self.url_template.format(
                shard_id=names.shard_id(cluster, index), cluster=cluster, namespace=namespace, index=index
            )
        return names.shard_url(cluster, namespace, index, tls)

    def _fetch(self, url: str, ca_pem: bytes | None, api_key: str | None = None) -> dict:
        verify: ssl.SSLContext | bool = True
        if url.startswith("https") and ca_pem:
            verify = ssl.create_default_context(cadata=ca_pem.decode())
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        response = httpx.get(
            f"{url}/v1/cluster/status", timeout=self.timeout_s, verify=verify, headers=headers
        )
        response.raise_for_status()
        return response.json()

    def probe(
        self,
        cluster: str,
        namespace: str,
        count: int,
        members: int,
        tls: bool,
        ca_pem: bytes | None = None,
        api_key: str | None = None,
    ) -> list[ShardReport]:
        """Reports for pods ``0..count-1``; indexes ``>= members`` are leaving the ring;
        ``api_key``: the operator's key when the cluster has API keys on."""

        def one(index: int) -> ShardReport:
            sid = names.shard_id(cluster, index)
            url = self.url_for(cluster, namespace, index, tls)
            role = "member" if index < members else "leaving"
            try:
                return parse_status(sid, url, role, self._fetch(url, ca_pem, api_key))
            except Exception:  # unreachable, not implemented yet, bad JSON: all mean "unknown"
                return ShardReport(id=sid, url=url, role=role)  # type: ignore[arg-type]

        if count <= 0:
            return []
        with ThreadPoolExecutor(max_workers=min(16, count)) as pool:
            return list(pool.map(one, range(count)))


def reports_from_status(status: dict | None) -> dict[str, ShardReport]:
    """The last probe results stored in a ThemisCluster's status (for event-driven reconciles)."""
    reports = {}
    for item in (status or {}).get("shards") or []:
        try:
            report = ShardReport.model_validate(item)
        except ValueError:
            continue
        reports[report.id] = report
    return reports


def adapter_states(reports: Sequence[ShardReport]) -> dict[str, list[tuple[str, AdapterReport]]]:
    """``adapter name → [(shard id, report)]``, sorted by shard.

    Two sources: each shard's own word about the plan's adapters, and the gossiped
    ``capabilities`` (an active announcement means "loaded on that shard"), which every shard
    repeats for the whole cluster — used for shards that did not answer themselves.
    """
    found: dict[tuple[str, str], AdapterReport] = {}
    for report in reports:
        for cap in report.capabilities:
            if cap.adapter_id and cap.shard_id and cap.active:
                found[(cap.adapter_id, cap.shard_id)] = AdapterReport(
                    name=cap.adapter_id,
                    state="loaded",
                    accuracy_delta=cap.accuracy_delta,
                    p99_delta_ms=cap.performance_delta_p99_ms,
                )
    for report in reports:  # a shard's word about itself wins over gossip
        for entry in report.adapters:
            found[(entry.name, report.id)] = entry
    grouped: dict[str, list[tuple[str, AdapterReport]]] = {}
    for (name, shard), entry in sorted(found.items()):
        grouped.setdefault(name, []).append((shard, entry))
    return grouped
