"""Per-tenant metrics (label ``tenant``: the names in the keys file, so a bounded set)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class TenantMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "themis_tenant_requests_total",
            "Inference requests per tenant by admission outcome (admitted, throttled, refused)",
            ["tenant", "outcome"],
            registry=registry,
        )
        self.throttled = Counter(
            "themis_tenant_throttled_total",
            "Requests answered 429 per tenant by the limit they hit",
            ["tenant", "limit"],
            registry=registry,
        )
        self.tokens = Counter(
            "themis_tenant_tokens_total",
            "Generation tokens charged to the tenant's tokens_per_min (max_tokens × n at admission)",
            ["tenant"],
            registry=registry,
        )
        self.inflight = Gauge(
            "themis_tenant_inflight",
            "Admitted requests not yet answered, per tenant",
            ["tenant"],
            registry=registry,
        )
        self.waiting = Gauge(
            "themis_tenant_waiting",
            "Requests waiting for a node slot in the fair queue, per tenant",
            ["tenant"],
            registry=registry,
        )
