"""``GET /v1/cluster/status``: the one contract between a shard and the operator.

The shard builds its answer from these models (api/cluster.py, also its response_model) and the
operator's probe parses answers with them. Both sides import this module, so it depends on
pydantic alone: the operator image has none of the shard's heavy dependencies.

Every field has a default so that the operator can still read a partial answer (a shard of
another version, a test double) instead of calling the shard unreachable; a shard always sends
every field. Unknown fields are ignored for the same reason.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")


class MemberLoad(_Part):
    """The load a member last gossiped (the shard's ``ShardLoad``)."""

    pending_llm_requests: int = 0
    avg_llm_queue_ms: float = 0.0
    active_lora_adapters: int = 0
    #: sha256 of the model the member drafts for ("" = serves no drafts).
    draft_of: str = ""


class MemberStatus(_Part):
    """One plan member as the answering shard sees it."""

    shard_id: str = ""
    url: str = ""
    #: alive / suspect / dead (gossip), alive / dead (circuit breakers only); None: not said.
    state: str | None = None
    breaker: str = "closed"
    #: None until the member's first heartbeat reached the answering shard.
    load: MemberLoad | None = None


class AdapterCapability(_Part):
    """A gossiped adapter announcement (``AdapterCapabilityAnnouncement``) plus its age."""

    message_type: str = "adapter_capability"
    shard_id: str = ""
    adapter_id: str = ""
    domain: str = ""
    accuracy_delta: float | None = None
    performance_delta_p99_ms: float | None = None
    training_samples: int = 0
    federation_round: int = 0
    announced_at: float = 0.0
    #: False: withdrawn (the adapter was unloaded there).
    active: bool = True
    age_s: float = 0.0


class PlanAdapters(_Part):
    """The plan's adapters this shard loaded, and the ones it could not load (name → why)."""

    loaded: list[str] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict)


class MigrationStatus(_Part):
    """The shard's current hand-off: the operator shrinks the StatefulSet once it is drained."""

    #: The ring version the state refers to (a "drained" for an older ring must not count).
    ring_version: int | None = None
    #: idle / migrating / done / purged / drained
    state: str = "idle"
    keys_received: int = 0
    bytes_received: int = 0
    keys_purged: int = 0
    keys_handed_over: int = 0
    peers_pending: list[str] = Field(default_factory=list)
    unreachable: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class Speculation(_Part):
    """Where this shard's speculative drafts come from."""

    source: str = ""
    default: bool = False
    draft_shard: str | None = None
    serves_drafts_for: str | None = None


class RingInfo(_Part):
    """The plan's ring (``ring.RingSpec``): enough for a client to route a key to its primary."""

    shards: list[str] = Field(default_factory=list)
    vnodes: int = 0
    seed: int = 0
    version: int = 0


class StorageStatus(_Part):
    """Whether the answering shard's disk takes writes (``storage/health.py``)."""

    writable: bool = True
    #: insufficient_storage (full) or storage_failed (another IO error); None while writable.
    code: str | None = None
    reason: str | None = None
    unwritable_s: float = 0.0


class ClusterStatus(_Part):
    shard_id: str = ""
    cluster: str = ""
    ring_version: int | None = None
    #: The plan epoch and the in-sync set (failover: ``plan_authority.in_sync``).
    epoch: int | None = None
    out_of_sync: list[str] = Field(default_factory=list)
    rejoining: list[str] = Field(default_factory=list)
    min_insync: int = 1
    raid_mode: str = ""
    copies: int = 0
    #: None from a shard that predates it.
    ring: RingInfo | None = None
    members: list[MemberStatus] = Field(default_factory=list)
    #: Every live announcement this shard knows of, for the whole cluster (not just its own).
    capabilities: list[AdapterCapability] = Field(default_factory=list)
    #: Peer → hinted writes waiting for it.
    hints_pending: dict[str, int] = Field(default_factory=dict)
    plan_adapters: PlanAdapters = Field(default_factory=PlanAdapters)
    gossip: bool = False
    draining: list[str] = Field(default_factory=list)
    migration: MigrationStatus = Field(default_factory=MigrationStatus)
    #: None on a shard without an LLM.
    speculation: Speculation | None = None
    #: The answering shard's own disk: not writable makes it unready until a probe write succeeds.
    storage: StorageStatus = Field(default_factory=StorageStatus)

    def member(self, shard_id: str) -> MemberStatus | None:
        return next((m for m in self.members if m.shard_id == shard_id), None)
