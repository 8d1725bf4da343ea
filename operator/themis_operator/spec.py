"""Typed views of the ThemisCluster and LoRAAdapter specs.

The CRD schema (crds/) rejects malformed objects at the API server; these models repeat its
defaults (the emulator and old clusters do not apply them) and add the semantic checks a
schema cannot express (RAID mode vs shard count, model source syntax). ``problems()`` returns
human-readable messages instead of raising, so the reconcile loop can report them as a
Degraded condition without building anything.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from themis_core.plan import COPIES_BY_RAID_MODE, MIN_SHARDS_BY_RAID_MODE, RaidMode

from .backups import BootstrapSpec

PVC_SOURCE = _SOURCE_PVC = re.compile(
    r"^pvc://(?P<claim>[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?)/(?P<path>\S+)$"
)
_SOURCE_HTTP = re.compile(r"^https?://[^\s/]+(/\S*)?$")


def error_text(err: ValidationError) -> str:
    """One line for a status message: ``field.path: what is wrong; ...``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class ModelRef(_Model):
    """A GGUF model: where shards get it and the fingerprint they check it against."""

    alias: str | None = None
    source: str = "bundled"
    sha256: str | None = None
    context_size: int = 8192
    dimension: int | None = None

    @property
    def kind(self) -> Literal["bundled", "pvc", "http"] | None:
        if self.source == "bundled":
            return "bundled"
        if _SOURCE_PVC.match(self.source):
            return "pvc"
        if _SOURCE_HTTP.match(self.source):
            return "http"
        return None

    @property
    def pvc(self) -> tuple[str, str]:
        """``(claim, path inside the claim)`` of a ``pvc://`` source."""
        m = _SOURCE_PVC.match(self.source)
        if m is None:
            raise ValueError(f"not a pvc source: {self.source}")
        return m["claim"], m["path"]


class RouterSpec(_Model):
    thresholds: tuple[float, float, float] = (0.8, 0.6, 0.4)
    gamma: float = 0.1
    latency_unit_ms: float = 100.0
    ttl_seconds: float = 7200


class EngineSpec(_Model):
    #: False: shards serve documents and vectors only (no model is loaded; fast test clusters).
    llm: bool = True
    max_batch_size: int = 256
    max_concurrent_requests: int = 128
    max_tokens_per_batch: int = 8192
    chunked_prefill_size: int = 512
    n_draft: int = 8
    #: Where speculative drafts come from. None: "local" with a draftModel, else "prompt_lookup".
    speculative_source: Literal["prompt_lookup", "local", "remote", "none"] | None = None
    speculative_default: bool = False
    #: speculativeSource=remote: a shard id of this cluster, or "auto" (chosen by gossip)
    draft_shard: str | None = None
    #: serve /internal/draft (with draftModel, else the model) and announce it through gossip
    serve_drafts: bool = False


class ResourcesSpec(_Model):
    gpus: int = 0
    cpu: str = "2"
    memory: str = "8Gi"
    cpu_limit: str | None = None
    memory_limit: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[dict, ...] = ()


class StorageSpec(_Model):
    data_size: str = "20Gi"
    weights_size: str = "10Gi"
    storage_class_name: str | None = None


class RaidSpec(_Model):
    #: Stripe the model weights across the shards (THEMIS_RAID_ENABLED). None: on for raid5 and
    #: raid6 when the shards run an LLM, the rule ``themis up`` follows.
    weights: bool | None = None


class LocalObjectReference(_Model):
    name: str


class TLSSpec(_Model):
    enabled: bool = True


class TenantSpec(_Model):
    """One tenant: the operator mints it a client key (``tenant-NAME.key`` in the keys Secret)
    and writes its limits next to the digests the shards mount. An absent limit is no limit."""

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9_-]{0,62})$")
    requests_per_s: float | None = Field(None, gt=0)
    tokens_per_min: int | None = Field(None, gt=0)
    concurrency: int | None = Field(None, gt=0)
    max_priority: int | None = Field(None, ge=-1000, le=1000)
    weight: int = Field(1, ge=1)


class AuthSpec(_Model):
    #: API keys on the public API (the operator keeps them in the ``{name}-api-keys`` Secret).
    enabled: bool = True
    #: Tenants with their own keys, limits and fair share; the other keys are tenant ``default``.
    tenants: tuple[TenantSpec, ...] = ()

    @model_validator(mode="after")
    def _unique_tenants(self) -> AuthSpec:
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError("auth.tenants: each tenant name once")
        return self


class MonitoringSpec(_Model):
    service_monitor: bool = False
    interval: str = "30s"


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class EnvVar(_Model):
    """One extra shard environment variable (Kubernetes' EnvVar: a value or a valueFrom)."""

    name: str = Field(pattern=_ENV_NAME, max_length=256)
    value: str | None = None
    value_from: dict | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self

    def manifest(self) -> dict:
        if self.value_from is not None:
            return {"name": self.name, "valueFrom": dict(self.value_from)}
        return {"name": self.name, "value": self.value or ""}


class FailoverSpec(_Model):
    """Automatic failover: the operator probes every shard, grants their primary leases, and
    moves a dead shard's keys to their in-sync copies under a new plan epoch
    (``themis_core.plan_authority``). Off by default: with it on, shards act as primaries only
    while the operator renews their leases, so the operator's own downtime (an upgrade, a
    reschedule) longer than ``leaseSeconds`` pauses writes and primary reads until it is back."""

    enabled: bool = False
    #: A shard acts as a primary this long after the operator last heard from it.
    lease_seconds: float = Field(2.0, gt=0)
    #: A shard silent this long (and past its lease) leaves the in-sync set.
    failover_after_seconds: float = Field(3.0, gt=0)
    #: The floor of in-sync copies below which ``w=all``/``majority`` writes are refused.
    min_insync: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _lease_first(self) -> FailoverSpec:
        if self.failover_after_seconds < self.lease_seconds:
            raise ValueError("failover.failoverAfterSeconds must be at least failover.leaseSeconds")
        return self


