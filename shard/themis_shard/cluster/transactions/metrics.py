"""Transaction metrics: outcomes by kind, and the intents still waiting for a decision."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class TxnMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.outcomes = Counter(
            "themis_txn_outcomes_total",
            "Transactions coordinated here by kind (single: one coordinating shard; cross: two-phase "
            "commit) and outcome (committed, aborted, unknown: a decider did not confirm the commit)",
            ["kind", "outcome"],
            registry=registry,
        )
        self.in_doubt = Gauge(
            "themis_txn_in_doubt",
            "Prepared transaction intents on this shard waiting for a decision",
            registry=registry,
        )
        self.resolved = Counter(
            "themis_txn_resolved_total",
            "In-doubt transactions settled here by termination (asking or fencing), by decision",
            ["decision"],
            registry=registry,
        )
