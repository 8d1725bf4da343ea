"""The cluster plan: the one document every shard reads to know the cluster.

``build_plan`` is a pure function from a :class:`ClusterSpec` (what the user asked for: shard
count, RAID mode, vnodes, router settings, adapter placement, member addresses) and the
previous plan to the next :class:`ClusterPlan`. The operator writes its output into a
ConfigMap; ``themis up`` writes it to a file. Shards never call the Kubernetes API: they load
the plan from that file and reload it when it changes.

The ring version increases exactly when the ring's membership changes (scale out/in), so
shards can tell a resharding event from a settings change. The plan also carries the ring it
replaced (``previous_ring``): every shard, even one restarted mid-migration, can then compute
which keys changed owner. Shards being removed stay ``members`` but leave the ring
(``draining``): they keep serving reads of what they hold until the new owners have it, and
report "drained" before the operator (or ``themis scale``) stops them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .data_format import FormatTooNew
from .ring import DEFAULT_VNODES, HashRing, RingSpec

RaidMode = Literal["raid0", "raid1", "raid5", "raid6"]

#: Document copies per RAID mode: the number of shards that may fail without losing data + 1.
COPIES_BY_RAID_MODE: dict[str, int] = {"raid0": 1, "raid1": 2, "raid5": 2, "raid6": 3}
#: Shards a RAID mode needs at the least (raid5: 2 data + 1 parity; raid6: 2 data + 2 parity).
MIN_SHARDS_BY_RAID_MODE: dict[str, int] = {"raid0": 1, "raid1": 2, "raid5": 3, "raid6": 4}
#: Shards that may be down at once without losing data or weights.
FAULT_TOLERANCE_BY_RAID_MODE: dict[str, int] = {"raid0": 0, "raid1": 1, "raid5": 1, "raid6": 2}


#: The plan layout this code reads and writes.
PLAN_FORMAT = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def descending_thresholds(v: tuple[float, float, float]) -> tuple[float, float, float]:
    """θ1 ≥ θ2 ≥ θ3: the router tries the strictest tier first."""
    if not (v[0] >= v[1] >= v[2]):
        raise ValueError("router thresholds must be descending (θ1 ≥ θ2 ≥ θ3)")
    return v


class RouterSettings(_Strict):
    """The adaptive domain router's knobs (paper §III-C, §IV-A)."""

    thresholds: tuple[float, float, float] = (0.8, 0.6, 0.4)
    #: Latency penalty weight: score = α − γ·(λ / latency_unit_ms); "γ = 0.1 per 100 ms" by
    #: default. (The paper's parenthetical example, 100 ms ≙ 0.01 points, is latency_unit_ms=1000.)
    gamma: float = Field(0.1, ge=0)
    latency_unit_ms: float = Field(100.0, gt=0)
    #: Scores closer than this tie; LEAST_LOADED (pending_llm_requests) decides among them.
    score_tie_tolerance: float = Field(1e-6, ge=0)
    announcement_ttl_s: float = Field(7200, gt=0)

    _descending = field_validator("thresholds")(descending_thresholds)


class AdapterPlacement(_Strict):
    """A LoRA adapter the shards in ``shards`` load themselves (the operator never calls them)."""

    name: str
    domain: str
    source: str
    shards: tuple[str, ...] = ()
    rank: int | None = Field(None, ge=1)
    scale: float = Field(1.0, gt=0)
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")


class FailoverSettings(_Strict):
    """Automatic failover by the plan authority (``plan_authority/in_sync.py``): a ring member that has not
    answered the authority's probes for ``failover_after_s``, and whose last lease (``lease_s``
    from the last probe that granted one) has run out, leaves the in-sync set under a new
    epoch. A shard acts as a primary only while its lease holds (``cluster/replication/lease.py``)."""

    lease_s: float = Field(2.0, gt=0)
    failover_after_s: float = Field(3.0, gt=0)
    #: The authority probes every member this often, each probe bounded by ``probe_timeout_s``.
    probe_interval_s: float = Field(0.5, gt=0)
    probe_timeout_s: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _lease_shorter(self) -> FailoverSettings:
        if self.failover_after_s < self.lease_s:
            raise ValueError("failover_after_s must be at least lease_s")
        return self


class Member(_Strict):
    shard_id: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
    #: Public API (clients).
    url: str
    #: Shard-to-shard listener (mTLS when the cluster has TLS); None = the public ``url``.
    internal_url: str | None = None

    @property
    def peer_url(self) -> str:
        return self.internal_url or self.url