class LoggingSpec(_Model):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"


class ThemisClusterSpec(_Model):
    shards: int = Field(ge=1)
    raid_mode: RaidMode = "raid1"
    #: None: the operator's own version of the shard image (``images.default_shard_image``),
    #: so upgrading the operator rolls the shards; set it to pin a version.
    image: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    model: ModelRef = ModelRef(alias="gemma3-270m")
    draft_model: ModelRef | None = None
    embedding_model: ModelRef | None = None
    vnodes: int = 2048
    ring_seed: int = 0
    router: RouterSpec = RouterSpec()
    engine: EngineSpec = EngineSpec()
    resources: ResourcesSpec = ResourcesSpec()
    storage: StorageSpec = StorageSpec()
    tls: TLSSpec = TLSSpec()
    auth: AuthSpec = AuthSpec()
    monitoring: MonitoringSpec = MonitoringSpec()
    raid: RaidSpec = RaidSpec()
    image_pull_secrets: tuple[LocalObjectReference, ...] = ()
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    priority_class_name: str | None = None
    #: a new cluster's data: ``fromBackup`` restores a ThemisBackup's backup on first start
    bootstrap: BootstrapSpec | None = None
    #: Pod scheduling; merged with (and taking precedence over) ``resources.nodeSelector``
    #: and ``resources.tolerations``, which older specs use.
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[dict, ...] = ()
    #: Extra shard environment (any ``THEMIS_*`` setting the spec has no field for, e.g. the
    #: prefix cache's disk tier); a variable the operator sets itself is refused by name.
    env: tuple[EnvVar, ...] = ()
    logging: LoggingSpec = LoggingSpec()
    failover: FailoverSpec = FailoverSpec()

    @property
    def raid_weights(self) -> bool:
        """Whether shards stripe the model weights (see :class:`RaidSpec`)."""
        if self.raid.weights is not None:
            return self.raid.weights
        return self.engine.llm and self.raid_mode in ("raid5", "raid6")

    def problems(self) -> list[str]:
        """Semantic errors the schema cannot catch; empty when the spec can be built."""
        found: list[str] = []
        need = MIN_SHARDS_BY_RAID_MODE[self.raid_mode]
        if self.shards < need:
            found.append(
                f"{self.raid_mode} needs at least {need} shards, spec.shards is {self.shards}: "
                f"scaling below {need} is refused"
            )
        for field, ref in (
            ("model", self.model),
            ("draftModel", self.draft_model),
            ("embeddingModel", self.embedding_model),
        ):
            if ref is not None and ref.kind is None:
                found.append(
                    f"spec.{field}.source {ref.source!r} is not a known model source "
                    "(bundled, pvc://<claim>/<path>, http(s)://<url>)"
                )
        for field, ref in (("draftModel", self.draft_model), ("embeddingModel", self.embedding_model)):
            if ref is not None and ref.alias:
                found.append(f"spec.{field}.alias is not used (only spec.model has an alias): remove it")
        e = self.engine
        if e.speculative_source == "local" and self.draft_model is None:
            found.append("spec.engine.speculativeSource local needs spec.draftModel")
        if e.speculative_source == "remote" and not e.draft_shard:
            found.append(
                'spec.engine.speculativeSource remote needs spec.engine.draftShard (a shard or "auto")'
            )
        if self.raid.weights and not self.engine.llm:
            found.append("spec.raid.weights needs spec.engine.llm (there is no model to stripe)")
        if self.raid.weights and self.raid_mode == "raid0":
            found.append("spec.raid.weights needs raidMode raid1, raid5 or raid6 (raid0 has no redundancy)")
        t = self.router.thresholds
        if not t[0] >= t[1] >= t[2]:
            found.append(f"spec.router.thresholds must be descending, got {list(t)}")
        copies = COPIES_BY_RAID_MODE[self.raid_mode]
        if self.failover.min_insync > copies:
            found.append(
                f"spec.failover.minInsync {self.failover.min_insync} exceeds the {copies} "
                f"cop{'y' if copies == 1 else 'ies'} of {self.raid_mode}"
            )
        seen: set[str] = set()
        for i, var in enumerate(self.env):
            if var.name in seen:
                found.append(f"spec.env[{i}].name {var.name} is given twice")
            seen.add(var.name)
        return found


class ClusterRef(_Model):
    name: str


class PlacementSpec(_Model):
    replicas: int = Field(1, ge=1)
    shards: tuple[str, ...] = ()


class FederatedSpec(_Model):
    """Federated LoRA rounds (FedAvg) the shards holding ``collection``'s documents run for this
    adapter: each trains ``local_steps`` per round on its own data, shard 0 aggregates."""

    rounds: int = Field(1, ge=1, le=100)
    local_steps: int = Field(10, ge=1, le=2000)
    collection: str = Field(pattern=r"^[a-z0-9_-]{1,64}$")
    text_field: str = "text"


class LoRAAdapterSpec(_Model):
    cluster_ref: ClusterRef
    domain: str
    #: where shards fetch the adapter; none for a federated adapter (the shards train it)
    source: str | None = None
    sha256: str | None = None
    rank: int = 16
    scale: float = 1.0
    placement: PlacementSpec = PlacementSpec()
    federated: FederatedSpec | None = None

    @model_validator(mode="after")
    def _source_or_federated(self) -> LoRAAdapterSpec:
        if not self.source and self.federated is None:
            raise ValueError("an adapter needs a source, or federated rounds that train it")
        return self
