"""Cluster-layer settings, typed in one place (pydantic-settings, env prefix ``THEMIS_CLUSTER_``).

Every number the design paper fixes is a named setting here, with the paper's value as the
default (§III-C, §IV-A, §V-A): router thresholds 0.8/0.6/0.4, γ = 0.1, announcement TTL
7200 s, breaker 5 failures / 60 s recovery, 3 retries, 5 s connect / 30 s request timeouts.
The gossip numbers (interval 1 s, fanout 3) spread an update to 1000 shards within
⌈log₃ N⌉ + 2 rounds (tests/cluster/test_gossip_convergence.py); the failure-detector timeouts
are ours (a few gossip rounds each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from themis_core.plan import descending_thresholds


class ClusterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_CLUSTER_", extra="ignore")

    # ---- adaptive domain router (§III-C, §IV-A) -------------------------------------------
    #: Accuracy thresholds θ1 ≥ θ2 ≥ θ3, tried in order; a shard qualifies when α > θ.
    thresholds: tuple[float, float, float] = (0.8, 0.6, 0.4)
    #: Latency penalty weight γ: score = α − γ · (λ / latency_unit_ms), λ = p99 delta in ms.
    gamma: float = Field(0.1, ge=0)
    #: The unit λ is measured in for the penalty. 100 ms reads γ = 0.1 as "0.1 accuracy points
    #: per 100 ms of p99" (the convention RouterSettings in themis_core/plan.py documents); 1000 ms gives the
    #: paper's parenthetical example (100 ms ≙ 0.01 points).
    latency_unit_ms: float = Field(100.0, gt=0)
    #: Scores closer than this are "equal"; LEAST_LOADED (pending_llm_requests) decides among them.
    score_tie_tolerance: float = Field(1e-6, ge=0)
    #: Announcements older than this (announced_at, wall clock) are evicted (τ_ttl).
    announcement_ttl_s: float = Field(7200.0, gt=0)
    #: The paper's per-iteration routing timeout T_iter. Wire it as
    #: ``AdaptiveShardRouter(attempt_timeout_s=...)`` only for calls that finish quickly (time
    #: to first token, embeddings): a whole generation takes longer, so it is not a default.
    routing_iteration_timeout_s: float = Field(2.0, gt=0)
    #: How many times one routed stream may move to another shard when the shard generating
    #: it dies (``cluster/routing/resume.py``); 0 ends it in-band at the first loss, as before.
    stream_resumptions: int = Field(2, ge=0)

    # ---- remote executor (§III-C, §V-A) ----------------------------------------------------
    connect_timeout_s: float = Field(5.0, gt=0)
    request_timeout_s: float = Field(30.0, gt=0)
    #: Extra attempts for idempotent calls (so at most 1 + max_retries attempts).
    max_retries: int = Field(3, ge=0)
    #: Exponential backoff with full jitter: sleep U(0, min(max, base · 2^attempt)).
    retry_backoff_base_s: float = Field(0.05, ge=0)
    retry_backoff_max_s: float = Field(1.0, ge=0)
    breaker_failure_threshold: int = Field(5, ge=1)
    breaker_recovery_s: float = Field(60.0, ge=0)
    #: While a peer's breaker is open, probe its /ready out of band this often and close the
    #: breaker when it answers — a restarted peer gets traffic back in ~1 s instead of waiting
    #: out the recovery window, and the probe costs no client request. 0 disables.
    breaker_health_probe_s: float = Field(1.0, ge=0)
    #: ``/internal`` calls go as frames on one WebSocket per peer (``transport/channel.py``)
    #: instead of one HTTP request each; off: plain HTTP. A peer without channels gets HTTP.
    peer_channel: bool = True
    pool_max_connections: int = Field(100, ge=1)
    pool_max_keepalive: int = Field(20, ge=0)
    #: mTLS material (PEM files written from the cluster Secret). All three or none.
    tls_ca_path: Path | None = None
    tls_cert_path: Path | None = None
    tls_key_path: Path | None = None
    #: Shard certificates carry the shard's DNS names; turn off only for IP-addressed labs.
    tls_check_hostname: bool = True

    # ---- replication ---------------------------------------------------------------------------
    #: Most bytes of hints kept per unreachable peer; past it hints are dropped (counted in
    #: themis_hints_dropped_total) and anti-entropy repairs the peer. 0 = unbounded.
    hint_budget_bytes: int = Field(256 << 20, ge=0)
    #: Merkle-digest anti-entropy with every peer this often (and once after start-up catch-up).
    anti_entropy_interval_s: float = Field(60.0, gt=0)
    #: Tombstones are collected once below every member's watermark; a shard's watermark trails
    #: its clock by this much (longer than any request can be in flight) or its oldest hint.
    tombstone_grace_s: float = Field(3600.0, gt=0)
    #: False (the default): reads go to the key's primary in the current epoch only, which
    #: answers only while it is that primary and holds its lease (linearizable); a dead
    #: primary's keys are readable again once the plan authority fails them over (seconds).
    #: True: reads fall back to any owner (available, NOT linearizable: a replica can serve a
    #: write its coordinator replicated but never committed, or a record older than one read).
    read_from_replicas: bool = False
    #: UNSAFE, for the nemesis suite's deliberate failure only (``e2e/nemesis/README.md``):
    #: owners stop refusing writes from another epoch or coordinator, and a shard that cannot
    #: reach a key's primary coordinates the write on the next owner instead (the split brain
    #: ``replication/fencing.py`` exists to prevent). Read from ``THEMIS_UNSAFE_DISABLE_FENCING``; logged
    #: at ERROR when on.
    unsafe_disable_fencing: bool = Field(False, validation_alias="THEMIS_UNSAFE_DISABLE_FENCING")

    # ---- resharding / catch-up ----------------------------------------------------------------
    #: Entries scanned per handoff page, and the pause between pages (the rate limit).
    migration_page_size: int = Field(500, ge=1)
    migration_page_pause_s: float = Field(0.02, ge=0)
    #: A member unreachable this long no longer holds up the end of a handoff (the purge, and
    #: so the operator's scale-in); it catches up from the replicas when it is back.
    migration_finish_timeout_s: float = Field(120.0, gt=0)

    # ---- gossip (Demers et al. epidemic dissemination) ----------------------------------------
    gossip_interval_s: float = Field(1.0, gt=0)
    gossip_fanout: int = Field(3, ge=1)
    #: A member whose heartbeat has not advanced for this long is suspect, then dead.
    suspect_timeout_s: float = Field(5.0, gt=0)
    dead_timeout_s: float = Field(30.0, gt=0)
    #: HMAC-SHA256 key for gossip messages; required to gossip (the wiring may derive it from
    #: the cluster's mTLS Secret).
    gossip_secret: SecretStr | None = None
    #: Without mTLS, ``/internal/...`` answers only requests signed with ``gossip_secret``
    #: (``security/peer_auth.py``); off leaves them open to anyone who can reach the port.
    internal_auth: bool = True
    #: The oldest signature an ``/internal/...`` request may carry when the receiver reads it:
    #: it must cover a request queued while the receiver was paused or busy, so it is not a
    #: request timeout (replays inside it are refused by nonce).
    internal_signature_max_age_s: float = Field(300.0, gt=0)
    #: How far two shards' clocks may disagree: a signature up to this far ahead of the
    #: receiver's clock is accepted, and the age limit is extended by it.
    internal_clock_skew_s: float = Field(30.0, ge=0)
    #: Messages whose sent_at is further than this from our clock are dropped (replay/skew).
    gossip_max_message_age_s: float = Field(30.0, gt=0)
    #: Announcements stamped further than this in the future are dropped (clock skew guard).
    gossip_max_clock_skew_s: float = Field(60.0, ge=0)
    #: Budget of one push-pull exchange; defaults to the gossip interval.
    gossip_exchange_timeout_s: float | None = Field(None, gt=0)
    #: Largest accepted gossip message (entries), so one peer cannot balloon our state.
    gossip_max_entries: int = Field(20_000, ge=1)

    _descending = field_validator("thresholds")(descending_thresholds)

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSettings:
        if self.dead_timeout_s < self.suspect_timeout_s:
            raise ValueError("dead_timeout_s must be >= suspect_timeout_s")
        tls = (self.tls_ca_path, self.tls_cert_path, self.tls_key_path)
        if any(tls) and not all(tls):
            raise ValueError("set tls_ca_path, tls_cert_path and tls_key_path together (or none)")
        return self

    @property
    def tls_enabled(self) -> bool:
        return self.tls_ca_path is not None

    @property
    def exchange_timeout_s(self) -> float:
        """Default: two intervals but at least 2 s — a busy shard (prefill on both cores) must
        not look unreachable to gossip."""
        return self.gossip_exchange_timeout_s or max(2.0, 2 * self.gossip_interval_s)

    def with_router(self, router: Any) -> ClusterSettings:
        """A copy taking thresholds/gamma/TTL from the plan's ``RouterSettings`` (plan wins)."""
        return self.model_copy(
            update={
                "thresholds": tuple(router.thresholds),
                "gamma": float(router.gamma),
                "announcement_ttl_s": float(router.announcement_ttl_s),
                "latency_unit_ms": float(getattr(router, "latency_unit_ms", self.latency_unit_ms)),
                "score_tie_tolerance": float(
                    getattr(router, "score_tie_tolerance", self.score_tie_tolerance)
                ),
            }
        )