class ClusterSpec(_Strict):
    """What a cluster should look like; the operator derives it from a ThemisCluster."""

    name: str = "themis"
    members: tuple[Member, ...]
    #: Members leaving the ring (scale-in): they hand their data off, then report drained.
    draining: tuple[str, ...] = ()
    raid_mode: RaidMode = "raid1"
    vnodes: int = Field(DEFAULT_VNODES, ge=1, le=65536)
    ring_seed: int = Field(0, ge=0, lt=1 << 64)
    router: RouterSettings = RouterSettings()
    adapters: tuple[AdapterPlacement, ...] = ()
    tls: bool = False
    #: Identity of the cluster object (the ThemisCluster's uid): ring versions only ever grow
    #: within one uid, so a shard refuses a plan with a lower version for the same uid.
    cluster_uid: str = ""
    #: Automatic failover (None: off; a dead primary's keys wait for the plan to drop it).
    failover: FailoverSettings | None = None
    #: The floor of in-sync copies below which ``w=all``/``majority`` writes are refused (503
    #: ``not_enough_replicas``), like Kafka's ``min.insync.replicas``.
    min_insync: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _satisfiable(self) -> ClusterSpec:
        ids = [m.shard_id for m in self.members]
        if len(set(ids)) != len(ids):
            raise ValueError("shard ids must be unique")
        unknown = set(self.draining) - set(ids)
        if unknown:
            raise ValueError(f"draining shards {sorted(unknown)} are not members")
        need = MIN_SHARDS_BY_RAID_MODE[self.raid_mode]
        active = len(ids) - len(set(self.draining))
        if active < need:
            raise ValueError(f"{self.raid_mode} needs at least {need} shards in the ring, got {active}")
        if self.min_insync > min(COPIES_BY_RAID_MODE[self.raid_mode], active):
            raise ValueError(f"min_insync {self.min_insync} exceeds the {self.raid_mode} copies")
        return self

    @property
    def ring_shards(self) -> tuple[str, ...]:
        return tuple(m.shard_id for m in self.members if m.shard_id not in self.draining)


class ClusterPlan(_Strict):
    """What every shard reads. Serialised as JSON into the ConfigMap / plan file."""

    cluster: str
    members: tuple[Member, ...]
    ring: dict
    #: The ring this one replaced (migration source); None for a cluster's first ring.
    previous_ring: dict | None = None
    draining: tuple[str, ...] = ()
    raid_mode: RaidMode
    copies: int
    fault_tolerance: int
    router: RouterSettings
    adapters: tuple[AdapterPlacement, ...] = ()
    tls: bool = False
    cluster_uid: str = ""
    #: The plan epoch: grows whenever the ring or the in-sync set changes (0 in plans written
    #: before epochs: the ring version stands in). Writes are fenced by it.
    epoch: int = 0
    #: Ring members out of the in-sync set: fenced (no writes, never primary) until they have
    #: caught up; the authority (``plan_authority/in_sync.py``) moves them, never more than ``copies - 1``.
    out_of_sync: tuple[str, ...] = ()
    #: Back in the in-sync set (they take every write synchronously) but not primary yet: the
    #: authority hands their keys back once nothing they missed is still pending for them.
    rejoining: tuple[str, ...] = ()
    failover: FailoverSettings | None = None
    min_insync: int = 1
    #: The plan's format (``data_format``). Left out of the JSON while it is 1, so shards of
    #: 0.1.0 (which forbid unknown fields) keep reading plans from a newer operator mid-upgrade.
    format: int = PLAN_FORMAT

    @model_validator(mode="after")
    def _in_sync_kept(self) -> ClusterPlan:
        shards = set(self.ring["shards"])
        if not set(self.out_of_sync) | set(self.rejoining) <= shards:
            raise ValueError("out_of_sync and rejoining name ring members only")
        if set(self.out_of_sync) & set(self.rejoining):
            raise ValueError("a shard is either out of sync or rejoining, not both")
        if len(self.out_of_sync) > self.copies - 1:  # every key keeps an in-sync copy
            raise ValueError(
                f"at most {self.copies - 1} shard(s) may be out of sync, not {len(self.out_of_sync)}"
            )
        return self

    @property
    def plan_epoch(self) -> int:
        """What writes are fenced by (the ring version in plans written before epochs)."""
        return max(self.epoch, self.ring_version)

    @property
    def ring_spec(self) -> RingSpec:
        return RingSpec.from_dict(self.ring)

    @property
    def ring_version(self) -> int:
        return int(self.ring["version"])

    def hash_ring(self) -> HashRing:
        return HashRing.cached(self.ring_spec)

    def previous_hash_ring(self) -> HashRing | None:
        return HashRing.cached(RingSpec.from_dict(self.previous_ring)) if self.previous_ring else None

    def member(self, shard_id: str) -> Member:
        for m in self.members:
            if m.shard_id == shard_id:
                return m
        raise KeyError(shard_id)

    def to_json(self) -> str:
        exclude = {"format"} if self.format == 1 else set()
        # Failover's fields at their neutral values are left out too: a plan without them is
        # what shards of 0.1.0 (which forbid unknown fields) read.
        neutral = {
            "epoch": not self.epoch,
            "out_of_sync": not self.out_of_sync,
            "rejoining": not self.rejoining,
            "failover": self.failover is None,
            "min_insync": self.min_insync == 1,
        }
        exclude |= {name for name, unset in neutral.items() if unset}
        return json.dumps(self.model_dump(mode="json", exclude=exclude), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ClusterPlan:
        raw = json.loads(text)
        found = raw.get("format", 1) if isinstance(raw, dict) else 1
        if isinstance(found, int) and found > PLAN_FORMAT:
            raise FormatTooNew("the cluster plan", found, PLAN_FORMAT)
        return cls.model_validate(raw)

    @classmethod
    def load(cls, path: str | Path) -> ClusterPlan:
        return cls.from_json(Path(path).read_text())


def build_plan(spec: ClusterSpec, previous: ClusterPlan | None = None) -> ClusterPlan:
    """Pure: the plan for ``spec``; the ring version bumps only when the ring itself changes."""
    shard_ids = spec.ring_shards
    version = 1
    previous_ring = None
    epoch = 1
    out_of_sync: tuple[str, ...] = ()
    rejoining: tuple[str, ...] = ()
    if previous is not None:
        old = previous.ring_spec
        same_ring = (old.shards, old.vnodes, old.seed) == (shard_ids, spec.vnodes, spec.ring_seed)
        version = old.version if same_ring else old.version + 1
        previous_ring = previous.previous_ring if same_ring else previous.ring
        # The in-sync set is the authority's (plan_authority.in_sync), not the spec's: carried over, minus
        # shards that left the ring.
        out_of_sync = tuple(s for s in previous.out_of_sync if s in shard_ids)
        rejoining = tuple(s for s in previous.rejoining if s in shard_ids)
        changed = not same_ring or (out_of_sync, rejoining) != (previous.out_of_sync, previous.rejoining)
        epoch = max(previous.plan_epoch + changed, version)
    ring = RingSpec(shard_ids, spec.vnodes, spec.ring_seed, version)
    return ClusterPlan(
        cluster=spec.name,
        members=spec.members,
        ring=ring.to_dict(),
        previous_ring=previous_ring,
        draining=tuple(spec.draining),
        raid_mode=spec.raid_mode,
        copies=min(COPIES_BY_RAID_MODE[spec.raid_mode], len(shard_ids)),
        fault_tolerance=FAULT_TOLERANCE_BY_RAID_MODE[spec.raid_mode],
        router=spec.router,
        adapters=spec.adapters,
        tls=spec.tls,
        cluster_uid=spec.cluster_uid,
        epoch=epoch if epoch > version else 0,  # 0: the ring version is the epoch
        out_of_sync=out_of_sync,
        rejoining=rejoining,
        failover=spec.failover,
        min_insync=spec.min_insync,
    )


def with_in_sync(plan: ClusterPlan, out_of_sync: tuple[str, ...], rejoining: tuple[str, ...]) -> ClusterPlan:
    """The next plan of the authority: the same ring, another in-sync set, the next epoch."""
    return ClusterPlan.model_validate(
        {
            **plan.model_dump(),
            "out_of_sync": tuple(sorted(out_of_sync)),
            "rejoining": tuple(sorted(rejoining)),
            "epoch": plan.plan_epoch + 1,
        }
    )


def is_rollback(current: ClusterPlan, new: ClusterPlan) -> bool:
    """A plan for the same cluster (uid) with a lower ring version than the one in use: stale
    (a restored ConfigMap, an operator that lost its state) and never adopted."""
    same = bool(new.cluster_uid) and new.cluster_uid == current.cluster_uid
    return same and (new.ring_version, new.plan_epoch) < (current.ring_version, current.plan_epoch)


def single_shard_plan(shard_id: str, url: str) -> ClusterPlan:
    """The plan of a shard started on its own (no plan file): a one-member raid0 cluster."""
    return build_plan(
        ClusterSpec(name=shard_id, members=(Member(shard_id=shard_id, url=url),), raid_mode="raid0")
    )
